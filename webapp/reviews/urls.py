from django.urls import path

from webapp.reviews import views

app_name = "reviews"
urlpatterns = [path("", views.queue, name="queue")]
