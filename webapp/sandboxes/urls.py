from django.urls import path

from webapp.sandboxes import views

app_name = "sandboxes"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("wall/", views.wall, name="wall"),
    # Before the catch-all control route, which would take "live" and "ticket" for actions.
    path("<int:pk>/live/", views.live, name="live"),
    path("<int:pk>/ticket/", views.ticket, name="ticket"),
    path("<int:pk>/<str:action>/", views.control, name="control"),
]
