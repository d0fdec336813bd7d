"""The dashboards in a real Chromium: charts really drawn from the JSON endpoints, tables with the
figures of the rows, the rollouts wall refreshing its text as steps arrive, and refusals."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone
from playwright.sync_api import Browser, Page, expect

from tests.conftest import Personas
from tests.e2e.conftest import OpenAs, session_cookie
from tests.e2e.platform import site_with_host
from tests.factories import PNG_1X1, make_episode, make_task
from tests.procs import ROOT
from tests.sandbox_workers.hostproc import LIGHT_DESKTOP
from tests.webapp.dashboards.conftest import ended, heartbeat
from webapp.dashboards.services import health_sample_take
from webapp.episodes.models import Episode
from webapp.episodes.services import step_record
from webapp.policies.models import PolicyVersion
from webapp.reviews.services import review_assign, review_decide
from webapp.sandboxes.models import Sandbox

pytestmark = pytest.mark.slow

SCREENSHOTS = ROOT / "var" / "e2e-screenshots"

# How many pixels of a canvas are close to the first series colour (#2f6fde): axes, grid lines and
# labels are grey or black, so only drawn data makes this non-zero.
SERIES_PIXELS = """(canvas) => {
  const d = canvas.getContext('2d').getImageData(0, 0, canvas.width, canvas.height).data;
  let n = 0;
  const near = (i, r, g, b) =>
    Math.abs(d[i] - r) < 30 && Math.abs(d[i + 1] - g) < 30 && Math.abs(d[i + 2] - b) < 30;
  for (let i = 0; i < d.length; i += 4) if (d[i + 3] > 200 && near(i, 47, 111, 222)) n++;
  return n;
}"""


def charts_drawn(page: Page) -> dict[str, tuple[str, int]]:
    """Every chart canvas on the page, once none is still loading: {id: (state, series pixels)}."""
    page.wait_for_function(
        "() => [...document.querySelectorAll('canvas[data-testid=chart]')].every(c => c.dataset.state)"
    )
    out = {}
    for canvas in page.locator("canvas[data-testid=chart]").all():
        out[canvas.get_attribute("id")] = (canvas.get_attribute("data-state"), canvas.evaluate(SERIES_PIXELS))
    return out


def shoot(page: Page, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SCREENSHOTS / f"{name}.png", full_page=True)


def cell(page: Page, row: str, testid: str) -> str:
    return page.locator(f"{row} [data-testid={testid}]").inner_text().strip()


@pytest.fixture
def flywheel(personas: Personas) -> dict:
    """Rows behind every dashboard: ended and running episodes, a host with its pools, samples, reviews."""
    policy = PolicyVersion.objects.create(name="pi-e2e", backend="oracle")
    desktop = make_task(slug="e2e/desktop", platform="desktop", env_profile="desktop", max_steps=10)
    host = heartbeat(
        "e2e-host",
        sandboxes=[
            {
                "profile": "desktop",
                "state": "leased",
                "latency": {"reset": {"n": 4.0, "p50": 420.0, "p95": 610.0}},
            },
            {
                "profile": "desktop",
                "state": "idle",
                "latency": {"reset": {"n": 4.0, "p50": 380.0, "p95": 590.0}},
            },
            {
                "profile": "miniwob",
                "state": "idle",
                "latency": {"reset": {"n": 2.0, "p50": 90.0, "p95": 120.0}},
            },
        ],
        counters={"started": 12, "start_failed": 1, "replaced": 2, "expired": 0},
        lease_wait={"n": 30.0, "p50": 8.0, "p95": 35.0},
        profiles={"desktop": {"max_total": 4}, "miniwob": {"max_total": 2}},
    )
    miniwob = make_task(slug="e2e/miniwob", env_profile="miniwob")  # a profile the host serves
    sandbox = host.sandboxes.get(profile="desktop", state="leased")
    for reward in (1.0, 1.0, 1.0, 0.0):
        ended(desktop, reward=reward, policy=policy, sandbox=sandbox)
    ended(desktop, env_error=True, policy=policy, sandbox=sandbox)
    ended(miniwob, reward=1.0, policy=policy, at=timezone.now() - timedelta(days=1))
    ended(miniwob, reward=0.0, policy=policy, at=timezone.now() - timedelta(days=1))
    demo = ended(desktop, reward=1.0, annotator=personas.annotator, steps=2)
    for reviewer in (personas.reviewer, personas.admin):
        review = review_assign(episode=demo, reviewer=reviewer, assigned_by=personas.admin)
        review_decide(review=review, actor=reviewer, verdict="accept", quality=4)
    running = make_episode(task=desktop, steps=2, finish=False)
    Episode.objects.filter(pk=running.pk).update(policy_version=policy)
    health_sample_take(now=timezone.now() - timedelta(minutes=5))
    health_sample_take()
    return {"running": running}


def test_success_dashboard_draws_its_charts_and_tables(flywheel, open_as: OpenAs) -> None:
    page = open_as("researcher")
    page.goto("/dashboards/success/")
    charts = charts_drawn(page)
    assert set(charts) == {"chart-task-rate", "chart-outcomes", "chart-policy", "chart-policy-time"}
    for name, (state, pixels) in charts.items():
        assert state == "drawn" and pixels > 20, (name, state, pixels)
    assert page.locator("#chart-policy").get_attribute("data-points") == "1"
    assert cell(page, "[data-testid=policy-row][data-policy=pi-e2e]", "rate") == "67%"  # 4 of 6 attempts
    assert cell(page, "[data-testid=task-row][data-task='e2e/desktop']", "rate") == "80%"  # demo included
    assert cell(page, "[data-testid=task-row][data-task='e2e/miniwob']", "rate") == "50%"
    shoot(page, "dashboard-success")
    # Hour buckets: the same figures, another JSON request.
    page.locator("select[name=bucket]").select_option("hour")
    page.locator("select[name=since_days]").select_option("3")
    page.get_by_role("button", name="Show").click()
    page.wait_for_url("**bucket=hour**")
    assert charts_drawn(page)["chart-task-rate"][0] == "drawn"


def test_health_dashboard_draws_its_charts_and_tables(flywheel, open_as: OpenAs) -> None:
    page = open_as("admin")
    page.goto("/dashboards/health/")
    expect(page.locator("[data-testid=sample-count]")).to_have_text("(2 samples)")
    charts = charts_drawn(page)
    assert len(charts) == 6
    for name, (state, pixels) in charts.items():
        assert state == "drawn" and pixels > 20, (name, state, pixels)
    row = "[data-testid=host-row][data-host=e2e-host]"
    assert cell(page, row, "leased-live") == "1 / 3"
    assert cell(page, row, "utilisation") == "33%"
    assert cell(page, row, "lease-wait") == "8.0 / 35.0 ms (30)"
    assert cell(page, row, "crash-rate") == "0.231"  # (1 failed start + 2 replaced) of 13 attempts
    assert cell(page, row, "env-errors") == "1 / 5 (0.200)"
    assert cell(page, "[data-testid=profile-row][data-profile=desktop]", "reset") == "400.0 / 600.0 ms (8)"
    depth = cell(page, "[data-testid=queue-row][data-queue=rollouts]", "depth")
    assert depth.isdigit()
    shoot(page, "dashboard-health")


def test_annotation_dashboard_draws_its_charts_and_tables(flywheel, open_as: OpenAs) -> None:
    page = open_as("researcher")
    page.goto("/dashboards/annotation/")
    charts = charts_drawn(page)
    for name, (state, pixels) in charts.items():
        assert state == "drawn" and pixels > 20, (name, state, pixels)
    assert cell(page, "[data-testid=annotator-row][data-annotator=alice]", "demos") == "1"
    assert cell(page, "[data-testid=annotator-row][data-annotator=alice]", "steps") == "2"
    assert cell(page, "[data-testid=reviewer-row][data-reviewer=bob]", "decisions") == "1"
    expect(page.locator("[data-testid=review-agreement] [data-testid=agreement-row]").first).to_contain_text(
        "bob"
    )
    shoot(page, "dashboard-annotation")


def test_rollouts_wall_refreshes_the_thought_and_action_as_steps_arrive(flywheel, open_as: OpenAs) -> None:
    running = flywheel["running"]
    page = open_as("researcher")
    page.goto("/dashboards/rollouts/")
    tile = page.locator(f"[data-testid=rollout-tile][data-episode='{running.pk}']")
    expect(tile.locator("[data-testid=rollout-progress]")).to_have_text("step 2 / 10")
    expect(tile.locator("[data-testid=rollout-thought]")).to_have_text("step 1")
    expect(tile.locator("[data-testid=rollout-policy]")).to_have_text("pi-e2e")
    width = tile.locator("[data-testid=rollout-thumb]").evaluate(
        """img => img.complete && img.naturalWidth ? img.naturalWidth : new Promise((resolve) => {
             img.onload = () => resolve(img.naturalWidth); img.onerror = () => resolve(-1); })"""
    )
    assert width > 0
    step_record(
        episode=Episode.objects.get(pk=running.pk),
        actor="agent",
        action={"type": "type", "text": "quarterly report"},
        action_text="type(content='quarterly report')",
        thought="Type the file name into the dialog",
        screenshot_png=PNG_1X1,
        screen_size=(1, 1),
    )
    expect(tile.locator("[data-testid=rollout-thought]")).to_have_text("Type the file name into the dialog")
    expect(tile.locator("[data-testid=rollout-action]")).to_have_text("type(content='quarterly report')")
    expect(tile.locator("[data-testid=rollout-progress]")).to_have_text("step 3 / 10")
    shoot(page, "dashboard-rollouts")
    page.locator("[data-testid=dash-tabs]").get_by_role("link", name="Success").click()
    page.wait_for_url("**/dashboards/success/")


def test_people_without_the_permissions_are_refused(flywheel, open_as: OpenAs) -> None:
    page = open_as("annotator")
    for path in (
        "/dashboards/rollouts/",
        "/dashboards/success/",
        "/dashboards/health/",
        "/dashboards/annotation/",
    ):
        response = page.goto(path)
        assert response is not None and response.status == 403, path
    assert page.request.get("/api/v1/dashboards/success").status == 403
    assert page.request.get("/metrics").status == 403
    assert open_as("researcher").request.get("/metrics").status == 200


# --- a live screen on the wall ----------------------------------------------------------------------


@pytest.fixture
def live_site(transactional_db: None, tmp_path: Path) -> Iterator[tuple[str, Sandbox]]:
    """daphne with the host token, and a real desktop sandbox heartbeating into it."""
    with site_with_host(
        tmp_path,
        host_name=f"e2e-dash-{uuid.uuid4().hex[:6]}",
        profiles={"desktop": LIGHT_DESKTOP},
        slot_base=192,
        ready=lambda host: Sandbox.objects.filter(host__name=host.name, state="idle").first(),
    ) as found:
        yield found


def test_wall_shows_the_live_screen_and_keeps_it_across_refreshes(
    browser: Browser, personas: Personas, live_site: tuple[str, Sandbox]
) -> None:
    url, sandbox = live_site
    running = make_episode(steps=1, finish=False)
    Episode.objects.filter(pk=running.pk).update(sandbox=sandbox)
    context = browser.new_context(base_url=url)
    context.set_default_timeout(20_000)
    context.add_cookies([session_cookie(personas.researcher, url)])  # type: ignore[list-item]
    page = context.new_page()
    try:
        page.goto("/dashboards/rollouts/")
        tile = page.locator(f"[data-testid=rollout-tile][data-episode='{running.pk}']")
        expect(tile.locator("[data-testid=rollout-live]")).to_have_attribute("data-sandbox", str(sandbox.pk))
        # The screencast draws the desktop into the tile's canvas: more than one colour on a grid.
        page.wait_for_function(
            """() => { const c = document.querySelector('#tiles [data-sandbox] canvas');
                 if (!c || !c.width) return false;
                 const copy = document.createElement('canvas');  // a bitmaprenderer canvas: read a copy
                 copy.width = c.width; copy.height = c.height;
                 const g = copy.getContext('2d');
                 g.drawImage(c, 0, 0);
                 const d = g.getImageData(0, 0, c.width, c.height).data, seen = new Set();
                 for (let i = 0; i < d.length; i += 4 * 997) seen.add(d[i] + ',' + d[i + 1] + ',' + d[i + 2]);
                 return seen.size > 1; }""",
            timeout=60_000,
        )
        page.evaluate("window.screenBefore = document.querySelector('#tiles [data-sandbox] canvas')")
        step_record(
            episode=Episode.objects.get(pk=running.pk),
            actor="agent",
            action={"type": "hotkey", "keys": ["ctrl", "s"]},
            action_text="hotkey(key='ctrl s')",
            thought="Save before closing",
            screenshot_png=PNG_1X1,
            screen_size=(1, 1),
        )
        expect(tile.locator("[data-testid=rollout-thought]")).to_have_text("Save before closing")
        # The text was swapped in, the screen was not: same canvas, one live box, still connected.
        assert page.evaluate("document.contains(window.screenBefore)")
        assert tile.locator(".live-box").count() == 1
        assert tile.locator(".live-box").get_attribute("data-state") == "connected"
        shoot(page, "dashboard-rollouts-live")
    finally:
        context.close()
