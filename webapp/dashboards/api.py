"""JSON the dashboards' charts draw from: running rollouts, success, environment health, annotation."""

from __future__ import annotations

from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema

from webapp.common.api import ErrorOut, invalid_input, require_perm
from webapp.dashboards.health import health_now, health_series
from webapp.dashboards.selectors import rollouts_running
from webapp.dashboards.stats import MAX_BUCKETS, annotation_throughput, success_over_time

router = Router(tags=["dashboards"])
DENIED = {400: ErrorOut, 401: ErrorOut, 403: ErrorOut}

VIEW_EPISODES = "episodes.view_all_episodes"
VIEW_SANDBOXES = "sandboxes.view_sandbox"
VIEW_REVIEWS = "reviews.view_review"


class SuccessIn(Schema):
    bucket: Literal["hour", "day"] = Field(
        "day", description="Bucket episodes by the hour or the day of their end"
    )
    since_days: int = Field(14, ge=1, le=300, description="How many days back (hour buckets: at most 14)")
    source: Literal["all", "human", "agent", "mixed"] = Field(
        "all", description="Only episodes of this source"
    )


class HealthSeriesIn(Schema):
    since_hours: float = Field(6, gt=0, le=48, description="How many hours of samples (kept for 48 h)")


class AnnotationIn(Schema):
    since_days: int = Field(14, ge=1, le=366, description="How many days back (UTC days)")


@router.get("/dashboards/rollouts", url_name="dashboards_rollouts", response={200: dict[str, Any], **DENIED})
def rollouts(request: HttpRequest) -> dict[str, Any]:
    """Running agent and interactive episodes with their latest thought and action."""
    require_perm(request, VIEW_EPISODES)
    items = [r.as_dict() for r in rollouts_running()]
    return {"count": len(items), "items": items}


@router.get("/dashboards/success", url_name="dashboards_success", response={200: dict[str, Any], **DENIED})
def success(request: HttpRequest, params: Query[SuccessIn]) -> dict[str, Any]:
    """Success per task and per policy version in hour or day buckets (env_errors counted apart)."""
    require_perm(request, VIEW_EPISODES)
    count = params.since_days * (24 if params.bucket == "hour" else 1)
    if count > MAX_BUCKETS:
        raise invalid_input({"since_days": [f"at most {MAX_BUCKETS // 24} days with hour buckets"]})
    return success_over_time(
        bucket=params.bucket, count=count, source=None if params.source == "all" else params.source
    )


@router.get("/dashboards/health", url_name="dashboards_health", response={200: dict[str, Any], **DENIED})
def health(request: HttpRequest) -> dict[str, Any]:
    """Environment health now: per host, per profile, per Celery queue."""
    require_perm(request, VIEW_SANDBOXES)
    return health_now()


@router.get(
    "/dashboards/health/series", url_name="dashboards_health_series", response={200: dict[str, Any], **DENIED}
)
def health_over_time(request: HttpRequest, params: Query[HealthSeriesIn]) -> dict[str, Any]:
    """Environment health over time from the samples the beat task takes every 30 s."""
    require_perm(request, VIEW_SANDBOXES)
    return health_series(since_hours=params.since_hours)


@router.get(
    "/dashboards/annotation", url_name="dashboards_annotation", response={200: dict[str, Any], **DENIED}
)
def annotation(request: HttpRequest, params: Query[AnnotationIn]) -> dict[str, Any]:
    """Throughput per annotator and per reviewer per day, and agreement between reviewers."""
    require_perm(request, VIEW_EPISODES, VIEW_REVIEWS)
    return annotation_throughput(days=params.since_days)
