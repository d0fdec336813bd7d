"""The home page, the dashboards (rollouts wall, success, environment health, annotation), /metrics."""

from __future__ import annotations

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST

from webapp.accounts.access import page_requires
from webapp.accounts.services import api_token_authenticate
from webapp.dashboards.health import health_now
from webapp.dashboards.metrics import latest_round, metrics_text
from webapp.dashboards.selectors import home_cards, rollouts_running
from webapp.dashboards.stats import MAX_BUCKETS, annotation_throughput, success_over_time

VIEW_EPISODES = "episodes.view_all_episodes"
VIEW_SANDBOXES = "sandboxes.view_sandbox"
VIEW_REVIEWS = "reviews.view_review"
VIEW_METRICS = "dashboards.view_metrics"

SINCE_DAYS = (1, 3, 7, 14, 30, 90)
SINCE_HOURS = (1, 6, 24, 48)


@require_GET
@page_requires()
def home(request: HttpRequest) -> HttpResponse:
    """What the person can do next, by role."""
    return render(request, "dashboards/home.html", {"cards": home_cards(user=request.user)})


def _choice(value: str | None, choices: tuple[int, ...], default: int) -> int:
    # Compared as text: int() of whatever came in the query string could raise (e.g. 5,000 digits).
    return next((c for c in choices if str(c) == (value or "").strip()), default)


@require_GET
@page_requires(VIEW_EPISODES)
def rollouts(request: HttpRequest) -> HttpResponse:
    """A live wall of running rollouts; htmx refreshes the tiles' text every 2 s (screens stay live)."""
    context = {"running": rollouts_running()}
    template = "dashboards/rollouts.html#tiles" if request.htmx else "dashboards/rollouts.html"
    return render(request, template, context)


@require_GET
@page_requires(VIEW_EPISODES)
def success(request: HttpRequest) -> HttpResponse:
    """Success per task over time and per policy version: charts from the JSON API, and tables."""
    bucket = "hour" if request.GET.get("bucket") == "hour" else "day"
    since = _choice(request.GET.get("since_days"), SINCE_DAYS, 14)
    if bucket == "hour":
        since = min(since, MAX_BUCKETS // 24)
    source = request.GET.get("source", "all")
    if source not in ("all", "human", "agent", "mixed"):
        source = "all"
    data = success_over_time(
        bucket=bucket,
        count=since * (24 if bucket == "hour" else 1),
        source=None if source == "all" else source,
    )
    context = {
        "data": data,
        "bucket": bucket,
        "since_days": since,
        "source": source,
        "since_choices": SINCE_DAYS,
        "sources": ("all", "agent", "mixed", "human"),
    }
    return render(request, "dashboards/success.html", context)


@require_GET
@page_requires(VIEW_SANDBOXES)
def health(request: HttpRequest) -> HttpResponse:
    """Environment health now (tables, refreshed by htmx) and over time (charts from the samples)."""
    context = {
        "health": health_now(),
        "since_hours": _choice(request.GET.get("since_hours"), SINCE_HOURS, 6),
        "hours_choices": SINCE_HOURS,
    }
    template = "dashboards/health.html#now" if request.htmx else "dashboards/health.html"
    return render(request, template, context)


@require_GET
@page_requires(VIEW_EPISODES, VIEW_REVIEWS)
def annotation(request: HttpRequest) -> HttpResponse:
    """Annotation throughput per annotator and reviewer, and agreement between reviewers."""
    since = _choice(request.GET.get("since_days"), SINCE_DAYS, 14)
    context = {
        "data": annotation_throughput(days=since),
        "since_days": since,
        "since_choices": SINCE_DAYS,
        "round": latest_round(),
    }
    return render(request, "dashboards/annotation.html", context)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text exposition; an API token (Bearer) or a session, and dashboards.view_metrics.

    A scraper cannot follow a login redirect, so this answers 401 / 403 where pages redirect.
    """
    user = request.user
    header = request.headers.get("Authorization", "")
    if header:
        scheme, _, raw = header.partition(" ")
        user = api_token_authenticate(raw=raw.strip()) if scheme.lower() == "bearer" else None
    if user is None or not user.is_authenticated or not user.is_active:
        response = HttpResponse(
            "authentication required: send Authorization: Bearer <token>\n",
            status=401,
            content_type="text/plain",
        )
        response["WWW-Authenticate"] = 'Bearer realm="metrics"'
        return response
    if not user.has_perm(VIEW_METRICS):
        return HttpResponse(f"not allowed: needs {VIEW_METRICS}\n", status=403, content_type="text/plain")
    return HttpResponse(metrics_text(), content_type=CONTENT_TYPE_LATEST)
