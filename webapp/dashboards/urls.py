from django.urls import path

from webapp.dashboards import views

app_name = "dashboards"
urlpatterns = [path("", views.home, name="home")]
