"""The flywheel round: every finished trajectory gets a verdict V(s) and lands in SFT (V=1) or CT (V=0).

A round routes every finished episode up to its cutoff (a later review can move an episode that an
earlier round placed), writes one new sealed version of each flywheel dataset, and keeps per-round
statistics of the episodes that finished inside its window: counts by source, P(V=1), per suite,
per task, and why trajectories failed.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Max, QuerySet
from django.utils import timezone

from agent_core.flywheel import TrajectoryView, Verdict, route, validate
from webapp.common.queue import FLYWHEEL_ROUND, UNAVAILABLE, enqueue_or_note
from webapp.datasets.models import Dataset, DatasetVersion, FlywheelIteration
from webapp.datasets.services import dataset_version_create
from webapp.episodes.models import Episode
from webapp.reviews.trajectories import trajectories

log = logging.getLogger(__name__)

SFT_DATASET = "flywheel-sft"
CT_DATASET = "flywheel-ct"
# A closing round whose job has been silent this long is taken to be dead (see flywheel_rounds_reap).
ROUND_STALE_SECONDS = 120


class RoundError(Exception):
    """A flywheel round cannot be closed now; the message says why."""


def flywheel_datasets() -> tuple[Dataset, Dataset]:
    """The SFT and CT datasets the flywheel writes, created on first use."""
    sft, _ = Dataset.objects.get_or_create(
        name=SFT_DATASET,
        defaults={"kind": Dataset.Kind.SFT, "description": "Verified-good trajectories (V=1), by round."},
    )
    ct, _ = Dataset.objects.get_or_create(
        name=CT_DATASET,
        defaults={
            "kind": Dataset.Kind.CT,
            "description": "Every other finished trajectory (V=0), for continual pre-training, by round.",
        },
    )
    return sft, ct


def routable_episodes(*, cutoff: datetime) -> QuerySet[Episode]:
    """Finished episodes up to `cutoff` (infrastructure failures say nothing about behaviour)."""
    return Episode.objects.filter(
        status=Episode.Status.FINISHED, env_error=False, finished_at__lte=cutoff
    ).order_by("pk")


class _Tally:
    """Counts of trajectories and of V=1 among them, by one key."""

    def __init__(self) -> None:
        self.n: Counter[str] = Counter()
        self.v1: Counter[str] = Counter()

    def add(self, key: str, v: int) -> None:
        self.n[key] += 1
        self.v1[key] += v

    def to_json(self) -> dict[str, dict[str, Any]]:
        return {
            k: {"n": self.n[k], "v1": self.v1[k], "p_v1": round(self.v1[k] / self.n[k], 4)}
            for k in sorted(self.n)
        }


def _claim_round(*, created_by: AbstractBaseUser | None, notes: str) -> FlywheelIteration:
    """The next round's row, running (closing it); refused while another round is closing."""
    try:
        with transaction.atomic():
            number = (FlywheelIteration.objects.aggregate(n=Max("number"))["n"] or 0) + 1
            now = timezone.now()
            return FlywheelIteration.objects.create(
                number=number,
                status=FlywheelIteration.Status.RUNNING,
                attempt=1,
                created_by=created_by,
                notes=notes,
                started_at=now,
                heartbeat_at=now,
            )
    except IntegrityError:
        closing = FlywheelIteration.objects.filter(status=FlywheelIteration.Status.RUNNING).first()
        if closing is not None:
            raise RoundError(f"round {closing.number} is closing now; wait for it to finish") from None
        raise RoundError("another round was closed at the same moment; try again") from None


def flywheel_round_start(*, created_by: AbstractBaseUser | None = None, notes: str = "") -> FlywheelIteration:
    """Claim the next round (running); flywheel_round_close then routes and writes it."""
    return _claim_round(created_by=created_by, notes=notes)


def flywheel_round_close(
    *, iteration: FlywheelIteration | None = None, created_by: AbstractBaseUser | None = None, notes: str = ""
) -> FlywheelIteration:
    """Route every finished episode, write the next SFT and CT versions, and record the round's figures.

    Safe to run twice for one claimed round: a round that is already closed is returned as it is.
    """
    started = time.perf_counter()
    if iteration is None:
        iteration = _claim_round(created_by=created_by, notes=notes)
    iteration.refresh_from_db()
    if iteration.status == FlywheelIteration.Status.FINISHED:
        return iteration
    try:
        return _close(iteration, started)
    except BaseException:
        # Nothing of a failed round is kept: its versions are written in one transaction at the
        # end, so removing the claim leaves the flywheel exactly as it was.
        FlywheelIteration.objects.filter(pk=iteration.pk, status=FlywheelIteration.Status.RUNNING).delete()
        raise


@dataclass
class _Routed:
    """What routing one round's episodes found: verdicts by dataset and the figures of the new ones."""

    total: int
    verdicts: dict[str, dict[int, dict[str, Any]]] = field(default_factory=lambda: {"sft": {}, "ct": {}})
    by_source: _Tally = field(default_factory=_Tally)
    by_suite: _Tally = field(default_factory=_Tally)
    by_task: _Tally = field(default_factory=_Tally)
    policies: Counter[str] = field(default_factory=Counter)
    failed_checks: Counter[str] = field(default_factory=Counter)
    new: int = 0
    new_v1: int = 0

    def count_new(self, traj: TrajectoryView, verdict: Verdict) -> None:
        self.new += 1
        self.new_v1 += verdict.v
        self.by_source.add(traj.source, verdict.v)
        self.by_task.add(traj.task, verdict.v)
        for suite in traj.suites or ("(no suite)",):
            self.by_suite.add(suite, verdict.v)
        if traj.policy_version:
            self.policies[traj.policy_version] += 1
        self.failed_checks.update(k for k, ok in verdict.checks.items() if ok is False)


def _route(iteration: FlywheelIteration, cutoff: datetime, window_from: datetime | None) -> _Routed:
    """Validate and route every routable episode up to `cutoff`, heartbeating the round as it goes."""
    queryset = routable_episodes(cutoff=cutoff)
    routed = _Routed(total=queryset.count())
    last_beat = time.monotonic()
    for done, (episode, traj) in enumerate(trajectories(queryset), start=1):
        verdict = validate(traj)
        routed.verdicts[route(verdict)][episode.pk] = verdict.to_json()
        if window_from is None or episode.finished_at > window_from:
            routed.count_new(traj, verdict)
        if time.monotonic() - last_beat >= 1.0 or done == routed.total:
            last_beat = time.monotonic()
            FlywheelIteration.beat(iteration.pk, progress={"done": done, "total": routed.total})
    return routed


def _excluded(cutoff: datetime, window_from: datetime | None) -> dict[str, int]:
    # Not routed: infrastructure failures (failed, env_error) and episodes that ended early otherwise
    # (a demonstration abandoned, or one that lost its sandbox): "aborted" in the round's figures.
    ended = Episode.objects.filter(
        status__in=[Episode.Status.FAILED, Episode.Status.CANCELLED], finished_at__lte=cutoff
    )
    if window_from is not None:
        ended = ended.filter(finished_at__gt=window_from)
    return {
        "env_error": ended.filter(env_error=True).count(),
        "aborted": ended.filter(env_error=False).count(),
    }


def _close(iteration: FlywheelIteration, started: float) -> FlywheelIteration:
    sft, ct = flywheel_datasets()
    previous = (
        FlywheelIteration.objects.filter(
            status=FlywheelIteration.Status.FINISHED, number__lt=iteration.number
        )
        .order_by("-number")
        .first()
    )
    window_from = previous.cutoff if previous else None
    cutoff = timezone.now()
    FlywheelIteration.objects.filter(pk=iteration.pk).update(cutoff=cutoff)

    parent_sft = sft.versions.order_by("-number").first()
    parent_ct = ct.versions.order_by("-number").first()
    was_sft = set(parent_sft.memberships.values_list("episode_id", flat=True)) if parent_sft else set()
    was_ct = set(parent_ct.memberships.values_list("episode_id", flat=True)) if parent_ct else set()

    routed = _route(iteration, cutoff, window_from)
    total, verdicts, new = routed.total, routed.verdicts, routed.new
    now_sft, now_ct = set(verdicts["sft"]), set(verdicts["ct"])
    stats = {
        "episodes": new,
        "v1": routed.new_v1,
        "p_v1": round(routed.new_v1 / new, 4) if new else None,
        "by_source": routed.by_source.to_json(),
        "by_suite": routed.by_suite.to_json(),
        "by_task": routed.by_task.to_json(),
        "failed_checks": dict(sorted(routed.failed_checks.items())),
        "policies": dict(routed.policies.most_common()),
        "excluded": _excluded(cutoff, window_from),
        "total": {"episodes": total, "sft": len(now_sft), "ct": len(now_ct)},
        "moved": {"sft_to_ct": len(was_sft & now_ct), "ct_to_sft": len(was_ct & now_sft)},
        "window": {"from": window_from.isoformat() if window_from else None, "to": cutoff.isoformat()},
    }
    with transaction.atomic():
        # Lock the round row: a reaper that judged this job dead cannot remove it under us.
        locked = FlywheelIteration.objects.select_for_update(no_key=True).filter(pk=iteration.pk).first()
        if locked is None or locked.status != FlywheelIteration.Status.RUNNING:
            raise RoundError(f"round {iteration.number} was given up while it was closing; close a new one")
        sft_version = _write_version(sft, parent_sft, was_sft, verdicts["sft"], iteration)
        ct_version = _write_version(ct, parent_ct, was_ct, verdicts["ct"], iteration)
        stats["versions"] = {"sft": sft_version.pk, "ct": ct_version.pk}
        FlywheelIteration.end(
            iteration.pk,
            FlywheelIteration.Status.FINISHED,
            stats=stats,
            policy_version=_policy_of(routed.policies),
            progress={"done": total, "total": total},
        )
    iteration.refresh_from_db()
    log.info(
        "flywheel round %d closed: %d episodes routed (%d sft, %d ct), %d new, P(V=1)=%s in %.2fs",
        iteration.number,
        total,
        len(now_sft),
        len(now_ct),
        new,
        stats["p_v1"],
        time.perf_counter() - started,
    )
    return iteration


def _write_version(
    dataset: Dataset,
    parent: DatasetVersion | None,
    before: set[int],
    verdicts: dict[int, dict[str, Any]],
    iteration: FlywheelIteration,
) -> DatasetVersion:
    after = set(verdicts)
    return dataset_version_create(
        dataset=dataset,
        episodes=Episode.objects.filter(pk__in=after).order_by("pk"),
        validator=verdicts,
        parent=parent,
        iteration=iteration,
        created_by=iteration.created_by,
        notes=f"round {iteration.number}: +{len(after - before)} −{len(before - after)} episodes",
        extra_lineage={
            "round": iteration.number,
            "added": len(after - before),
            "removed": len(before - after),
        },
    )


def _policy_of(policies: Counter[str]) -> Any:
    from webapp.policies.models import PolicyVersion

    if not policies:
        return None
    name, _ = policies.most_common(1)[0]
    return PolicyVersion.objects.filter(name=name).first()


def flywheel_rounds_reap(*, stale_seconds: int = ROUND_STALE_SECONDS) -> int:
    """Remove running rounds whose job died (killed worker): the next close can then run."""
    removed, _ = FlywheelIteration.stale(silent_for=timedelta(seconds=stale_seconds)).delete()
    if removed:
        log.warning("removed %d flywheel round(s) whose closing job stopped answering", removed)
    return removed


def round_enqueue(*, created_by: AbstractBaseUser | None = None, notes: str = "") -> FlywheelIteration:
    """Claim the next round and close it in the background (Celery queue `datasets`)."""
    iteration = flywheel_round_start(created_by=created_by, notes=notes)

    def free_claim(why: str) -> None:  # the broker is down: the next attempt may run
        FlywheelIteration.objects.filter(pk=iteration.pk, status=FlywheelIteration.Status.RUNNING).delete()

    def enqueue() -> None:
        if enqueue_or_note(FLYWHEEL_ROUND, iteration.pk, note=free_claim) is None:
            raise RoundError(f"{UNAVAILABLE}; try again later")

    transaction.on_commit(enqueue)
    return iteration
