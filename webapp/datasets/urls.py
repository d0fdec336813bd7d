from django.urls import path

from webapp.datasets import views

app_name = "datasets"
urlpatterns = [
    path("", views.dataset_list, name="dataset_list"),
    path("<int:dataset_id>/", views.dataset_detail, name="dataset_detail"),
    path("versions/<int:version_id>/", views.version_detail, name="version_detail"),
    path("versions/<int:version_id>/exports/", views.export_start, name="export_start"),
    path("versions/<int:version_id>/withdraw/", views.version_withdraw_view, name="version_withdraw"),
    path("diff/", views.version_diff, name="version_diff"),
    path("exports/<int:export_id>/", views.export_row, name="export_row"),
    path("exports/<int:export_id>/cancel/", views.export_stop, name="export_cancel"),
    path("exports/<int:export_id>/download/", views.export_download, name="export_download"),
    path("flywheel/", views.flywheel, name="flywheel"),
    path("flywheel/close/", views.flywheel_close, name="flywheel_close"),
]
