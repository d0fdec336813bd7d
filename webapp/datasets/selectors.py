"""Reads of datasets and versions."""

from __future__ import annotations

from django.db.models import Count, Max, QuerySet

from webapp.datasets.models import Dataset, DatasetVersion


def datasets_list() -> QuerySet[Dataset]:
    """Datasets with their number of versions and latest version number."""
    return Dataset.objects.annotate(n_versions=Count("versions"), latest=Max("versions__number")).order_by(
        "name"
    )


def versions_of(*, dataset: Dataset) -> QuerySet[DatasetVersion]:
    """A dataset's versions, newest first."""
    return dataset.versions.select_related("parent", "iteration").order_by("-number")
