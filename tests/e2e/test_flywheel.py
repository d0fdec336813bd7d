"""The flywheel after a small real run, in a real browser: rollouts and a demonstration on real
desktop sandboxes, two rounds (the second closed from the page by a Celery `datasets` worker),
the flywheel page's chart and figures, an export started, followed and downloaded from the page,
and the health dashboard. Screenshots go to var/e2e-screenshots/.
"""

from __future__ import annotations

import io
import json
import tarfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.test import override_settings
from playwright.sync_api import Browser, Page, expect

from tests.conftest import Personas
from tests.e2e.conftest import session_cookie
from tests.e2e.platform import site_with_host
from tests.procs import wait_for
from tests.sandbox_workers.hostproc import LIGHT_DESKTOP, TOKEN
from tests.webapp.annotation.conftest import note_reads, note_task
from tests.webapp.annotation.test_demo_real import keys
from webapp.annotation.services import demo_start
from webapp.annotation.session import LiveSession
from webapp.catalog.models import Task
from webapp.catalog.services import suite_get_or_create, suite_load
from webapp.dashboards.services import health_sample_take
from webapp.datasets.models import DatasetExport, FlywheelIteration
from webapp.datasets.rounds import flywheel_round_close
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.rollouts.models import RolloutBatch
from webapp.rollouts.services import batch_create
from webapp.sandboxes.control import control_held_by
from webapp.sandboxes.models import Sandbox

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "var" / "e2e-screenshots"
TASKS = ["desktop/terminal/count-lines", "desktop/editor/append-line"]


@contextmanager
def health_sampler(every_s: float = 2.0) -> Iterator[None]:
    """Take environment-health samples during the run, as beat does every 30 s in `make run`."""
    stop = threading.Event()

    def loop() -> None:
        try:
            while not stop.is_set():
                health_sample_take()
                stop.wait(every_s)
        finally:
            connection.close()

    thread = threading.Thread(target=loop, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=30)


def until(predicate: Any, what: str, timeout: float = 300) -> None:
    assert wait_for(predicate, timeout=timeout, interval=0.3), f"timed out waiting for {what}"


@pytest.fixture
def platform(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    """daphne + a worker for rollouts, sandboxes and datasets + a desktop host; yields the web URL."""
    exports = tmp_path / "exports"
    with (
        override_settings(SANDBOX_HOST_TOKEN=TOKEN, EXPORTS_DIR=exports),
        site_with_host(
            tmp_path,
            host_name="e2e-flywheel-host",
            profiles={"desktop": {**LIGHT_DESKTOP, "min_idle": 2, "max_total": 3}},
            slot_base=200,
            queues="rollouts,sandboxes,datasets,interactive",
            concurrency=3,
            env={"ROLLOUT_LEASE_WAIT_SECONDS": "90", "EXPORTS_DIR": str(exports)},
            ready=lambda host: Sandbox.objects.filter(state="idle", profile="desktop").count() >= 2,
        ) as (url, _),
    ):
        yield url


def page_as(browser: Browser, url: str, user: Any) -> Page:
    context = browser.new_context(
        base_url=url, viewport={"width": 1400, "height": 1000}, accept_downloads=True
    )
    context.set_default_timeout(30_000)
    context.add_cookies([session_cookie(user, url)])  # type: ignore[list-item]
    return context.new_page()


def run_batch(suite: Any, policy: PolicyVersion, personas: Personas) -> RolloutBatch:
    batch = batch_create(
        suite=suite, policy_version=policy, episodes_per_task=1, concurrency=2, created_by=personas.researcher
    )
    until(lambda: RolloutBatch.objects.get(pk=batch.pk).status == "finished", f"batch {batch.name}")
    return batch


def holds_control(episode_id: int, user: Any) -> bool:
    sandbox_id = Episode.objects.get(pk=episode_id).sandbox_id
    return sandbox_id is not None and control_held_by(sandbox_id=sandbox_id, user=user)


def demonstrate(personas: Personas, *, right: bool) -> Episode:
    """A real demonstration of the note task through the session recorder (the page's server side)."""
    task = Task.objects.filter(slug="demo/write-note").first() or note_task()
    episode = demo_start(task=task, annotator=personas.annotator)
    # Running comes first; control is handed over once the task is set up on the sandbox.
    until(lambda: Episode.objects.get(pk=episode.pk).status == "running", "the demonstration's sandbox", 120)
    until(lambda: holds_control(episode.pk, personas.annotator), "control of the sandbox", 120)
    session = LiveSession(episode_id=episode.pk, user=personas.annotator)
    session.set_thought("The terminal has focus; I write the note.")
    word = "hello" if right else "nope"
    session.input(keys(f"echo {word} > note.txt\n", time.monotonic()))
    # A person submits once they see the command has run: the keys are in, but the shell may not have
    # run the line yet (it scored 0 now and then when submitted at once on a loaded machine).
    note_reads(episode, word)
    done = session.submit()
    session.close()
    return done


def chart_has_ink(page: Page, selector: str) -> bool:
    """Whether the canvas has non-blank pixels (Chart.js really drew)."""
    return bool(
        page.evaluate(
            """(sel) => {
                const c = document.querySelector(sel);
                if (!c || !c.width || !c.height) return false;
                const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
                let ink = 0;
                for (let i = 3; i < d.length; i += 4) if (d[i] > 0) ink++;
                return ink > 500;
            }""",
            selector,
        )
    )


def test_the_flywheel_after_a_small_real_run(platform: str, browser: Browser, personas: Personas) -> None:
    suite_load(name="desktop")
    Task.objects.filter(slug__in=TASKS).update(is_published=True)
    suite = suite_get_or_create(slug="flywheel-e2e", name="Flywheel e2e")
    suite.tasks.add(*Task.objects.filter(slug__in=TASKS))
    oracle = PolicyVersion.objects.create(name="oracle", backend="oracle")
    noop = PolicyVersion.objects.create(name="noop", backend="noop")

    with health_sampler():
        # Round 1: the do-nothing policy fails both tasks, a person demonstrates one task right.
        run_batch(suite, noop, personas)
        demo = demonstrate(personas, right=True)
        assert demo.reward == 1.0, demo.check_details
        first = flywheel_round_close(created_by=personas.admin)
        assert first.stats["episodes"] == 3 and first.stats["v1"] == 1, first.stats

        # Round 2: the oracle policy solves both; one more demonstration goes wrong.
        run_batch(suite, oracle, personas)
        wrong = demonstrate(personas, right=False)
        assert wrong.reward == 0.0

    admin = page_as(browser, platform, personas.admin)
    admin.goto("/datasets/flywheel/")
    expect(admin.get_by_test_id("round-row")).to_have_count(1)
    admin.get_by_test_id("close-round").click()  # queued on `datasets`; the page follows its progress
    expect(admin.get_by_test_id("round-row")).to_have_count(2, timeout=120_000)
    second = FlywheelIteration.objects.get(number=2)
    assert second.status == "finished" and second.stats["episodes"] == 3
    assert second.stats["by_source"]["agent"] == {"n": 2, "v1": 2, "p_v1": 1.0}
    assert second.stats["by_source"]["human"] == {"n": 1, "v1": 0, "p_v1": 0.0}
    expect(admin.get_by_test_id("round-p").nth(0)).to_have_text("0.333")
    expect(admin.get_by_test_id("round-p").nth(1)).to_have_text("0.667")
    expect(admin.get_by_test_id("trend")).to_contain_text("rises every round")
    expect(admin.locator("#p-v1-chart[data-drawn='1']")).to_have_count(1)
    assert chart_has_ink(admin, "#p-v1-chart")
    expect(admin.get_by_test_id("by-task")).to_contain_text(TASKS[0])
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    admin.screenshot(path=SCREENSHOTS / "flywheel.png", full_page=True)

    # Export round 2's SFT version from its page, watch it finish, download it.
    admin.get_by_role("link", name="flywheel-sft@v2").click()
    expect(admin.get_by_test_id("member-row")).to_have_count(3)  # the demo and both oracle episodes
    admin.locator("select[name=fmt]").select_option("parquet")
    admin.get_by_test_id("export-start").click()
    download_link = admin.get_by_test_id("export-download")
    expect(download_link).to_be_visible(timeout=120_000)
    export = DatasetExport.objects.get()
    assert export.status == "finished" and export.manifest["records"] > 0
    with admin.expect_download() as info:
        download_link.click()
    body = Path(info.value.path()).read_bytes()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        manifest_name = next(n for n in tar.getnames() if n.endswith("/manifest.json"))
        manifest = json.loads(tar.extractfile(manifest_name).read())  # type: ignore[union-attr]
    assert manifest["records"] == export.manifest["records"] and manifest["episodes"] == 3

    # The health dashboard after the run: the host, its desktops and the queues.
    admin.goto("/dashboards/health/")
    expect(admin.locator("body")).to_contain_text("e2e-flywheel-host")
    # Wait until every chart has drawn (or said it has nothing to draw) from its JSON endpoint.
    expect(admin.locator("canvas:not([data-state])")).to_have_count(0)
    expect(admin.locator("canvas[data-state='error']")).to_have_count(0)
    admin.screenshot(path=SCREENSHOTS / "health.png", full_page=True)
    admin.context.close()
