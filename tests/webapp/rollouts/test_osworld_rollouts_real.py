"""OSWorld through the whole platform: the project's own OSWorld-format tasks, one per application (Calc,
Impress, Writer, GIMP, VLC, Thunderbird, Chrome, the terminal, and one across two applications), imported
with `manage.py tasks_import_osworld`, their files served by the sandbox host from an offline mirror, then
rolled out through Celery rollout workers on real office desktops with the real applications: the scripted
solution scores 1 and doing nothing 0 on each, scored by OSWorld's own metric function. `make test` rolls
out a sample (Calc, and the task across Calc and the text editor; every one is imported and Calc proven
by the platform's check); `make verify-suites` (FULL_SWEEPS=1) rolls out all nine."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from django.core.management import call_command
from django.test import override_settings

from agent_core.suites import osworld_samples
from sandbox_workers.profiles import OFFICE_PROFILE
from tests import sweeps
from tests.sandbox_workers.hostproc import TOKEN, HostProc
from tests.webapp.rollouts.test_rollouts_real import rollout_worker, until, wait_batch
from webapp.catalog.models import Task
from webapp.catalog.services import suite_get_or_create
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.rollouts.services import batch_create
from webapp.rollouts.verification import task_verify
from webapp.sandboxes.models import Sandbox

pytestmark = [
    pytest.mark.slow,
    pytest.mark.osworld,
    pytest.mark.sweep,
    pytest.mark.django_db(transaction=True),
]
ROLLED_OUT = sweeps.sample(osworld_samples.TASKS, lambda d: d in ("libreoffice_calc", "multi_apps"))


@pytest.fixture
def office_host(live_server, tmp_path: Path, osworld_mirror: Path):
    profiles = {"office": {**OFFICE_PROFILE, "min_idle": 1, "max_total": 3}}
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


def test_the_apps_samples_are_imported_proven_and_rolled_out_through_celery(office_host, personas, tmp_path):
    out = io.StringIO()
    paths = osworld_samples.write_tasks(tmp_path / "tasks")
    call_command("tasks_import_osworld", *map(str, paths), stdout=out)
    n = len(osworld_samples.TASKS)
    assert n == 9 and f"imported {n} of {n}" in out.getvalue(), out.getvalue()
    slugs = {domain: osworld_samples.task_id(domain, doc) for domain, doc in osworld_samples.TASKS.items()}
    tasks = {domain: Task.objects.get(slug=slug) for domain, slug in slugs.items()}
    assert not any(task.is_published for task in tasks.values())

    # The platform's own check publishes the Calc task (its scripted solution 1, doing nothing 0).
    calc = tasks["libreoffice_calc"]
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        result = task_verify(task=calc, runs=1)
    assert result["ok"], result
    calc.refresh_from_db()
    assert calc.is_published
    # The others are proven by the batches below (the same two policies, through Celery); they are
    # published here so that a batch may take them.
    Task.objects.filter(pk__in=[t.pk for t in tasks.values()]).update(is_published=True)

    suite = suite_get_or_create(slug="osworld-sample", name="OSWorld sample")
    suite.tasks.add(*(tasks[domain] for domain in ROLLED_OUT))
    oracle = PolicyVersion.objects.create(name="oracle", backend="oracle")
    noop = PolicyVersion.objects.create(name="noop", backend="noop")
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN), rollout_worker(tmp_path, concurrency=2):
        batches = [
            batch_create(
                suite=suite,
                policy_version=policy,
                episodes_per_task=1,
                concurrency=1,
                created_by=personas.researcher,
            )  # fmt: skip
            for policy in (oracle, noop)
        ]
        for batch in batches:
            wait_batch(batch, timeout=900)
    failures = []
    for batch, want in zip(batches, (1.0, 0.0), strict=True):
        for domain in ROLLED_OUT:
            slug = slugs[domain]
            episode = Episode.objects.get(batch=batch, task__slug=slug)
            got = (episode.status, episode.reward, episode.env_error)
            if got != ("finished", want, False):
                steps = list(episode.steps.order_by("index").values_list("thought", flat=True))
                failures.append(
                    f"{batch.policy_version.name} on {domain}: {got} {episode.error} "
                    f"{episode.check_details} after {len(steps)} steps: {steps[-3:]}"
                )
            # Scored by OSWorld's own functions on what the episode left.
            elif not episode.check_details or any(d["metric"] != "osworld" for d in episode.check_details):
                failures.append(f"{domain}: not scored by OSWorld's metric: {episode.check_details}")
    assert not failures, failures
    (detail,) = Episode.objects.get(batch=batches[0], task__slug=slugs["libreoffice_calc"]).check_details
    assert detail["expected"]["file"] == "quarters_gold.xlsx", detail
