"""Reads for the success and annotation dashboards: counts per task, policy, annotator and reviewer.

Success follows the platform's one rule (the catalog's difficulty statistics and the batch pages use
it too): an attempt is a finished episode without an environment error; it succeeded when its reward
is 1. Environment errors are counted on their own, never as failures.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from dataclasses import asdict
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncDay, TruncHour
from django.utils import timezone

from webapp.episodes.models import Episode, Source
from webapp.reviews.models import Review, ReviewEvent
from webapp.reviews.selectors import PairAgreement, demonstration_agreement, review_agreement

BUCKETS = {"hour": timedelta(hours=1), "day": timedelta(days=1)}
MAX_BUCKETS = 24 * 14  # two weeks of hours, three hundred days of days: enough for one chart
ENDED = Episode.ENDED
ATTEMPT = Q(status=Episode.Status.FINISHED, env_error=False)
SUCCESS = ATTEMPT & Q(reward__gte=1.0)
# The "aborted" outcome: ended before its end, not by an infrastructure failure (abandoned, lost).
ABORTED = (Episode.Status.FAILED, Episode.Status.CANCELLED)


def bucket_start(at: datetime, bucket: str) -> datetime:
    """The start of the hour or day (UTC) that `at` falls in."""
    at = at.astimezone(UTC)
    if bucket == "hour":
        return at.replace(minute=0, second=0, microsecond=0)
    return at.replace(hour=0, minute=0, second=0, microsecond=0)


def bucket_labels(*, bucket: str, count: int, now: datetime) -> list[datetime]:
    """The starts of the last `count` buckets, oldest first, the current one last."""
    if bucket not in BUCKETS:
        raise ValueError(f"unknown bucket {bucket!r}; valid: {', '.join(BUCKETS)}")
    last = bucket_start(now, bucket)
    return [last - BUCKETS[bucket] * (count - 1 - i) for i in range(count)]


def _rate(successes: int, attempts: int) -> float | None:
    return successes / attempts if attempts else None


class _Tally:
    """Counts of one task or policy, in total and per bucket."""

    def __init__(self, n: int) -> None:
        self.attempts = [0] * n
        self.successes = [0] * n
        self.env_errors = [0] * n
        self.aborted = [0] * n

    def add(self, i: int, row: dict[str, Any]) -> None:
        self.attempts[i] += row["attempts"]
        self.successes[i] += row["successes"]
        self.env_errors[i] += row["env_errors"]
        self.aborted[i] += row["aborted"]

    def as_dict(self) -> dict[str, Any]:
        attempts, successes = sum(self.attempts), sum(self.successes)
        return {
            "attempts": attempts,
            "successes": successes,
            "env_errors": sum(self.env_errors),
            "aborted": sum(self.aborted),
            "rate": _rate(successes, attempts),
            "rate_series": [_rate(s, a) for s, a in zip(self.successes, self.attempts, strict=True)],
            "attempts_series": list(self.attempts),
            "successes_series": list(self.successes),
            "env_errors_series": list(self.env_errors),
        }


def success_over_time(
    *, bucket: str = "day", count: int = 14, source: str | None = None, now: datetime | None = None
) -> dict[str, Any]:
    """Success per task and per policy version in each of the last `count` hour or day buckets.

    Episodes count in the bucket of their end. Per entry: attempts, successes, env_errors, aborted
    (ended without an environment error and without finishing: neither success nor attempt), rate
    (None with no attempt), and the same per bucket as `*_series` aligned with `labels`.
    """
    if not 1 <= count <= MAX_BUCKETS:
        raise ValueError(f"count must be between 1 and {MAX_BUCKETS}")
    if source is not None and source not in Source.values:
        raise ValueError(f"unknown source {source!r}; valid: {', '.join(Source.values)}")
    now = now or timezone.now()
    labels = bucket_labels(bucket=bucket, count=count, now=now)
    index = {label: i for i, label in enumerate(labels)}
    trunc = TruncHour if bucket == "hour" else TruncDay
    qs = Episode.objects.filter(status__in=ENDED, finished_at__gte=labels[0], finished_at__lte=now)
    if source:
        qs = qs.filter(source=source)
    rows = (
        qs.annotate(b=trunc("finished_at", tzinfo=UTC))
        .values("b", "task__slug", "task__title", "policy_version__name")
        .annotate(
            attempts=Count("pk", filter=ATTEMPT),
            successes=Count("pk", filter=SUCCESS),
            env_errors=Count("pk", filter=Q(env_error=True)),
            aborted=Count("pk", filter=Q(status__in=ABORTED, env_error=False)),
        )
    )
    tasks: dict[str, _Tally] = {}
    titles: dict[str, str] = {}
    policies: dict[str, _Tally] = {}
    total = _Tally(count)
    for row in rows:
        i = index.get(bucket_start(row["b"], bucket))
        if i is None:  # cannot happen with the filter above, but a bucket off the chart must not crash it
            continue
        slug = row["task__slug"]
        titles[slug] = row["task__title"]
        tasks.setdefault(slug, _Tally(count)).add(i, row)
        if row["policy_version__name"]:
            policies.setdefault(row["policy_version__name"], _Tally(count)).add(i, row)
        total.add(i, row)

    def ordered(tallies: dict[str, _Tally], key: str) -> list[dict[str, Any]]:
        out = [{key: name, **t.as_dict()} for name, t in tallies.items()]
        return sorted(out, key=lambda r: (-r["attempts"], -r["env_errors"], r[key]))

    task_rows = ordered(tasks, "task")
    for row in task_rows:
        row["title"] = titles[row["task"]]
    return {
        "bucket": bucket,
        "source": source or "all",
        "since": labels[0].isoformat(),
        "until": now.isoformat(),
        "labels": [label.isoformat() for label in labels],
        "tasks": task_rows,
        "policies": ordered(policies, "policy"),
        "total": total.as_dict(),
    }


def success_by_policy_and_task(*, since: datetime | None = None) -> list[dict[str, Any]]:
    """Ended-episode counts per (task, policy, outcome) since `since` (all time when None).

    Outcome is success, failure (an attempt that did not succeed), env_error or aborted.
    """
    qs = Episode.objects.filter(status__in=ENDED)
    if since is not None:
        qs = qs.filter(finished_at__gte=since)
    rows = qs.values("task__slug", "policy_version__name").annotate(
        attempts=Count("pk", filter=ATTEMPT),
        successes=Count("pk", filter=SUCCESS),
        env_errors=Count("pk", filter=Q(env_error=True)),
        aborted=Count("pk", filter=Q(status__in=ABORTED, env_error=False)),
    )
    return [
        {
            "task": r["task__slug"],
            "policy": r["policy_version__name"] or "",
            "success": r["successes"],
            "failure": r["attempts"] - r["successes"],
            "env_error": r["env_errors"],
            "aborted": r["aborted"],
        }
        for r in rows.order_by("task__slug", "policy_version__name")
    ]


# --- annotation ----------------------------------------------------------------------------------

DEMO_SOURCES = (Source.HUMAN, Source.MIXED)


def _agreement_json(pairs: list[PairAgreement], overall: PairAgreement | None) -> dict[str, Any]:
    return {"pairs": [asdict(p) for p in pairs], "overall": asdict(overall) if overall else None}


def annotation_throughput(*, days: int = 14, now: datetime | None = None) -> dict[str, Any]:
    """Per annotator and per reviewer, over the last `days` days (UTC), and agreement over all time.

    Annotators: demonstrations (human or interactive episodes) finished, their steps, the median
    time from start to finish, and demonstrations per day. Reviewers: accept, reject and send-back
    decisions, and decisions per day.
    """
    if not 1 <= days <= 366:
        raise ValueError("days must be between 1 and 366")
    now = now or timezone.now()
    labels = bucket_labels(bucket="day", count=days, now=now)
    index = {label: i for i, label in enumerate(labels)}
    since = labels[0]

    demos = Episode.objects.filter(
        source__in=DEMO_SOURCES,
        status=Episode.Status.FINISHED,
        annotator__isnull=False,
        finished_at__gte=since,
        finished_at__lte=now,
    )
    annotators: dict[str, dict[str, Any]] = {}
    durations: dict[str, list[float]] = defaultdict(list)
    for name, started, finished, steps in demos.values_list(
        "annotator__username", "started_at", "finished_at", "num_steps"
    ):
        row = annotators.setdefault(name, {"annotator": name, "demonstrations": 0, "steps": 0,
                                           "per_day": [0] * days})  # fmt: skip
        row["demonstrations"] += 1
        row["steps"] += steps
        row["per_day"][index[bucket_start(finished, "day")]] += 1
        if started is not None:
            durations[name].append((finished - started).total_seconds())
    for name, row in annotators.items():
        row["median_seconds"] = statistics.median(durations[name]) if durations[name] else None

    reviewers: dict[str, dict[str, Any]] = {}

    def reviewer_row(name: str) -> dict[str, Any]:
        return reviewers.setdefault(
            name,
            {"reviewer": name, "decisions": 0, "accepted": 0, "rejected": 0, "sent_back": 0,
             "per_day": [0] * days},
        )  # fmt: skip

    decided = Review.objects.filter(
        state__in=[Review.State.ACCEPTED, Review.State.REJECTED], decided_at__gte=since, decided_at__lte=now
    ).values_list("reviewer__username", "state", "decided_at")
    # A send-back has no decided_at (the review goes on); its moment is in the review's history.
    sent_back = ReviewEvent.objects.filter(
        to_state=Review.State.SENT_BACK, at__gte=since, at__lte=now
    ).values_list("review__reviewer__username", "to_state", "at")
    for name, state, at in [*decided, *sent_back]:
        row = reviewer_row(name)
        row["decisions"] += 1
        row[str(state)] += 1
        row["per_day"][index[bucket_start(at, "day")]] += 1

    review_pairs, review_overall = review_agreement()
    demo_pairs, demo_overall = demonstration_agreement()
    steps_total = demos.aggregate(n=Sum("num_steps"))["n"] or 0
    return {
        "since": since.isoformat(),
        "until": now.isoformat(),
        "labels": [label.isoformat() for label in labels],
        "annotators": sorted(annotators.values(), key=lambda r: (-r["demonstrations"], r["annotator"])),
        "reviewers": sorted(reviewers.values(), key=lambda r: (-r["decisions"], r["reviewer"])),
        "totals": {
            "demonstrations": sum(r["demonstrations"] for r in annotators.values()),
            "steps": steps_total,
            "decisions": sum(r["decisions"] for r in reviewers.values()),
        },
        "agreement": {
            "reviews": _agreement_json(review_pairs, review_overall),
            "demonstrations": _agreement_json(demo_pairs, demo_overall),
        },
    }
