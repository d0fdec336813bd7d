"""JSON API for datasets and their immutable versions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Query, Router, Schema

from webapp.common.api import ErrorOut, PageIn, api_enum, object_or_404, page_of, require_perm
from webapp.datasets.models import Dataset, DatasetVersion
from webapp.datasets.selectors import datasets_list, versions_of

router = Router(tags=["datasets"])

# Documented in the OpenAPI description; the handlers in webapp.api write these bodies.
DENIED = {401: ErrorOut, 403: ErrorOut}

DatasetKind = api_enum("DatasetKind", Dataset.Kind)


class DatasetOut(Schema):
    id: int
    name: str
    kind: DatasetKind
    description: str
    num_versions: int
    latest_version: int | None
    created_at: datetime

    @staticmethod
    def resolve_num_versions(obj: Dataset) -> int:
        return obj.n_versions  # type: ignore[attr-defined]

    @staticmethod
    def resolve_latest_version(obj: Dataset) -> int | None:
        return obj.latest  # type: ignore[attr-defined]


class DatasetPage(Schema):
    count: int
    items: list[DatasetOut]


class DatasetVersionOut(Schema):
    id: int
    number: int
    num_episodes: int
    num_steps: int
    parent_number: int | None
    iteration_number: int | None
    lineage: dict[str, Any]
    notes: str
    created_at: datetime
    sealed_at: datetime | None

    @staticmethod
    def resolve_parent_number(obj: DatasetVersion) -> int | None:
        return obj.parent.number if obj.parent_id else None

    @staticmethod
    def resolve_iteration_number(obj: DatasetVersion) -> int | None:
        return obj.iteration.number if obj.iteration_id else None


class DatasetVersionPage(Schema):
    count: int
    items: list[DatasetVersionOut]


@router.get("/datasets", response={200: DatasetPage, 400: ErrorOut, **DENIED})
def dataset_list(request: HttpRequest, page: Query[PageIn]) -> dict[str, Any]:
    """Datasets by name, with how many versions each has and the latest version number."""
    require_perm(request, "datasets.view_dataset")
    return page_of(datasets_list(), page)


@router.get(
    "/datasets/{dataset_id}/versions",
    response={200: DatasetVersionPage, 400: ErrorOut, 404: ErrorOut, **DENIED},
)
def dataset_versions(request: HttpRequest, dataset_id: int, page: Query[PageIn]) -> dict[str, Any]:
    """A dataset's versions, newest first: sizes, the parent version's number and lineage."""
    require_perm(request, "datasets.view_dataset", "datasets.view_datasetversion")
    dataset = object_or_404(datasets_list(), dataset_id, "dataset")
    return page_of(versions_of(dataset=dataset), page)
