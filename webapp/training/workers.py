"""Training workers report the devices they train on: the launch form plans runs against them.

A Celery worker that consumes the `training` queue measures its devices once it is ready (CUDA devices
and the host's RAM, in a child process: agent_core.training.devices) and writes a TrainingWorker row;
a thread renews `reported_at` every `report_seconds()` while the worker lives, and a clean shutdown
deletes the row. A worker not heard from for `stale_seconds()` (killed, its machine gone) no longer
counts. Connected from TrainingConfig.ready(); the signals fire only in worker processes.
"""

from __future__ import annotations

import logging
import threading
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import close_old_connections, connection
from django.utils import timezone

from webapp.training.models import TrainingWorker

log = logging.getLogger(__name__)

QUEUE = "training"
_stop = threading.Event()


def report_seconds() -> float:
    """How often a live training worker renews its report."""
    return float(getattr(settings, "TRAINING_WORKER_REPORT_S", 30))


def stale_seconds() -> float:
    """How long after its last report a training worker stops counting."""
    return float(getattr(settings, "TRAINING_WORKER_STALE_S", 120))


def training_worker_report(*, name: str, devices: list[dict[str, Any]], error: str = "") -> TrainingWorker:
    """Record (or replace) what the worker `name` trains on."""
    now = timezone.now()
    worker, _ = TrainingWorker.objects.update_or_create(
        name=name[:200],
        defaults={"devices": devices, "error": error[:2000], "started_at": now, "reported_at": now},
    )
    return worker


def training_worker_beat(*, name: str) -> bool:
    """Renew the worker's report; False when it has no row (deleted meanwhile: it reports again)."""
    return TrainingWorker.objects.filter(name=name[:200]).update(reported_at=timezone.now()) == 1


def training_workers_live(*, now: datetime | None = None) -> list[TrainingWorker]:
    """The training workers heard from within stale_seconds(), by name."""
    since = (now or timezone.now()) - timedelta(seconds=stale_seconds())
    return list(TrainingWorker.objects.filter(reported_at__gte=since))


def _measure(name: str) -> None:
    """Measure the devices (in a child process) and report them; renew the report until shutdown."""
    from agent_core.training.devices import DeviceProbeError, probe_devices

    try:
        try:
            devices, error = probe_devices(), ""
        except DeviceProbeError as exc:
            devices, error = [], str(exc)
            log.warning("training worker %s: %s", name, exc)
        training_worker_report(name=name, devices=devices, error=error)
        log.info("training worker %s reports %s", name, ", ".join(_said(d) for d in devices) or error)
        while not _stop.wait(report_seconds()):
            try:
                close_old_connections()  # a connection the database dropped is opened anew
                if not training_worker_beat(name=name):
                    training_worker_report(name=name, devices=devices, error=error)
            except Exception:  # a database hiccup: report again at the next beat
                log.exception("training worker %s: renewing its device report failed", name)
    except Exception:
        log.exception("training worker %s: reporting its devices failed", name)
    finally:
        connection.close()


def _said(device: dict[str, Any]) -> str:
    return f"{device.get('name')} ({int(device.get('memory', 0)) / 2**30:.1f} GiB)"


def _on_worker_ready(sender: Any = None, **_: Any) -> None:
    app, name = getattr(sender, "app", None), str(getattr(sender, "hostname", "") or "")
    if app is None or not name:
        return
    queues = app.amqp.queues
    consumed = set((queues.consume_from or queues).keys())
    if QUEUE not in consumed:
        return
    _stop.clear()
    threading.Thread(target=_measure, args=(name,), name="training-worker-report", daemon=True).start()


def _on_worker_shutdown(sender: Any = None, **_: Any) -> None:
    name = str(getattr(sender, "hostname", "") or "")
    _stop.set()
    if not name:
        return
    try:
        TrainingWorker.objects.filter(name=name[:200]).delete()
    except Exception:  # the database is gone too: the row goes stale on its own
        log.exception("training worker %s: removing its device report failed", name)


def connect() -> None:
    """Connect the worker signals (idempotent: dispatch_uid)."""
    from celery.signals import worker_ready, worker_shutdown

    worker_ready.connect(_on_worker_ready, weak=False, dispatch_uid="training-worker-ready")
    worker_shutdown.connect(_on_worker_shutdown, weak=False, dispatch_uid="training-worker-shutdown")
