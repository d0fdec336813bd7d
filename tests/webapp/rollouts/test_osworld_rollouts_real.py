"""OSWorld through the whole platform: the project's own OSWorld-format Calc task imported with
`manage.py tasks_import_osworld`, its files served by the sandbox host from an offline mirror, published
by its check on a real office desktop (scripted solution 1, doing nothing 0), then rolled out through
Celery rollout workers with the real LibreOffice and scored by OSWorld's own compare_table."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings

from agent_core.suites import osworld_samples
from sandbox_workers.profiles import OFFICE_PROFILE
from tests.sandbox_workers.hostproc import TOKEN, HostProc
from tests.webapp.rollouts.test_rollouts_real import rollout_worker, until, wait_batch
from webapp.catalog.models import Task
from webapp.catalog.services import suite_get_or_create
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.rollouts.services import batch_create
from webapp.rollouts.verification import task_verify
from webapp.sandboxes.models import Sandbox

pytestmark = [pytest.mark.slow, pytest.mark.osworld, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def office_host(live_server, tmp_path: Path, osworld_mirror: Path):
    profiles = {"office": {**OFFICE_PROFILE, "min_idle": 1, "max_total": 2}}
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        h = HostProc(
            name="office-host", var=tmp_path, profiles=profiles, web_url=live_server.url, slot_base=330
        )
        h.start()
        try:
            until(
                lambda: Sandbox.objects.filter(state="idle", profile="office").exists(),
                "an idle office desktop",
            )
            yield h
        finally:
            h.stop()


def test_an_imported_calc_task_is_proven_published_and_rolled_out_through_celery(
    office_host, personas, tmp_path
):
    out = io.StringIO()
    call_command(
        "tasks_import_osworld", *map(str, osworld_samples.write_tasks(tmp_path / "tasks")), stdout=out
    )
    assert "imported 1 of 1" in out.getvalue(), out.getvalue()
    slug = osworld_samples.task_id("libreoffice_calc", osworld_samples.TASKS["libreoffice_calc"])
    task = Task.objects.get(slug=slug)
    assert not task.is_published

    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        result = task_verify(task=task, runs=1)
    assert result["ok"], result
    task.refresh_from_db()
    assert task.is_published

    suite = suite_get_or_create(slug="osworld-sample", name="OSWorld sample")
    suite.tasks.add(task)
    oracle = PolicyVersion.objects.create(name="oracle", backend="oracle")
    noop = PolicyVersion.objects.create(name="noop", backend="noop")
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN), rollout_worker(tmp_path, concurrency=1):
        batches = []
        for policy in (oracle, noop):
            batch = batch_create(suite=suite, policy_version=policy, episodes_per_task=1, concurrency=1,
                                 created_by=personas.researcher)  # fmt: skip
            wait_batch(batch, timeout=300)
            batches.append(batch)
    for batch, want in zip(batches, (1.0, 0.0), strict=True):
        episode = Episode.objects.get(batch=batch)
        assert (episode.status, episode.reward, episode.env_error) == ("finished", want, False), episode.error
        # Scored by OSWorld's own function on the file the episode left, against the mirror's reference.
        (detail,) = episode.check_details
        assert detail["metric"] == "osworld" and detail["expected"]["file"] == "quarters_gold.xlsx", detail
