"""Demonstrations in a browser sandbox, in a real Chromium: a MiniWoB++ task's live view fits the task's
corner of the screen to the box, and a click on the zoomed view lands on the same screen pixel as one on
the whole screen (the sandbox, its screenshots and recorded steps keep screen pixels; only the drawing
zooms); a game of the games suite is played by hand, scored and replayed."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from django.test import override_settings
from playwright.sync_api import Browser, Page, expect

from agent_core.suites.games import maze
from agent_core.suites.miniwob import VIEW_AREA, task_doc
from tests.conftest import Personas
from tests.e2e.platform import site_with_host
from tests.e2e.test_demonstration import screen_point, start_live
from tests.procs import wait_for
from tests.sandbox_workers.hostproc import TOKEN
from webapp.annotation.services import demo_env
from webapp.catalog.models import Task
from webapp.catalog.services import suite_load, task_create
from webapp.episodes.models import Step
from webapp.sandboxes.models import Sandbox

pytestmark = pytest.mark.slow

# How much of the live box the task area covers, and the zoom the box reports.
COVERAGE = """() => {
  const box = document.querySelector('#screen .live-box').getBoundingClientRect();
  const svg = document.querySelector('#screen svg').getBoundingClientRect();
  const vb = document.querySelector('#screen svg').viewBox.baseVal;
  const [x, y, w, h] = %s;
  const sx = svg.width / vb.width, sy = svg.height / vb.height;
  const left = Math.max(box.left, svg.left + x * sx), right = Math.min(box.right, svg.left + (x + w) * sx);
  const top = Math.max(box.top, svg.top + y * sy), bottom = Math.min(box.bottom, svg.top + (y + h) * sy);
  return {covered: (right - left) * (bottom - top) / (box.width * box.height),
          zoom: Number(document.querySelector('#screen .live-box').dataset.zoom)};
}""" % [VIEW_AREA["x"], VIEW_AREA["y"], VIEW_AREA["width"], VIEW_AREA["height"]]


@pytest.fixture
def platform(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    """daphne + a worker for demonstrations + a browser sandbox host; yields the web URL."""
    with site_with_host(
        tmp_path,
        host_name="e2e-miniwob-host",
        profiles={"browser": {"provider": "browser", "min_idle": 1, "max_total": 1}},
        slot_base=250,
        queues="interactive,sandboxes",
        ready=lambda host: Sandbox.objects.filter(state="idle", profile="browser").exists(),
    ) as (url, _):
        yield url


def click_at(page: Page, x: int, y: int) -> None:
    px, py = screen_point(page, x, y)
    page.mouse.click(px, py)


def test_a_miniwob_task_fills_the_live_view_and_clicks_keep_screen_pixels(
    platform: str, browser: Browser, personas: Personas
) -> None:
    doc = task_doc("click-test", oracle=True)
    task = task_create(slug=doc["id"], title=doc["title"], instruction=doc["instruction"], platform="browser",
                       env_profile="browser", spec=doc)  # fmt: skip
    Task.objects.filter(pk=task.pk).update(is_published=True)
    page, episode = start_live(browser, platform, personas.annotator, task)

    # Zoomed to the task: its area fills most of the box, several times larger than the whole screen's.
    zoomed = page.evaluate(COVERAGE)
    assert zoomed["covered"] > 0.6 and zoomed["zoom"] > 2, zoomed
    expect(page.get_by_test_id("zoom").locator("[aria-pressed=true]")).to_have_text("task area")
    click_at(page, 150, 200)  # the task's lower right corner: blank, so the episode goes on
    expect(page.get_by_test_id("steps").locator("li")).to_have_count(1, timeout=20_000)

    # The whole screen: the area shrinks back; the same kind of click is recorded in the same pixels.
    page.get_by_test_id("zoom").get_by_role("button", name="whole screen").click()
    whole = page.evaluate(COVERAGE)
    assert whole["zoom"] == 1 and whole["covered"] < 0.15, whole
    click_at(page, 900, 500)
    expect(page.get_by_test_id("steps").locator("li")).to_have_count(2, timeout=20_000)
    steps = list(Step.objects.filter(episode=episode).order_by("index"))
    assert [(s.action["type"], s.action["x"], s.action["y"]) for s in steps] == [
        ("click", 150, 200),
        ("click", 900, 500),
    ]
    assert all((s.screen_width, s.screen_height) == (1280, 720) for s in steps)


def test_a_person_plays_a_game_through_the_live_view_and_it_is_scored_and_replayed(
    platform: str, browser: Browser, personas: Personas
) -> None:
    """A game of the games suite demonstrated by hand: the maze walked with the arrow keys through the
    live view (each press a recorded step; game time per input, a clock the person can also run in real
    time or at half speed), scored 1 by the game's own score, and replayed step by step."""
    suite_load(name="games")
    task = Task.objects.get(slug="games/maze")
    Task.objects.filter(pk=task.pk).update(is_published=True)
    page, episode = start_live(browser, platform, personas.annotator, task)

    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        env = demo_env(episode=episode)
        tick = lambda: env.call("game_state")["tick"]  # noqa: E731 (the game's own clock, in ticks)
        clock = page.get_by_test_id("game-clock")
        clock.select_option("half")
        expect(page.get_by_test_id("notice")).to_have_text("Game time: half speed")
        before = tick()
        page.wait_for_timeout(1500)
        ran = tick() - before
        assert 2 <= ran <= 12, f"half speed ran {ran} ticks of 100 ms in 1.5 s"  # ~7
        clock.select_option("step")  # the maze waits for the person: time per input
        expect(page.get_by_test_id("notice")).to_have_text("Game time: per input")
        before = tick()
        page.wait_for_timeout(1000)
        assert tick() == before, "game time ran between inputs"
        view = env.call("game_state")["view"]  # what the person sees on the screen
        keys = [maze.STEPS[side][2] for side in maze.way_out(view["open"], view["player"], view["exit"])]
        click_at(page, 1200, 700)  # the keys go where the person clicked: the screen, off the maze
        for key in keys:
            page.keyboard.press(key)
            page.wait_for_timeout(60)
        assert wait_for(lambda: env.call("game_state")["over"], timeout=60), env.call("game_state")
    expect(page.get_by_test_id("steps").locator("li")).to_have_count(1 + len(keys), timeout=30_000)
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("reward")).to_have_text("Reward: 1", timeout=30_000)
    episode.refresh_from_db()
    assert episode.status == "finished" and episode.reward == 1.0
    steps = list(Step.objects.filter(episode=episode).order_by("index"))
    kinds = [s.action["type"] for s in steps]
    assert kinds == ["click"] + ["press"] * len(keys), kinds
    assert all(s.actor == "human" and s.screenshot for s in steps)

    page.goto(f"/episodes/{episode.pk}/")
    expect(page.get_by_test_id("replay-index")).to_have_text("0")
    page.keyboard.press("End")
    expect(page.get_by_test_id("final-info")).to_contain_text("reward 1")
