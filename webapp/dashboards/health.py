"""Reads of environment health: pools, lease wait, reset latency, crash and env_error rates, queues.

Hosts report their counters and latency summaries in heartbeats (mirrored on SandboxHost and
Sandbox rows); episodes say which ended in an environment error; the Celery broker holds the queues.
`health_now()` gathers them into one JSON-able dict that the page, the JSON API, the samples kept
over time and the Prometheus endpoint all read.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db.models import Count, Q
from django.utils import timezone

from webapp.common.queue import queue_depths
from webapp.episodes.models import Episode
from webapp.sandboxes.models import Sandbox, SandboxHost

ENV_ERROR_WINDOW = timedelta(hours=24)
UNAVAILABLE = "unavailable"

# Counters a host reports (since it started): sandboxes started, failed to start, replaced after a
# crash or a failed health check, leases expired.
COUNTERS = ("started", "start_failed", "replaced", "expired")

# A host's state says whether its sandboxes live, not only whether it heartbeats (issue 34: "alive" at
# a crash rate of 3.379, every browser sandbox failing to start). Judged over the last CRASH_WINDOW
# (the counters against the kept sample from that long ago), or since the host started.
CRASH_WINDOW = timedelta(minutes=15)
FAILING_RATE = 0.5
DEGRADED_RATE = 0.1
MIN_ATTEMPTS = 3
HOST_STATES = ("healthy", "degraded", "failing", "silent")


def crash_rate(counters: dict[str, int]) -> float | None:
    """The share of sandbox starts that failed or whose sandbox crashed later: (failed starts + replaced)
    over (starts + failed starts), from 0 to 1; None before any start."""
    return _ratio(
        counters["start_failed"] + counters["replaced"], counters["started"] + counters["start_failed"]
    )


def host_state(*, alive: bool, counters: dict[str, int], since: str) -> tuple[str, str]:
    """(state, why) of a host: silent (no heartbeat), failing (at least half its sandboxes failed to
    start or crashed, of MIN_ATTEMPTS or more), degraded (a tenth or more), else healthy. `counters` are
    those of the period `since` names."""
    if not alive:
        return "silent", "no heartbeat within the grace period: its sandboxes cannot be leased"
    attempts = counters["started"] + counters["start_failed"]
    failures = counters["start_failed"] + counters["replaced"]
    if not attempts:
        return "healthy", f"no sandbox started {since}"
    said = (
        f"{failures} of {attempts} sandbox starts {since} failed or crashed later "
        f"({counters['start_failed']} failed to start, {counters['replaced']} replaced)"
    )
    rate = failures / attempts
    if rate >= FAILING_RATE and attempts >= MIN_ATTEMPTS:
        return "failing", said
    if rate >= DEGRADED_RATE and failures:
        return "degraded", said
    return "healthy", said


def _counters_before(now: datetime) -> tuple[dict[str, dict[str, int]], datetime | None]:
    """Each host's counters in the kept sample from CRASH_WINDOW ago (up to twice that), and its time."""
    from webapp.dashboards.models import HealthSample

    sample = (
        HealthSample.objects.filter(taken_at__lte=now - CRASH_WINDOW, taken_at__gte=now - 2 * CRASH_WINDOW)
        .order_by("-taken_at")
        .first()
    )
    if sample is None:
        return {}, None
    rows = sample.data.get("hosts", []) if isinstance(sample.data, dict) else []
    return {
        str(r.get("host")): {k: int(r.get(k) or 0) for k in COUNTERS} for r in rows if isinstance(r, dict)
    }, sample.taken_at


def _recent(now_counters: dict[str, int], before: dict[str, int] | None) -> dict[str, int] | None:
    """The counters' growth since `before`; None when there is no baseline or the host restarted since
    (its counters went back to zero)."""
    if before is None or any(now_counters[k] < before[k] for k in COUNTERS):
        return None
    return {k: now_counters[k] - before[k] for k in COUNTERS}


def _ratio(num: float, den: float) -> float | None:
    return num / den if den else None


def _combine(summaries: Iterable[dict[str, Any]]) -> dict[str, float | None]:
    """One {n, p50, p95} from several per-sandbox summaries: the n-weighted mean of their percentiles.

    Exact percentiles cannot be recovered from summaries; a weighted mean is close where sandboxes of
    one profile behave alike, and says so by being labelled approximate on the page.
    """
    n = 0.0
    p50 = p95 = 0.0
    for s in summaries:
        k = float(s.get("n") or 0)
        if k <= 0:
            continue
        n += k
        p50 += k * float(s.get("p50") or 0.0)
        p95 += k * float(s.get("p95") or 0.0)
    if not n:
        return {"n": 0, "p50": None, "p95": None}
    return {"n": int(n), "p50": round(p50 / n, 1), "p95": round(p95 / n, 1)}


def _env_errors_since(since: datetime, group: str) -> dict[Any, dict[str, int]]:
    """Ended episodes and env_errors among them since `since`, grouped by `group` (a values() path)."""
    rows = (
        Episode.objects.filter(status__in=Episode.ENDED, finished_at__gte=since)
        .values(group)
        .annotate(ended=Count("pk"), env_errors=Count("pk", filter=Q(env_error=True)))
    )
    return {r[group]: {"ended": r["ended"], "env_errors": r["env_errors"]} for r in rows}


def health_now(*, now: datetime | None = None) -> dict[str, Any]:
    """Current environment health per host, per profile and per queue, as a JSON-able dict."""
    now = now or timezone.now()
    hosts = list(SandboxHost.objects.order_by("name"))
    alive = {h.pk: h.is_alive(now=now, grace_seconds=settings.SANDBOX_HOST_GRACE_SECONDS) for h in hosts}
    live = list(
        Sandbox.objects.exclude(state=Sandbox.State.STOPPED).only("host_id", "profile", "state", "latency")
    )
    since = now - ENV_ERROR_WINDOW
    depths = queue_depths()
    before = _counters_before(now)
    return {
        "taken_at": now.isoformat(),
        "hosts": _host_rows(hosts, alive, live, _env_errors_since(since, "sandbox__host__name"), before),
        "profiles": _profile_rows(hosts, alive, live, _env_errors_since(since, "task__env_profile")),
        "queues": [{"queue": q, "depth": d} for q, d in depths.items()],
        "broker": UNAVAILABLE if any(d is None for d in depths.values()) else "ok",
    }


NO_ERRORS = {"ended": 0, "env_errors": 0}


def _host_rows(
    hosts: list[SandboxHost],
    alive: dict[int, bool],
    live: list[Sandbox],
    errors_by: dict[Any, dict[str, int]],
    before: tuple[dict[str, dict[str, int]], datetime | None],
) -> list[dict[str, Any]]:
    rows = []
    baseline, baseline_at = before
    for h in hosts:
        mine = [s for s in live if s.host_id == h.pk]
        leased = sum(1 for s in mine if s.state == Sandbox.State.LEASED)
        report = h.report or {}
        counters = {k: int((report.get("counters") or {}).get(k, 0)) for k in COUNTERS}
        wait = (report.get("lease_latency_ms") or {}).get("all") or {}
        reset = _combine((s.latency or {}).get("reset") or {} for s in mine)
        errors = errors_by.get(h.name, NO_ERRORS)
        recent = _recent(counters, baseline.get(h.name))
        if recent is not None and baseline_at is not None:
            state, why = host_state(
                alive=alive[h.pk], counters=recent, since=f"since {baseline_at:%H:%M} UTC"
            )
        else:
            state, why = host_state(alive=alive[h.pk], counters=counters, since="since the host started")
        rows.append(
            {
                "host": h.name,
                "alive": alive[h.pk],
                "state": state,
                "state_detail": why,
                "status": h.status,
                "last_heartbeat_at": h.last_heartbeat_at.isoformat() if h.last_heartbeat_at else None,
                "live": len(mine),
                "leased": leased,
                "utilisation": _ratio(leased, len(mine)),
                "lease_wait_n": int(wait.get("n") or 0),
                "lease_wait_p50": wait.get("p50") if wait.get("n") else None,
                "lease_wait_p95": wait.get("p95") if wait.get("n") else None,
                "reset_n": reset["n"],
                "reset_p50": reset["p50"],
                "reset_p95": reset["p95"],
                **counters,
                "crash_rate": crash_rate(counters),
                "ended_24h": errors["ended"],
                "env_errors_24h": errors["env_errors"],
                "env_error_rate": _ratio(errors["env_errors"], errors["ended"]),
            }
        )
    return rows


def _profile_rows(
    hosts: list[SandboxHost],
    alive: dict[int, bool],
    live: list[Sandbox],
    errors_by: dict[Any, dict[str, int]],
) -> list[dict[str, Any]]:
    # Profiles pool over the hosts that are alive: a silent host's last report says nothing now.
    by_profile: dict[str, list[Sandbox]] = defaultdict(list)
    for s in live:
        if alive.get(s.host_id):
            by_profile[s.profile].append(s)
    capacity: dict[str, int] = defaultdict(int)
    for h in hosts:
        if alive[h.pk]:
            for name, cfg in (h.capacity or {}).items():
                if isinstance(cfg, dict):
                    capacity[name] += int(cfg.get("max_total") or 0)
    rows = []
    for name in sorted(set(by_profile) | set(capacity) | {p for p in errors_by if p}):
        mine = by_profile.get(name, [])
        leased = sum(1 for s in mine if s.state == Sandbox.State.LEASED)
        reset = _combine((s.latency or {}).get("reset") or {} for s in mine)
        errors = errors_by.get(name, NO_ERRORS)
        rows.append(
            {
                "profile": name,
                "capacity": capacity.get(name, 0),
                "live": len(mine),
                "leased": leased,
                "idle": sum(1 for s in mine if s.state == Sandbox.State.IDLE),
                "utilisation": _ratio(leased, len(mine)),
                "reset_n": reset["n"],
                "reset_p50": reset["p50"],
                "reset_p95": reset["p95"],
                "ended_24h": errors["ended"],
                "env_errors_24h": errors["env_errors"],
                "env_error_rate": _ratio(errors["env_errors"], errors["ended"]),
            }
        )
    return rows


# --- over time, from the samples ------------------------------------------------------------------

MAX_POINTS = 360

# What the charts over time show: (series name, rows key, label key, value key).
SERIES = (
    ("utilisation_by_profile", "profiles", "profile", "utilisation"),
    ("utilisation_by_host", "hosts", "host", "utilisation"),
    ("lease_wait_p50_by_host", "hosts", "host", "lease_wait_p50"),
    ("lease_wait_p95_by_host", "hosts", "host", "lease_wait_p95"),
    ("reset_p95_by_profile", "profiles", "profile", "reset_p95"),
    ("crash_rate_by_host", "hosts", "host", "crash_rate"),
    ("env_error_rate_by_profile", "profiles", "profile", "env_error_rate"),
    ("env_error_rate_by_host", "hosts", "host", "env_error_rate"),
    ("queue_depth", "queues", "queue", "depth"),
)


def health_series(*, since_hours: float = 6, now: datetime | None = None) -> dict[str, Any]:
    """The kept samples since `since_hours` ago as chart series: {"labels": [...], "series": {...}}.

    Each series maps a key (profile, host, queue) to one value per label, None where that sample
    lacked it. More than MAX_POINTS samples are thinned evenly (the newest is always kept).
    """
    from webapp.dashboards.models import HealthSample

    now = now or timezone.now()
    since = now - timedelta(hours=since_hours)
    ids = list(
        HealthSample.objects.filter(taken_at__gte=since).order_by("taken_at").values_list("pk", flat=True)
    )
    if len(ids) > MAX_POINTS:
        stride = len(ids) / MAX_POINTS
        picked = {ids[int(i * stride)] for i in range(MAX_POINTS)} | {ids[-1]}
        ids = [i for i in ids if i in picked]
    samples = list(HealthSample.objects.filter(pk__in=ids).order_by("taken_at"))
    labels = [s.taken_at.isoformat() for s in samples]
    series: dict[str, dict[str, list[Any]]] = {}
    for name, rows_key, label_key, value_key in SERIES:
        keys: list[str] = []
        for s in samples:
            for row in s.data.get(rows_key, []):
                if row.get(label_key) not in keys:
                    keys.append(row.get(label_key))
        table: dict[str, list[Any]] = {k: [None] * len(samples) for k in keys}
        for i, s in enumerate(samples):
            for row in s.data.get(rows_key, []):
                table[row.get(label_key)][i] = row.get(value_key)
        series[name] = table
    return {"since": since.isoformat(), "until": now.isoformat(), "labels": labels, "series": series}
