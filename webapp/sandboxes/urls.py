from django.urls import path

from webapp.sandboxes import views

app_name = "sandboxes"
urlpatterns = [
    path("", views.overview, name="overview"),
    path("<int:pk>/<str:action>/", views.control, name="control"),
]
