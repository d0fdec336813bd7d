"""JSON API for rollout batches: launch one on a suite (or some of its tasks) with chosen seeds, follow
its progress, cancel it."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status

from webapp.catalog.models import TaskSuite
from webapp.common.api import (
    ErrorOut,
    PageIn,
    api_enum,
    invalid_input,
    object_or_404,
    page_of,
    require_any_perm,
    require_perm,
)
from webapp.policies.models import PolicyVersion
from webapp.rollouts.launch import batch_seeds, tasks_matching
from webapp.rollouts.models import RolloutBatch
from webapp.rollouts.selectors import batch_progress, batches_for
from webapp.rollouts.services import MAX_SEED, MAX_SEEDS, RolloutError, batch_cancel, batch_create

router = Router(tags=["rollouts"])

# Documented in the OpenAPI description; the handlers in webapp.api write these bodies.
DENIED = {401: ErrorOut, 403: ErrorOut}
SEE = ("episodes.run_rollouts", "episodes.view_all_episodes")

RolloutBatchStatus = api_enum("RolloutBatchStatus", RolloutBatch.Status)


class ProgressOut(Schema):
    total: int = Field(description="Episodes planned: one per task and seed (a re-run replaces its attempt)")
    pending: int
    running: int
    finished: int
    env_errors: int = Field(description="Environment errors so far (each re-run on a fresh sandbox)")
    successes: int
    mean_reward: float | None


class RolloutBatchOut(Schema):
    id: int
    name: str
    suite: str
    policy: str
    status: RolloutBatchStatus  # type: ignore[valid-type]
    tasks: list[str] = Field(description="The slugs of the tasks it runs")
    seeds: list[int] = Field(description="Each task runs once per seed")
    concurrency: int
    max_attempts: int
    config: dict[str, Any]
    created_by: str
    created_at: datetime
    finished_at: datetime | None
    progress: ProgressOut

    @staticmethod
    def resolve_suite(obj: RolloutBatch) -> str:
        return obj.suite.slug

    @staticmethod
    def resolve_policy(obj: RolloutBatch) -> str:
        return obj.policy_version.name

    @staticmethod
    def resolve_tasks(obj: RolloutBatch) -> list[str]:
        return sorted(set(obj.episodes.values_list("task__slug", flat=True)))

    @staticmethod
    def resolve_created_by(obj: RolloutBatch) -> str:
        return obj.created_by.get_username()

    @staticmethod
    def resolve_progress(obj: RolloutBatch) -> Any:
        return batch_progress(batch=obj)


class RolloutBatchPage(Schema):
    count: int
    items: list[RolloutBatchOut]


class RolloutBatchIn(Schema):
    """Give `seeds`, or `episodes_per_task` (default 1) from `first_seed` (default 0), not both."""

    suite: str = Field(..., description="The slug of the task suite")
    policy: int | str = Field(..., description="The policy version (id or name) that acts")
    tasks: list[str] | None = Field(
        None,
        max_length=1000,
        description="Only these tasks of the suite: slugs, or patterns such as miniwob/click-* (their "
        "published tasks); default every published task of the suite",
    )
    seeds: list[int] | None = Field(None, max_length=MAX_SEEDS, description="The seeds each task runs with")
    episodes_per_task: int | None = Field(
        None, ge=1, le=MAX_SEEDS, description="Seeds first_seed, first_seed + 1, …"
    )
    first_seed: int | None = Field(None, ge=0, le=MAX_SEED)
    concurrency: int = Field(4, ge=1, le=1000, description="Episodes in flight at once")
    history_images: int = Field(
        3, ge=0, le=20, description="Recent steps whose screenshots stay in the prompt"
    )
    name: str = Field("", max_length=200)
    follow_newest: bool = Field(
        False,
        description="Each episode runs the newest version of the policy's line that is ready when it starts "
        "(a promoted checkpoint takes over without a stop)",
    )


def _refused(exc: RolloutError) -> Exception:
    return invalid_input({exc.field or "__all__": [exc.message]})


@router.post(
    "/rollout-batches",
    url_name="rollout_batch_launch",
    response={202: RolloutBatchOut, 400: ErrorOut, **DENIED},
)
def rollout_batch_create(request: HttpRequest, body: RolloutBatchIn) -> Status:
    """Launch a batch: one episode per task and seed, run on the rollout workers. 400 names each bad field."""
    require_perm(request, "episodes.run_rollouts")
    errors: dict[str, list[str]] = {}
    suite = TaskSuite.objects.filter(slug=body.suite).first()
    if suite is None:
        errors["suite"] = [f"there is no task suite {body.suite!r}"]
    field = "pk" if isinstance(body.policy, int) else "name"
    policy = PolicyVersion.objects.filter(**{field: body.policy}).first()
    if policy is None:
        errors["policy"] = [f"there is no policy {body.policy!r}"]
    try:
        seeds = batch_seeds(
            seeds=body.seeds, episodes_per_task=body.episodes_per_task, first_seed=body.first_seed
        )
    except RolloutError as exc:
        errors.setdefault(exc.field or "__all__", []).append(exc.message)
    if errors:
        raise invalid_input(errors)
    assert suite is not None and policy is not None
    try:
        batch = batch_create(
            suite=suite,
            policy_version=policy,
            tasks=tasks_matching(suite=suite, patterns=body.tasks or ()),
            seeds=seeds,
            concurrency=body.concurrency,
            created_by=request.user,
            name=body.name,
            config={"history_images": body.history_images},
            follow_newest=body.follow_newest,
        )
    except RolloutError as exc:
        raise _refused(exc) from None
    return Status(202, batch)


@router.get("/rollout-batches", response={200: RolloutBatchPage, 400: ErrorOut, **DENIED})
def rollout_batch_list(request: HttpRequest, page: Query[PageIn]) -> dict[str, Any]:
    """Rollout batches, newest first."""
    require_any_perm(request, *SEE)
    return page_of(batches_for(user=request.user), page)


@router.get("/rollout-batches/{batch_id}", response={200: RolloutBatchOut, 404: ErrorOut, **DENIED})
def rollout_batch_detail(request: HttpRequest, batch_id: int) -> RolloutBatch:
    """One batch with its tasks, seeds and progress."""
    require_any_perm(request, *SEE)
    return object_or_404(batches_for(user=request.user), batch_id, "rollout batch")


@router.post("/rollout-batches/{batch_id}/cancel", response={200: RolloutBatchOut, 404: ErrorOut, **DENIED})
def rollout_batch_cancel(request: HttpRequest, batch_id: int) -> RolloutBatch:
    """Cancel a running batch: pending episodes are dropped, running ones finish on their own."""
    require_perm(request, "episodes.run_rollouts")
    batch = object_or_404(batches_for(user=request.user), batch_id, "rollout batch")
    batch_cancel(batch=batch)
    return object_or_404(batches_for(user=request.user), batch_id, "rollout batch")
