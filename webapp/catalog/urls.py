from django.urls import path

from webapp.catalog import views

app_name = "catalog"
urlpatterns = [
    path("", views.task_list, name="task_list"),
    path("<int:task_id>/", views.task_detail, name="task_detail"),
    path("import-osworld/", views.osworld_upload, name="osworld_upload"),
]
