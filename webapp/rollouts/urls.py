from django.urls import path

from webapp.rollouts import views

app_name = "rollouts"
urlpatterns = [
    path("", views.batch_list, name="batch_list"),
    path("launch/", views.batch_launch, name="batch_launch"),
    path("<int:pk>/", views.batch_detail, name="batch_detail"),
    path("<int:pk>/cancel/", views.batch_stop, name="batch_cancel"),
    path("tasks/<int:task_id>/recheck/", views.task_recheck, name="task_recheck"),
]
