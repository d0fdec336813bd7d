from django.urls import path

from webapp.annotation import views

app_name = "annotation"
urlpatterns = [
    path("", views.queue, name="queue"),
    path("start/", views.start, name="start"),
    path("assign/", views.assign, name="assign"),
    path("episodes/<int:episode_id>/", views.session, name="session"),
    path("episodes/<int:episode_id>/abandon/", views.abandon, name="abandon"),
    path("episodes/<int:episode_id>/fork/", views.fork, name="fork"),
]
