"""JSON API for datasets and their immutable versions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import FileResponse, HttpRequest, HttpResponse, StreamingHttpResponse
from ninja import Field, Query, Router, Schema, Status
from ninja.errors import HttpError

from webapp.common.api import ErrorOut, PageIn, api_enum, object_or_404, page_of, require_perm
from webapp.common.text import MAX_NOTE
from webapp.datasets.exports import (
    ExportBusy,
    export_archive,
    export_cancel,
    export_create,
    export_file,
    export_files,
)
from webapp.datasets.models import (
    Dataset,
    DatasetExport,
    DatasetMembership,
    DatasetVersion,
    FlywheelIteration,
)
from webapp.datasets.rounds import RoundError, round_enqueue
from webapp.datasets.selectors import (
    datasets_list,
    round_closing,
    rounds_chart,
    rounds_closed,
    rounds_trend,
    version_get,
    version_members,
    version_withdrawal,
    versions_diff,
    versions_of,
)
from webapp.datasets.services import DatasetError, VersionGone

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


# --- versions: detail, members, diff, pins --------------------------------------------------------


class VersionDetailOut(DatasetVersionOut):
    dataset: str
    withdrawn: str | None

    @staticmethod
    def resolve_dataset(obj: DatasetVersion) -> str:
        return obj.dataset.name

    @staticmethod
    def resolve_withdrawn(obj: DatasetVersion) -> str | None:
        withdrawal = version_withdrawal(version=obj)
        return withdrawal.reason if withdrawal else None


class MemberOut(Schema):
    episode: int
    task: str
    source: str
    policy_version: str | None
    v: int | None
    reasons: list[str]

    @staticmethod
    def resolve_episode(obj: DatasetMembership) -> int:
        return obj.episode_id

    @staticmethod
    def resolve_task(obj: DatasetMembership) -> str:
        return obj.episode.task.slug

    @staticmethod
    def resolve_source(obj: DatasetMembership) -> str:
        return obj.episode.source

    @staticmethod
    def resolve_policy_version(obj: DatasetMembership) -> str | None:
        return obj.episode.policy_version.name if obj.episode.policy_version_id else None

    @staticmethod
    def resolve_v(obj: DatasetMembership) -> int | None:
        return (obj.validator or {}).get("v")

    @staticmethod
    def resolve_reasons(obj: DatasetMembership) -> list[str]:
        return list((obj.validator or {}).get("reasons", []))


class MemberPage(Schema):
    count: int
    items: list[MemberOut]


class MemberFilters(PageIn):
    v: int | None = Field(None, ge=0, le=1, description="Only episodes with this verdict V(s)")


def _version_or_404(version_id: int) -> DatasetVersion:
    version = version_get(version_id=version_id)
    if version is None:
        raise HttpError(404, f"no dataset version with id {version_id}")
    return version


@router.get("/dataset-versions/{version_id}", response={200: VersionDetailOut, 404: ErrorOut, **DENIED})
def dataset_version_detail(request: HttpRequest, version_id: int) -> DatasetVersion:
    """One version: sizes, lineage, and whether it was withdrawn."""
    require_perm(request, "datasets.view_datasetversion")
    return _version_or_404(version_id)


@router.get(
    "/dataset-versions/{version_id}/members",
    response={200: MemberPage, 400: ErrorOut, 404: ErrorOut, **DENIED},
)
def dataset_version_members(
    request: HttpRequest, version_id: int, filters: Query[MemberFilters]
) -> dict[str, Any]:
    """A version's episodes with the verdict V(s) and the reasons behind it."""
    require_perm(request, "datasets.view_datasetversion")
    version = _version_or_404(version_id)
    return page_of(version_members(version=version, v=filters.v), filters)


@router.get("/dataset-diff", response={200: dict[str, Any], 400: ErrorOut, 404: ErrorOut, **DENIED})
def dataset_versions_diff(request: HttpRequest, a: int, b: int) -> dict[str, Any]:
    """Episodes added, removed and re-judged going from version `a` to version `b`."""
    require_perm(request, "datasets.view_datasetversion")
    return versions_diff(a=_version_or_404(a), b=_version_or_404(b)).to_json()


# --- exports ----------------------------------------------------------------------------------------

ExportKind = api_enum("ExportKind", DatasetExport.Kind)
ExportFormat = api_enum("ExportFormat", DatasetExport.Format)
ExportStatus = api_enum("ExportStatus", DatasetExport.Status)


class ExportIn(Schema):
    kind: ExportKind  # type: ignore[valid-type]
    fmt: ExportFormat = "jsonl"  # type: ignore[valid-type,assignment]
    options: dict[str, Any] = Field(default_factory=dict, description="last_n, coords, shard_records, layout")


class ExportOut(Schema):
    id: int
    version: int
    kind: str
    fmt: str
    status: ExportStatus  # type: ignore[valid-type]
    percent: int
    done_steps: int
    total_steps: int
    bytes: int
    error: str
    options: dict[str, Any]
    manifest: dict[str, Any]
    created_at: datetime
    finished_at: datetime | None

    @staticmethod
    def resolve_version(obj: DatasetExport) -> int:
        return obj.version_id

    @staticmethod
    def resolve_manifest(obj: DatasetExport) -> dict[str, Any]:
        # The per-episode verdicts can be large; they are in manifest.json itself.
        return {k: v for k, v in (obj.manifest or {}).items() if k != "meta"}


def _export_or_404(request: HttpRequest, export_id: int) -> DatasetExport:
    require_perm(request, "datasets.export_dataset")
    return object_or_404(DatasetExport.objects.select_related("version__dataset"), export_id, "export")


@router.post(
    "/dataset-versions/{version_id}/exports",
    response={202: ExportOut, 400: ErrorOut, 404: ErrorOut, 409: ErrorOut, 410: ErrorOut, **DENIED},
)
def dataset_export_create(request: HttpRequest, version_id: int, body: ExportIn) -> Status:
    """Start exporting a version in the background; poll the export for its progress."""
    require_perm(request, "datasets.export_dataset")
    version = _version_or_404(version_id)
    try:
        export = export_create(
            version=version,
            kind=str(body.kind),
            fmt=str(body.fmt),
            options=body.options,
            created_by=request.user,
        )
    except ExportBusy as exc:
        raise HttpError(409, str(exc))
    except VersionGone as exc:
        raise HttpError(410, str(exc))
    except DatasetError as exc:
        raise HttpError(400, str(exc))
    return Status(202, export)


@router.get("/dataset-exports/{export_id}", response={200: ExportOut, 404: ErrorOut, **DENIED})
def dataset_export_detail(request: HttpRequest, export_id: int) -> DatasetExport:
    """An export's status and progress; once done, its manifest (records, shards, sha256)."""
    return _export_or_404(request, export_id)


@router.post(
    "/dataset-exports/{export_id}/cancel", response={200: ExportOut, 404: ErrorOut, 409: ErrorOut, **DENIED}
)
def dataset_export_cancel(request: HttpRequest, export_id: int) -> DatasetExport:
    """Stop a pending or running export; its files are removed."""
    export = _export_or_404(request, export_id)
    try:
        return export_cancel(export=export)
    except DatasetError as exc:
        raise HttpError(409, str(exc))


class ExportFileOut(Schema):
    path: str
    bytes: int


@router.get(
    "/dataset-exports/{export_id}/files",
    response={200: list[ExportFileOut], 404: ErrorOut, 409: ErrorOut, **DENIED},
)
def dataset_export_files(request: HttpRequest, export_id: int) -> list[dict[str, Any]]:
    """Every file of a finished export (manifest first), to fetch one by one."""
    export = _export_or_404(request, export_id)
    try:
        return [{"path": p, "bytes": n} for p, n in export_files(export=export)]
    except DatasetError as exc:
        raise HttpError(409, str(exc))


@router.get(
    "/dataset-exports/{export_id}/files/{path:relpath}", response={404: ErrorOut, 409: ErrorOut, **DENIED}
)
def dataset_export_file(request: HttpRequest, export_id: int, relpath: str) -> HttpResponse:
    """One file of a finished export."""
    export = _export_or_404(request, export_id)
    try:
        target = export_file(export=export, relpath=relpath)
    except DatasetError as exc:
        raise HttpError(404 if "no file" in str(exc) else 409, str(exc))
    return FileResponse(target.open("rb"), as_attachment=False, filename=target.name)


@router.get("/dataset-exports/{export_id}/archive", response={404: ErrorOut, 409: ErrorOut, **DENIED})
def dataset_export_archive(request: HttpRequest, export_id: int) -> HttpResponse:
    """The whole export as one tar, streamed."""
    export = _export_or_404(request, export_id)
    try:
        return archive_response(export=export)
    except DatasetError as exc:
        raise HttpError(409, str(exc))


def archive_response(*, export: DatasetExport) -> StreamingHttpResponse:
    """A streaming tar download of a finished export (shared by the page and the API)."""
    chunks, size, name = export_archive(export=export)
    response = StreamingHttpResponse(chunks, content_type="application/x-tar")
    response["Content-Length"] = str(size)
    response["Content-Disposition"] = f'attachment; filename="{name}"'
    return response


# --- flywheel rounds --------------------------------------------------------------------------------


class RoundOut(Schema):
    number: int
    status: str
    policy_version: str | None
    stats: dict[str, Any]
    progress: dict[str, Any]
    started_at: datetime
    finished_at: datetime | None

    @staticmethod
    def resolve_policy_version(obj: FlywheelIteration) -> str | None:
        return obj.policy_version.name if obj.policy_version_id else None


class RoundsOut(Schema):
    rounds: list[RoundOut]
    closing: RoundOut | None
    chart: dict[str, Any]
    trend: dict[str, Any]


@router.get("/flywheel/rounds", response={200: RoundsOut, **DENIED})
def flywheel_rounds(request: HttpRequest) -> dict[str, Any]:
    """Every closed round with its figures, P(V=1) per round as chart series, and whether it rises."""
    require_perm(request, "datasets.view_flywheeliteration")
    rounds = list(rounds_closed())
    return {
        "rounds": rounds,
        "closing": round_closing(),
        "chart": rounds_chart(rounds=rounds),
        "trend": rounds_trend(rounds=rounds),
    }


class RoundIn(Schema):
    notes: str = Field("", max_length=MAX_NOTE)


@router.post("/flywheel/rounds", response={202: RoundOut, 409: ErrorOut, **DENIED})
def flywheel_round_create(request: HttpRequest, body: RoundIn) -> Status:
    """Close the next round in the background: route every finished episode, write SFT and CT versions."""
    require_perm(request, "datasets.close_flywheel_round")
    try:
        iteration = round_enqueue(created_by=request.user, notes=body.notes)
    except RoundError as exc:
        raise HttpError(409, str(exc))
    return Status(202, iteration)
