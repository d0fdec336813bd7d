from django.apps import AppConfig


class DashboardsConfig(AppConfig):
    name = "webapp.dashboards"
    label = "dashboards"
