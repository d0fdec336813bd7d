"""Through a real sandbox host: the profiles it registers and heartbeats decide which tasks can start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from django.urls import reverse

from sandbox_workers.profiles import OFFICE_PROFILE
from tests.agent_core.test_osworld_import import CALC_TASK
from tests.procs import wait_for
from tests.sandbox_workers.hostproc import TOKEN, HostProc
from webapp.catalog.availability import task_unavailable_reason
from webapp.catalog.models import Task
from webapp.catalog.services import osworld_import
from webapp.common.queue import DEMO_PREPARE

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


@override_settings(SANDBOX_HOST_TOKEN=TOKEN, SANDBOX_HOST_GRACE_SECONDS=3)
def test_an_office_task_is_startable_while_a_real_host_serves_office_and_not_once_it_stops(
    live_server: Any, tmp_path: Path, client_for: Any, queued: Any
) -> None:
    from agent_core.tasks.osworld_files import TaskFile

    result = osworld_import(files=[TaskFile("calc.json", CALC_TASK)], domain="libreoffice_calc")
    task = Task.objects.get(slug=result.slugs[0])
    assert result.unavailable == [task.slug]
    annotator = client_for("annotator")
    assert annotator.post(reverse("annotation:start"), {"task": task.pk}).status_code == 409
    # The host serves office but keeps no desktop warm: it registers and heartbeats, nothing heavier.
    office = {**OFFICE_PROFILE, "min_idle": 0, "max_total": 1}
    host = HostProc(name="office-host", var=tmp_path, profiles={"office": office}, web_url=live_server.url,
                    slot_base=390)  # fmt: skip
    host.start(warm=False)
    try:
        assert wait_for(lambda: task_unavailable_reason(task=task) == "", timeout=60, interval=0.2), (
            "the host's registration did not make the office task available"
        )
        started = annotator.post(reverse("annotation:start"), {"task": task.pk})
        assert started.status_code == 302 and queued.of(DEMO_PREPARE)
    finally:
        host.stop()
    # Stopped: once its heartbeats are past the grace period, nothing serves office any more.
    assert wait_for(lambda: task_unavailable_reason(task=task) != "", timeout=60, interval=0.2)
    assert annotator.post(reverse("annotation:start"), {"task": task.pk}).status_code == 409
