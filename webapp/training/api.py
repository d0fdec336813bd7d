"""JSON API for training runs (checkpoints, metric series) and the policy versions rollouts use."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from ninja.errors import HttpError

from webapp.catalog.models import TaskSuite
from webapp.common.api import ErrorOut, PageIn, api_enum, object_or_404, page_of, require_perm
from webapp.datasets.api import VersionDetailOut
from webapp.datasets.services import DatasetError, VersionGone, version_pin_resolve
from webapp.policies.models import PolicyVersion
from webapp.training.merging import policy_merge_request
from webapp.training.models import Checkpoint, PolicyMerge, TrainingRun
from webapp.training.promotion import checkpoint_promote
from webapp.training.selectors import (
    checkpoints_of,
    metric_names,
    metric_series,
    policy_versions_list,
    run_log_tail,
    run_series,
    run_series_since,
    runs_compare,
    training_runs_list,
)
from webapp.training.services import (
    TrainingRunError,
    training_run_launch,
    training_run_pin,
    training_run_resume,
    training_run_stop,
)

router = Router(tags=["training"])

# Documented in the OpenAPI description; the handlers in webapp.api write these bodies.
DENIED = {401: ErrorOut, 403: ErrorOut}

TrainingAlgorithm = api_enum("TrainingAlgorithm", TrainingRun.Algorithm)
TrainingRunStatus = api_enum("TrainingRunStatus", TrainingRun.Status)
PolicyBackend = api_enum("PolicyBackend", PolicyVersion.Backend)


class TrainingRunOut(Schema):
    id: int
    name: str
    algorithm: TrainingAlgorithm
    status: TrainingRunStatus
    dataset_version: str | None = Field(description="name@vN of the data it trains on")
    base_policy: str | None
    suite: str | None = Field(description="The task suite an RL run rolls out on")
    created_by: str
    num_checkpoints: int
    step: int = Field(description="Last optimizer step reached")
    stop_requested: bool
    attempt: int = Field(description="How many times a worker took the run (a lost worker's run is retried)")
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None

    @staticmethod
    def resolve_dataset_version(obj: TrainingRun) -> str | None:
        return str(obj.dataset_version) if obj.dataset_version_id else None

    @staticmethod
    def resolve_base_policy(obj: TrainingRun) -> str | None:
        return obj.base_policy.name if obj.base_policy_id else None

    @staticmethod
    def resolve_suite(obj: TrainingRun) -> str | None:
        return obj.suite.slug if obj.suite_id else None

    @staticmethod
    def resolve_created_by(obj: TrainingRun) -> str:
        return obj.created_by.get_username()

    @staticmethod
    def resolve_num_checkpoints(obj: TrainingRun) -> int:
        return obj.n_checkpoints  # type: ignore[attr-defined]


class TrainingRunPage(Schema):
    count: int
    items: list[TrainingRunOut]


class CheckpointOut(Schema):
    id: int
    step: int
    path: str
    metrics: dict[str, Any]
    policy: str | None = Field(description="The policy version made from this checkpoint, if any")
    created_at: datetime

    @staticmethod
    def resolve_policy(obj: Checkpoint) -> str | None:
        policy = getattr(obj, "policy_version", None)  # reverse one-to-one: absent raises AttributeError
        return policy.name if policy else None


class TrainingRunDetailOut(TrainingRunOut):
    config: dict[str, Any]
    error: str
    checkpoints: list[CheckpointOut]
    metrics: list[str] = Field(description="Names of its metric series; fetch one at /metrics/{name}")

    @staticmethod
    def resolve_checkpoints(obj: TrainingRun) -> list[Checkpoint]:
        return list(checkpoints_of(run=obj))

    @staticmethod
    def resolve_metrics(obj: TrainingRun) -> list[str]:
        return metric_names(run=obj)


class MetricPointOut(Schema):
    step: int
    value: float | None = Field(description="null where the value was not finite (NaN or infinity)")


class PolicyOut(Schema):
    id: int
    name: str
    backend: PolicyBackend
    checkpoint: int | None
    endpoint_url: str
    model_name: str
    is_active: bool
    lineage: dict[str, Any]
    created_at: datetime

    @staticmethod
    def resolve_checkpoint(obj: PolicyVersion) -> int | None:
        return obj.checkpoint_id


class PolicyPage(Schema):
    count: int
    items: list[PolicyOut]


class PolicyFilters(PageIn):
    active: bool | None = Field(None, description="Only active (true) or retired (false) policies")


@router.get("/training-runs", response={200: TrainingRunPage, 400: ErrorOut, **DENIED})
def training_run_list(request: HttpRequest, page: Query[PageIn]) -> dict[str, Any]:
    """Training runs, newest first."""
    require_perm(request, "training.view_trainingrun")
    return page_of(training_runs_list().select_related("base_policy"), page)


@router.get("/training-runs/{run_id}", response={200: TrainingRunDetailOut, 404: ErrorOut, **DENIED})
def training_run_detail(request: HttpRequest, run_id: int) -> TrainingRun:
    """One run with its config, checkpoints and the names of its metric series."""
    require_perm(request, "training.view_trainingrun", "training.view_checkpoint")
    return object_or_404(training_runs_list(), run_id, "training run")


# `path:` because metric names are often namespaced with slashes ("train/loss").
@router.get(
    "/training-runs/{run_id}/metrics/{path:name}",
    response={200: list[MetricPointOut], 404: ErrorOut, **DENIED},
)
def training_run_metric(request: HttpRequest, run_id: int, name: str) -> list[dict[str, Any]]:
    """One metric series of a run as (step, value) points in step order."""
    require_perm(request, "training.view_trainingrun")
    run = object_or_404(training_runs_list(), run_id, "training run")
    points = metric_series(run=run, name=name)
    if not points:
        known = metric_names(run=run)
        raise HttpError(
            404, f"run {run_id} has no metric {name!r}; it has: {', '.join(known) if known else 'none yet'}"
        )
    # NaN and infinity have no JSON spelling; a diverged run must not make the body unparseable.
    return [{"step": step, "value": value if math.isfinite(value) else None} for step, value in points]


@router.get("/policies", response={200: PolicyPage, 400: ErrorOut, **DENIED})
def policy_list(request: HttpRequest, filters: Query[PolicyFilters]) -> dict[str, Any]:
    """Policy versions, newest first: what rollouts and interactive annotation can use."""
    require_perm(request, "policies.view_policyversion")
    return page_of(policy_versions_list(active=filters.active), filters)


# --- launching and controlling runs ---------------------------------------------------------------


class FieldErrorOut(ErrorOut):
    field: str | None = Field(None, description="The input at fault: a config field, dataset, base_policy, …")


def _refused(exc: TrainingRunError, status: int = 400) -> Status:
    errors = [{"field": f, "message": m} for f, m in exc.errors if f] or None
    return Status(status, {"detail": str(exc), "field": exc.field, "errors": errors})


class TrainingRunIn(Schema):
    algorithm: TrainingAlgorithm  # type: ignore[valid-type]
    name: str = Field(..., max_length=200)
    config: dict[str, Any] = Field(
        default_factory=dict,
        description="Fields to set; the others take their defaults (see the launch form)",
    )
    dataset: str | None = Field(
        None, description="SFT: the dataset version pin, <dataset>@v<number> or @latest"
    )
    base_policy: int | str = Field(..., description="The local policy (id or name) the run starts from")
    suite: str | None = Field(None, description="PPO / GRPO: the slug of the task suite to roll out on")


def _policy_by(key: int | str) -> PolicyVersion | None:
    """A policy named by its id (a number) or its name."""
    field = "pk" if isinstance(key, int) else "name"
    return PolicyVersion.objects.select_related("checkpoint").filter(**{field: key}).first()


def _run_or_404(run_id: int) -> TrainingRun:
    return object_or_404(training_runs_list(), run_id, "training run")


@router.post(
    "/training-runs",
    url_name="training_run_launch",
    response={202: TrainingRunDetailOut, 400: FieldErrorOut, **DENIED},
)
def training_run_create(request: HttpRequest, body: TrainingRunIn) -> Status:
    """Launch a run; it is queued on the training workers. A bad config is refused naming the field."""
    require_perm(request, "training.launch_training")
    key = body.base_policy
    policy = _policy_by(key)
    suite = TaskSuite.objects.filter(slug=body.suite).first() if body.suite else None
    refused = []  # reported with every other input at fault, not before them
    if policy is None:
        refused.append(("base_policy", f"there is no policy {key!r}"))
    if body.suite and suite is None:
        refused.append(("suite", f"there is no task suite {body.suite!r}"))
    try:
        run = training_run_launch(
            algorithm=str(body.algorithm),
            name=body.name,
            config=body.config,
            created_by=request.user,
            dataset_pin=body.dataset,
            base_policy=policy,
            suite=suite,
            refused=refused,
        )
    except TrainingRunError as exc:
        return _refused(exc)
    return Status(202, _run_or_404(run.pk))


@router.post(
    "/training-runs/{run_id}/stop",
    response={200: TrainingRunDetailOut, 404: ErrorOut, 409: FieldErrorOut, **DENIED},
)
def training_run_stop_api(request: HttpRequest, run_id: int) -> Any:
    """Stop a run: a pending one at once, a running one after it saves a checkpoint."""
    require_perm(request, "training.launch_training")
    run = _run_or_404(run_id)
    try:
        training_run_stop(run=run, by=request.user)
    except TrainingRunError as exc:
        return _refused(exc, 409)
    return _run_or_404(run_id)


@router.post(
    "/training-runs/{run_id}/resume",
    response={202: TrainingRunDetailOut, 404: ErrorOut, 409: FieldErrorOut, **DENIED},
)
def training_run_resume_api(request: HttpRequest, run_id: int) -> Status:
    """Queue a stopped or failed run again; it continues from its last checkpoint."""
    require_perm(request, "training.launch_training")
    run = _run_or_404(run_id)
    try:
        training_run_resume(run=run, by=request.user)
    except TrainingRunError as exc:
        return _refused(exc, 409)
    return Status(202, _run_or_404(run_id))


class PromoteIn(Schema):
    """Send {} for the default name."""

    name: str | None = Field(None, description="The policy's name (a slug); default <run>-step-<step>")


@router.post(
    "/checkpoints/{checkpoint_id}/promote",
    response={201: PolicyOut, 400: FieldErrorOut, 404: ErrorOut, 409: FieldErrorOut, **DENIED},
)
def checkpoint_promote_api(request: HttpRequest, checkpoint_id: int, body: PromoteIn) -> Status:
    """Make a checkpoint a local policy version that rollouts and annotation can use."""
    require_perm(request, "training.launch_training")
    checkpoint = object_or_404(
        Checkpoint.objects.select_related("run__base_policy"), checkpoint_id, "checkpoint"
    )
    try:
        policy = checkpoint_promote(checkpoint=checkpoint, name=body.name, by=request.user)
    except TrainingRunError as exc:
        return _refused(exc, 409 if exc.field == "checkpoint" else 400)
    return Status(201, policy)


class LogOut(Schema):
    run: int
    status: TrainingRunStatus  # type: ignore[valid-type]
    lines: list[str]


@router.get("/training-runs/{run_id}/log", response={200: LogOut, 404: ErrorOut, **DENIED})
def training_run_log(
    request: HttpRequest,
    run_id: int,
    tail: int = Query(200, ge=1, le=5000, description="How many last lines"),
) -> dict[str, Any]:
    """The last lines of a run's log (empty until the run starts)."""
    require_perm(request, "training.view_trainingrun")
    run = _run_or_404(run_id)
    return {"run": run.pk, "status": run.status, "lines": run_log_tail(run=run, lines=tail)}


class SeriesOut(Schema):
    steps: list[int]
    values: list[float | None]


class RunSeriesOut(Schema):
    run: int
    status: TrainingRunStatus  # type: ignore[valid-type]
    step: int
    series: dict[str, SeriesOut] = Field(
        description="Every metric series (with `after`: only the points newer than it); null where a value "
        "was not finite"
    )
    cursor: int = Field(description="Pass as `after` next time to get only the points recorded since")


@router.get(
    "/training-runs/{run_id}/series",
    url_name="training_run_series",
    response={200: RunSeriesOut, 404: ErrorOut, **DENIED},
)
def training_run_series(
    request: HttpRequest,
    run_id: int,
    after: int = Query(0, ge=0, description="A cursor from an earlier answer: only newer points come back"),
) -> dict[str, Any]:
    """A run's metric series at once (what its page's live charts draw); with `after`, only what is new."""
    require_perm(request, "training.view_trainingrun")
    run = _run_or_404(run_id)
    series, cursor = run_series_since(run=run, after=after)
    return {"run": run.pk, "status": run.status, "step": run.step, "series": series, "cursor": cursor}


@router.get(
    "/training-compare",
    url_name="training_compare",
    response={200: dict[str, Any], 400: ErrorOut, 404: ErrorOut, **DENIED},
)
def training_compare(request: HttpRequest, a: int, b: int) -> dict[str, Any]:
    """Two runs side by side: config rows (which differ), final metrics, and the series both have."""
    require_perm(request, "training.view_trainingrun")
    run_a, run_b = _run_or_404(a), _run_or_404(b)
    cmp = runs_compare(a=run_a, b=run_b)
    shared = cmp["shared_metrics"]

    def brief(run: TrainingRun) -> dict[str, Any]:
        return {
            "id": run.pk,
            "name": run.name,
            "algorithm": run.algorithm,
            "status": run.status,
            "step": run.step,
        }

    return {
        "a": brief(run_a),
        "b": brief(run_b),
        **cmp,
        "series": {"a": run_series(run=run_a, names=shared), "b": run_series(run=run_b, names=shared)},
    }


# --- merging policies (parameter interpolation) ----------------------------------------------------


PolicyMergeStatus = api_enum("PolicyMergeStatus", PolicyMerge.Status)


class MergeSourceIn(Schema):
    policy: int | str = Field(..., description="A local policy (id or name)")
    weight: float = Field(..., description="Its weight; the weights are >= 0 and sum to 1")


class PolicyMergeIn(Schema):
    sources: list[MergeSourceIn] = Field(..., description="Two or more local policies from the same base")
    name: str | None = Field(None, description="The new policy's name (a slug); default merge-<a>-<b>…")


class PolicyMergeOut(Schema):
    id: int
    name: str
    sources: list[dict[str, Any]]
    status: PolicyMergeStatus  # type: ignore[valid-type]
    error: str
    policy: PolicyOut | None
    created_at: datetime
    finished_at: datetime | None


@router.post(
    "/policy-merges",
    url_name="policy_merge_create",
    response={202: PolicyMergeOut, 400: FieldErrorOut, **DENIED},
)
def policy_merge_create(request: HttpRequest, body: PolicyMergeIn) -> Status:
    """Merge local policies from the same base with given weights into a new policy (on a worker).

    Weights, architectures and declared bases are checked at once: a mismatch is refused naming it."""
    require_perm(request, "training.launch_training")
    sources: list[tuple[PolicyVersion, float]] = []
    try:
        for src in body.sources:
            found = _policy_by(src.policy)
            if found is None:
                raise TrainingRunError(f"there is no policy {src.policy!r}", "sources")
            sources.append((found, src.weight))
        merge = policy_merge_request(sources=sources, name=body.name, by=request.user)
    except TrainingRunError as exc:
        return _refused(exc)
    return Status(202, merge)


@router.get("/policy-merges/{merge_id}", response={200: PolicyMergeOut, 404: ErrorOut, **DENIED})
def policy_merge_detail(request: HttpRequest, merge_id: int) -> PolicyMerge:
    """A merge: pending, running, succeeded (with its policy) or failed (with the reason)."""
    require_perm(request, "policies.view_policyversion")
    return object_or_404(PolicyMerge.objects.select_related("policy"), merge_id, "policy merge")


# --- pinning a run to a dataset version (also resolves a pin alone) ----------------------------------


class PinIn(Schema):
    pin: str = Field(..., description="<dataset>@v<number> or <dataset>@latest")
    run: int | None = Field(None, description="A training run that has not started, to pin to the version")


@router.post(
    "/dataset-pins",
    response={200: VersionDetailOut, 400: ErrorOut, 404: ErrorOut, 409: ErrorOut, 410: ErrorOut, **DENIED},
)
def dataset_pin(request: HttpRequest, body: PinIn) -> Any:
    """Resolve a pin to a concrete version; with `run`, pin that training run to it."""
    require_perm(request, "datasets.view_datasetversion")
    try:
        if body.run is None:
            return version_pin_resolve(pin=body.pin)
        require_perm(request, "training.change_trainingrun")
        run = object_or_404(TrainingRun.objects.all(), body.run, "training run")
        run = training_run_pin(run=run, pin=body.pin)
        return run.dataset_version
    except VersionGone as exc:
        raise HttpError(410, str(exc))
    except DatasetError as exc:
        raise HttpError(409 if "already started" in str(exc) else 400, str(exc))
