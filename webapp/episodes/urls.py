from django.urls import path

from webapp.episodes import views

app_name = "episodes"
urlpatterns = [
    path("", views.episode_list, name="episode_list"),
    path("<int:episode_id>/", views.episode_detail, name="episode_detail"),
    path("<int:episode_id>/steps/<int:index>/screenshot.png", views.step_screenshot, name="step_screenshot"),
    path("<int:episode_id>/steps/<int:index>/thumb.jpg", views.step_thumbnail, name="step_thumbnail"),
    path("<int:episode_id>/final/screenshot", views.final_screenshot, name="final_screenshot"),
    path("<int:episode_id>/final/thumb.jpg", views.final_thumbnail, name="final_thumbnail"),
]
