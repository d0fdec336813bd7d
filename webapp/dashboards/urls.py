from django.urls import path

from webapp.dashboards import views

app_name = "dashboards"
urlpatterns = [
    path("", views.home, name="home"),
    path("dashboards/rollouts/", views.rollouts, name="rollouts"),
    path("dashboards/success/", views.success, name="success"),
    path("dashboards/health/", views.health, name="health"),
    path("dashboards/annotation/", views.annotation, name="annotation"),
    path("metrics", views.metrics, name="metrics"),
]
