from django.urls import path

from webapp.training import views

app_name = "training"
urlpatterns = [
    path("", views.run_list, name="run_list"),
    path("launch/", views.run_launch, name="run_launch"),
    path("launch/fields/", views.launch_fields, name="launch_fields"),
    path("launch/plan/", views.launch_plan_view, name="launch_plan"),
    path("runs/<int:run_id>/", views.run_detail, name="run_detail"),
    path("runs/<int:run_id>/status/", views.run_status, name="run_status"),
    path("runs/<int:run_id>/log/", views.run_log, name="run_log"),
    path("runs/<int:run_id>/stop/", views.run_stop, name="run_stop"),
    path("runs/<int:run_id>/resume/", views.run_resume, name="run_resume"),
    path(
        "checkpoints/<int:checkpoint_id>/promote/", views.checkpoint_promote_view, name="checkpoint_promote"
    ),
    path("compare/", views.run_compare, name="run_compare"),
    path("merge/", views.policy_merge, name="policy_merge"),
]
