"""How a running trainer reports into the database: metric points, checkpoint rows, log lines, stop requests.

Every write is conditional on the run still being this worker's (status running, the attempt it
claimed): a worker that went silent and was reaped, while another worker resumed the run, must not
write over the new attempt. Such a worker learns it from `RunLost` at its next report.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

from django.conf import settings
from django.db import connection
from django.utils import timezone

from webapp.training.models import Checkpoint, MetricPoint, TrainingRun

log = logging.getLogger(__name__)


class RunLost(Exception):
    """The run is no longer this worker's (reaped, then claimed again): stop and write nothing."""


def var_relative(path: Path) -> str:
    """`path` relative to the var dir when it lies under it (so every process finds it), else absolute."""
    path = Path(path).resolve()
    try:
        return str(path.relative_to(Path(settings.VAR_DIR).resolve()))
    except ValueError:
        return str(path)


def log_append(run: TrainingRun, message: str) -> None:
    """Append a timestamped line (or block) to the run's log file; never fails the caller."""
    if not run.log_file:
        return
    path = run.path(run.log_file)
    stamp = timezone.now().strftime("%Y-%m-%d %H:%M:%S")
    text = str(message).rstrip("\n")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as f:
            f.write(f"{stamp} {text}\n")
    except OSError:
        log.exception("run %s: cannot write its log %s", run.pk, path)


def _finite(metrics: Mapping[str, float]) -> dict[str, float | None]:
    # JSON has no NaN or infinity: a diverged value is stored as null in a checkpoint's metrics.
    out: dict[str, float | None] = {}
    for name, value in metrics.items():
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        out[str(name)] = number if math.isfinite(number) else None
    return out


class RunHooks:
    """agent_core.training.types.Hooks for one claimed attempt of a run."""

    def __init__(
        self,
        run: TrainingRun,
        *,
        attempt: int | None = None,
        stop_poll_s: float = 2.0,
        heartbeat_s: float = 1.0,
        lost: threading.Event | None = None,
    ) -> None:
        self.run = run
        self.attempt = run.attempt if attempt is None else attempt
        self.stop_poll_s = stop_poll_s
        self.heartbeat_s = heartbeat_s
        self.lost = lost or threading.Event()
        self._last_beat = 0.0
        self._last_poll = 0.0
        self._stop = False

    def _check(self) -> None:
        if self.lost.is_set():
            raise RunLost(f"run {self.run.pk} attempt {self.attempt} was given up by the reaper")

    def _beat(self, *, force: bool = False, **fields: object) -> None:
        """Heartbeat (at most every heartbeat_s unless forced or there are fields to write)."""
        self._check()
        now = time.monotonic()
        if not force and not fields and now - self._last_beat < self.heartbeat_s:
            return
        if not TrainingRun.beat(self.run.pk, attempt=self.attempt, **fields):
            self.lost.set()
            self._check()
        self._last_beat = now

    def on_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        """One bulk insert of the step's metric points, and the run's step."""
        self._check()
        # SQLite stores NaN as NULL, which the column refuses; PostgreSQL keeps it (the API shows null).
        keep_nan = connection.vendor != "sqlite"
        points = []
        for name, value in metrics.items():
            try:
                number = float(value)
            except (TypeError, ValueError):
                continue
            if math.isnan(number) and not keep_nan:
                continue
            points.append(MetricPoint(run_id=self.run.pk, name=str(name)[:100], step=int(step), value=number))
        self._beat(step=int(step))
        MetricPoint.objects.bulk_create(points)

    def on_checkpoint(self, step: int, path: Path, metrics: Mapping[str, float]) -> None:
        """The checkpoint's row (a resumed run that saves the same step again updates it)."""
        self._beat(force=True)
        Checkpoint.objects.update_or_create(
            run_id=self.run.pk,
            step=int(step),
            defaults={"path": var_relative(Path(path)), "metrics": _finite(metrics)},
        )

    def on_log(self, message: str) -> None:
        self._check()
        log_append(self.run, message)
        self._beat()

    def should_stop(self) -> bool:
        """Whether someone asked the run to stop (read from the database at most every stop_poll_s)."""
        self._check()
        now = time.monotonic()
        if now - self._last_poll >= self.stop_poll_s:
            self._last_poll = now
            self._beat(force=True)
            self._stop = bool(
                TrainingRun.objects.filter(pk=self.run.pk).values_list("stop_requested", flat=True).first()
            )
        return self._stop


@contextmanager
def heartbeat(run: TrainingRun, *, attempt: int, every_s: float, lost: threading.Event) -> Iterator[None]:
    """Heartbeat the claimed run from a thread while the block runs (a long step reports nothing).

    A heartbeat that finds the run no longer ours sets `lost`; the hooks raise RunLost at the next report.
    every_s <= 0 turns the thread off (the hooks still heartbeat when the trainer reports).
    """
    if every_s <= 0:
        yield
        return
    done = threading.Event()

    def loop() -> None:
        try:
            while not done.wait(every_s):
                try:
                    mine = TrainingRun.beat(run.pk, attempt=attempt)
                except Exception:  # a database hiccup: try again at the next beat
                    log.exception("run %s: heartbeat failed", run.pk)
                    continue
                if not mine:
                    lost.set()
                    return
        finally:
            connection.close()

    thread = threading.Thread(target=loop, name=f"training-heartbeat-{run.pk}", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join(timeout=30)
