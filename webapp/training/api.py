"""JSON API for training runs (checkpoints, metric series) and the policy versions rollouts use."""

from __future__ import annotations

import math
from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema
from ninja.errors import HttpError

from webapp.common.api import ErrorOut, PageIn, api_enum, object_or_404, page_of, require_perm
from webapp.training.models import Checkpoint, PolicyVersion, TrainingRun
from webapp.training.selectors import (
    checkpoints_of,
    metric_names,
    metric_series,
    policy_versions_list,
    training_runs_list,
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
    created_by: str
    num_checkpoints: int
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
    error_message: str
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
    require_perm(request, "training.view_policyversion")
    return page_of(policy_versions_list(active=filters.active), filters)
