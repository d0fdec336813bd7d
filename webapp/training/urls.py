from django.urls import path

from webapp.training import views

app_name = "training"
urlpatterns = [path("", views.run_list, name="run_list")]
