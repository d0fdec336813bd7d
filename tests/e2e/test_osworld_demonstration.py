"""An annotator proves an imported OSWorld task in a real Chromium: the task has no scripted solution,
so it is unpublished and offered under *Prove a benchmark task*; the annotator fills the spreadsheet in
the live view of a real office desktop (LibreOffice Calc), submits, OSWorld's own compare_table scores
it 1, and the platform's check (doing nothing must score 0, on a Celery worker) publishes the task with
the demonstration as its proof."""

from __future__ import annotations

import copy
import io
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.management import call_command
from playwright.sync_api import Browser, expect

from agent_core.suites import osworld_samples
from sandbox_workers.profiles import OFFICE_PROFILE
from tests.conftest import Personas
from tests.e2e.platform import site_with_host
from tests.e2e.test_demonstration import login, screen_point
from tests.procs import wait_for
from webapp.catalog.models import Task
from webapp.episodes.models import Episode, Step
from webapp.sandboxes.models import Sandbox

pytestmark = [pytest.mark.slow, pytest.mark.osworld]

# The sample Calc task under another id: no scripted solution is registered for it.
TASK = copy.deepcopy(osworld_samples.TASKS["libreoffice_calc"])
TASK["id"] = "unproven-calc-row-sums"


@pytest.fixture
def platform(transactional_db: None, tmp_path: Path, osworld_mirror: Path) -> Iterator[str]:
    """daphne, a worker for demonstrations and checks, and a host with office desktops (which fetches
    the task's files from the mirror: the host inherits this environment)."""
    with site_with_host(
        tmp_path,
        host_name="e2e-office-host",
        profiles={"office": {**OFFICE_PROFILE, "min_idle": 1, "max_total": 2}},
        slot_base=360,
        queues="interactive,sandboxes,rollouts,checks",
        env={"ROLLOUT_LEASE_WAIT_SECONDS": "60"},
        ready=lambda host: Sandbox.objects.filter(state="idle", profile="office").exists(),
    ) as (url, _):
        yield url


def test_an_annotator_proves_an_imported_task_and_it_is_published(
    platform: str, browser: Browser, personas: Personas, tmp_path: Path
) -> None:
    (tmp_path / "tasks" / "libreoffice_calc").mkdir(parents=True)
    path = tmp_path / "tasks" / "libreoffice_calc" / f"{TASK['id']}.json"
    path.write_text(json.dumps(TASK))
    call_command("tasks_import_osworld", str(path), stdout=io.StringIO())
    task = Task.objects.get(slug=f"osworld/libreoffice_calc/{TASK['id']}")
    assert not task.is_published
    assert "no proof yet" in task.verification_reason

    page = login(browser, platform, personas.annotator.get_username())
    page.get_by_role("link", name="Annotate").click()
    prove = page.get_by_test_id("prove-form")
    prove.get_by_label("Task").select_option(str(task.pk))
    prove.get_by_role("button", name="Demonstrate").click()
    expect(page.get_by_test_id("recorder")).to_be_visible(timeout=120_000)
    live_state = "() => document.querySelector('[data-testid=session]').dataset.live"
    assert wait_for(lambda: page.evaluate(live_state) == "connected", timeout=30), (
        "the live view did not connect"
    )
    episode = Episode.objects.get(task=task, annotator=personas.annotator)

    # Into the sheet, to A1, then to the first total (D2), and type each row's sum.
    x, y = screen_point(page, 700, 500)
    page.mouse.click(x, y)
    page.keyboard.press("Control+Home")
    for key in ("ArrowRight", "ArrowRight", "ArrowRight", "ArrowDown"):
        page.wait_for_timeout(250)  # a person's pace
        page.keyboard.press(key)
    page.wait_for_timeout(250)
    page.keyboard.type("=B2+C2\n=B3+C3\n=B4+C4\n")
    assert wait_for(lambda: Step.objects.filter(episode=episode, action__type="type").exists(), timeout=20)
    page.wait_for_timeout(1000)

    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("reward")).to_have_text("Reward: 1", timeout=60_000)

    # The demonstration is the task's proof; the check (doing nothing scores 0) publishes it.
    assert wait_for(lambda: Task.objects.get(pk=task.pk).is_published, timeout=180), Task.objects.get(
        pk=task.pk
    ).verification
    task.refresh_from_db()
    assert task.verification["proof"]["episode"] == episode.pk
    assert task.verification["noop"] == [0.0, 0.0]
    # It is offered to every annotator now like any published task.
    page.get_by_role("link", name="Annotate").click()
    expect(page.get_by_test_id("start-form").locator(f"option[value='{task.pk}']")).to_have_count(1)
