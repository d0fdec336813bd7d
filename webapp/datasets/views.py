"""Dataset pages."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.views.decorators.http import require_GET

from webapp.accounts.access import page_requires
from webapp.datasets.models import Dataset
from webapp.datasets.selectors import datasets_list, versions_of


@require_GET
@page_requires("datasets.view_dataset")
def dataset_list(request: HttpRequest) -> HttpResponse:
    """Every dataset with its latest version."""
    return render(request, "datasets/dataset_list.html", {"datasets": datasets_list()})


@require_GET
@page_requires("datasets.view_dataset", "datasets.view_datasetversion")
def dataset_detail(request: HttpRequest, dataset_id: int) -> HttpResponse:
    """A dataset's versions with their lineage."""
    dataset = get_object_or_404(Dataset, pk=dataset_id)
    return render(
        request,
        "datasets/dataset_detail.html",
        {"dataset": dataset, "versions": versions_of(dataset=dataset)},
    )
