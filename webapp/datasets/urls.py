from django.urls import path

from webapp.datasets import views

app_name = "datasets"
urlpatterns = [
    path("", views.dataset_list, name="dataset_list"),
    path("<int:dataset_id>/", views.dataset_detail, name="dataset_detail"),
]
