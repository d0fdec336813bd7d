"""One lifecycle for work done in the background on a row: episodes, dataset exports, training runs,
policy merges and flywheel rounds are each a `Job`.

    pending ──claim──▶ running ──end──▶ finished | failed | cancelled
       │                 │  ▲
       │                 │  └── claim again (a worker silent past its deadline, where the job resumes)
       │                 └──── release ──▶ pending  (given back: no sandbox free, a lost worker re-queued)
       └── end ──▶ failed | cancelled  (the broker was down; a person cancelled)

One word per state, the same in every table, API and page:
- pending: waiting for a worker; running: a worker holds it and heartbeats (`worker`, `heartbeat_at`);
- finished: the work ran to its end (an episode's reward says how the agent did, not its status);
- failed: it could not run to its end, `error` says why (an episode's `env_error` says whether the
  platform, not the agent, is to blame); cancelled: a person stopped it (a training run stops at a
  checkpoint it can resume from).
`attempt` counts the claims that took the row (a training run resumed after its worker died is on
attempt 2); an episode's attempts are rows instead (its re-run is a new episode, `retry_of`).

The transitions are conditional UPDATEs (or a row lock), so two workers never both hold a row and a
late worker cannot overwrite an end that another wrote.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime, timedelta
from typing import Any, ClassVar, Self

from django.db import models, transaction
from django.db.models import Q
from django.utils import timezone


class JobStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    FINISHED = "finished"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE = (JobStatus.PENDING, JobStatus.RUNNING)
ENDED = (JobStatus.FINISHED, JobStatus.FAILED, JobStatus.CANCELLED)

MAX_ERROR = 5000


def ended_has_finished_at(name: str) -> models.CheckConstraint:
    """The constraint every job table carries: an ended row says when it ended."""
    return models.CheckConstraint(
        condition=~Q(status__in=[s.value for s in ENDED]) | Q(finished_at__isnull=False), name=name
    )


class Job(models.Model):
    """A row whose work a background worker does (see the module's state diagram)."""

    Status: ClassVar[type[JobStatus]] = JobStatus
    ACTIVE: ClassVar[tuple[JobStatus, ...]] = ACTIVE
    ENDED: ClassVar[tuple[JobStatus, ...]] = ENDED
    # Whether a claim counts an attempt on this row (False: each attempt is a row of its own).
    CLAIM_COUNTS_ATTEMPT: ClassVar[bool] = True

    status = models.CharField(max_length=10, choices=JobStatus.choices, default=JobStatus.PENDING)
    worker = models.CharField(max_length=200, blank=True, help_text="The worker running it")
    attempt = models.PositiveSmallIntegerField(default=0, help_text="Claims so far (1 on the first run)")
    heartbeat_at = models.DateTimeField(null=True, blank=True, help_text="Last sign of life of its worker")
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True, help_text="Why it failed or was cancelled")

    class Meta:
        abstract = True

    @property
    def is_active(self) -> bool:
        return self.status in ACTIVE

    @property
    def is_done(self) -> bool:
        return self.status in ENDED

    # --- transitions ------------------------------------------------------------------------------

    @classmethod
    def claim(
        cls,
        pk: int,
        *,
        worker: str = "",
        stale_after: timedelta | None = None,
        max_attempts: int | None = None,
        **also: Any,
    ) -> Self | None:
        """Take the row for `worker`: pending, or (with `stale_after`) running with a heartbeat older than
        that and fewer than `max_attempts` claims. None when it is not this worker's to run."""
        with transaction.atomic():
            row = cls.objects.select_for_update(no_key=True).filter(pk=pk).first()  # type: ignore[attr-defined]
            if row is None:
                return None
            now = timezone.now()
            if row.status == JobStatus.RUNNING:
                beat = row.heartbeat_at or row.started_at
                if stale_after is None or (beat is not None and now - beat < stale_after):
                    return None
                if max_attempts is not None and row.attempt >= max_attempts:
                    return None  # the reaper ends it
            elif row.status != JobStatus.PENDING:
                return None
            row.status, row.worker, row.heartbeat_at = JobStatus.RUNNING, worker[:200], now
            row.started_at = row.started_at or now
            fields = ["status", "worker", "heartbeat_at", "started_at", *also]
            if cls.CLAIM_COUNTS_ATTEMPT:
                row.attempt += 1
                fields.append("attempt")
            for name, value in also.items():
                setattr(row, name, value)
            row.save(update_fields=fields)
            return row  # type: ignore[no-any-return]

    @classmethod
    def beat(cls, pk: int, *, attempt: int | None = None, **also: Any) -> bool:
        """A sign of life from the worker holding the row (`attempt`: only while that claim holds it);
        False when the row is no longer running (cancelled, reaped, taken over)."""
        return cls._held(pk, attempt=attempt).update(heartbeat_at=timezone.now(), **also) == 1

    @classmethod
    def end(
        cls,
        pk: int,
        status: JobStatus | str,
        *,
        error: str = "",
        attempt: int | None = None,
        whence: Iterable[str] = (JobStatus.RUNNING,),
        silent_since: datetime | None = None,
        **also: Any,
    ) -> bool:
        """Move the row from one of `whence` to the ended `status`; False when it was not there (ended
        by someone else, taken over by a later `attempt`, or, with `silent_since`, its worker gave a
        sign of life since then: the reaper's guard). `also` may set `finished_at` itself."""
        if status not in ENDED:
            raise ValueError(f"{status!r} is not an ended state ({', '.join(ENDED)})")
        fields: dict[str, Any] = {"status": status, "finished_at": timezone.now(), **also}
        if error:
            fields["error"] = error[:MAX_ERROR]
        rows = cls._held(pk, whence=whence, attempt=attempt, silent_since=silent_since)
        return rows.update(**fields) == 1

    @classmethod
    def release(
        cls, pk: int, *, attempt: int | None = None, silent_since: datetime | None = None, **also: Any
    ) -> bool:
        """Give a running row back to the queue (pending, no worker); False when it was not running (or,
        with `silent_since`, when its worker gave a sign of life since then: the reaper's guard)."""
        rows = cls._held(pk, attempt=attempt, silent_since=silent_since)
        return rows.update(status=JobStatus.PENDING, heartbeat_at=None, worker="", **also) == 1

    @classmethod
    def _held(
        cls,
        pk: int,
        *,
        whence: Iterable[str] = (JobStatus.RUNNING,),
        attempt: int | None = None,
        silent_since: datetime | None = None,
    ) -> models.QuerySet[Self]:
        """The row, only while it is in one of `whence`, under claim `attempt`, and (with
        `silent_since`) silent since then: what every conditional transition updates."""
        rows = cls.objects.filter(pk=pk, status__in=list(whence))  # type: ignore[attr-defined]
        if attempt is not None:
            rows = rows.filter(attempt=attempt)
        if silent_since is not None:
            rows = rows.filter(heartbeat_at__lt=silent_since)
        return rows  # type: ignore[no-any-return]

    @classmethod
    def stale(cls, *, silent_for: timedelta, now: datetime | None = None) -> models.QuerySet[Self]:
        """Running rows whose worker has not given a sign of life for `silent_for`: the reaper's list."""
        limit = (now or timezone.now()) - silent_for
        return cls.objects.filter(status=JobStatus.RUNNING, heartbeat_at__lt=limit)  # type: ignore[attr-defined, no-any-return]
