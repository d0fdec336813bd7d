"""A whole demonstration in a real Chromium against the running platform.

daphne (with the host token), a Celery worker on the `interactive` queue (it prepares the sandbox), a
real desktop sandbox host heartbeating into daphne, and the browser: an annotator logs in, starts a
task, clicks and types in the live view, sees the recorded steps, submits and gets the checker's
reward; a reviewer replays and accepts; an outsider can open neither the session, its socket, the
live view's ticket nor the replay.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings
from playwright.sync_api import Browser, Page, expect

from tests.conftest import PASSWORD, Personas
from tests.e2e.platform import site_with_host
from tests.e2e.test_episodes import OPEN_SOCKET
from tests.procs import wait_for
from tests.sandbox_workers.hostproc import LIGHT_DESKTOP, TOKEN
from tests.webapp.annotation.conftest import note_reads, note_task
from webapp.annotation.services import assignment_create, demo_env
from webapp.catalog.models import Task
from webapp.catalog.services import suite_load
from webapp.episodes.models import Episode, Step
from webapp.reviews.models import Review, StepLabel
from webapp.reviews.services import review_assign
from webapp.sandboxes.models import Sandbox

# Every WebSocket a page opens is watched: each opening and close is logged (URL, close code, when) in
# window.__sockets, and the socket itself kept in window.__socketObjects for a test to drop. The page
# gets native sockets (the constructor returns one).
WATCH_SOCKETS = """
(() => {
  const Native = window.WebSocket;
  const log = window.__sockets = {opened: [], closed: []};
  const kept = window.__socketObjects = [];
  function Watched(...args) {
    const ws = new Native(...args);
    const url = String(args[0]).replace(/ticket=[^&]+/, "ticket=…");
    log.opened.push({url, at: Date.now()});
    kept.push(ws);
    ws.addEventListener("close", (e) => log.closed.push({url, code: e.code, at: Date.now()}));
    return ws;
  }
  Watched.prototype = Native.prototype;
  for (const k of ["CONNECTING", "OPEN", "CLOSING", "CLOSED"]) Watched[k] = Native[k];
  window.WebSocket = Watched;
})();
"""
SESSION_SOCKETS = "window.__socketObjects.filter((ws) => /\\/session\\/$/.test(ws.url))"

pytestmark = pytest.mark.slow


@pytest.fixture
def platform(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    """daphne + a sandboxes worker + a desktop host, all on the test database; yields the web URL."""
    with site_with_host(
        tmp_path,
        host_name="e2e-demo-host",
        profiles={"desktop": {**LIGHT_DESKTOP, "min_idle": 1, "max_total": 2}},
        slot_base=170,
        queues="interactive,sandboxes",
        env={"ROLLOUT_LEASE_WAIT_SECONDS": "60"},
        ready=lambda host: Sandbox.objects.filter(state="idle", profile="desktop").exists(),
    ) as (url, _):
        yield url


def login(browser: Browser, url: str, username: str) -> Page:
    context = browser.new_context(base_url=url, viewport={"width": 1500, "height": 1000})
    context.set_default_timeout(20_000)
    page = context.new_page()
    page.goto("/accounts/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_test_id("username")).to_have_text(username)
    return page


def screen_point(page: Page, x: int, y: int) -> tuple[float, float]:
    """Where sandbox pixel (x, y) is on the page, from the live view's own mapping."""
    point = page.evaluate(
        """([x, y]) => {
            const svg = document.querySelector('#screen svg');
            const r = svg.getBoundingClientRect();
            const vb = svg.viewBox.baseVal;
            return [r.left + (x + 0.5) * r.width / vb.width, r.top + (y + 0.5) * r.height / vb.height];
        }""",
        [x, y],
    )
    return float(point[0]), float(point[1])


def start_live(browser: Browser, platform: str, annotator: Any, task: Any) -> tuple[Page, Episode]:
    """The annotator logs in, starts `task` from the Annotate page and waits for its live view."""
    page = login(browser, platform, annotator.get_username())
    page.goto("/annotate/")
    form = page.get_by_test_id("start-form")
    form.get_by_label("Task").select_option(str(task.pk))
    form.get_by_role("button", name="Start").click()
    expect(page.get_by_test_id("recorder")).to_be_visible(timeout=90_000)
    live_state = "() => document.querySelector('[data-testid=session]').dataset.live"
    connected = wait_for(lambda: page.evaluate(live_state) == "connected", timeout=30)
    assert connected, f"no live view: {page.get_by_test_id('notice').inner_text()}"
    return page, Episode.objects.get(task=task, annotator=annotator)


def test_annotator_demonstrates_a_task_in_the_live_view_and_a_reviewer_accepts_it(
    platform: str, browser: Browser, personas: Personas
) -> None:
    task = note_task()
    page = login(browser, platform, personas.annotator.get_username())
    # The page's sockets kept where the test can drop one (Playwright's WebSocket routing breaks
    # noVNC's socket on the same page).
    page.add_init_script(WATCH_SOCKETS)
    page.get_by_role("link", name="Annotate").click()
    page.get_by_test_id("start-form").get_by_label("Task").select_option(str(task.pk))
    page.get_by_test_id("start-form").get_by_role("button", name="Start").click()

    # The worker leases and sets up the sandbox; the page switches to the live screen when it is ready.
    expect(page.get_by_test_id("recorder")).to_be_visible(timeout=90_000)
    expect(page.get_by_test_id("control")).to_have_text("control: you")
    episode = Episode.objects.get(task=task, annotator=personas.annotator)
    page.wait_for_function(
        "() => { const s = document.querySelector('#screen svg'); return s && s.viewBox.baseVal.width > 0; }"
    )
    live_state = "() => document.querySelector('[data-testid=session]').dataset.live"
    assert wait_for(lambda: page.evaluate(live_state) == "connected", timeout=30), (
        "the live view did not connect"
    )
    # The session's socket drops: the page pauses input and says so (input would go nowhere) until it
    # has reconnected by itself; then input is on again.
    session = "document.querySelector('[data-testid=session]')"
    page.wait_for_function(f"() => {session}.dataset.input === 'on'")
    page.evaluate(f"{SESSION_SOCKETS}.at(-1).close(4000, 'the test dropped it')")
    page.wait_for_function(
        f"""() => {session}.dataset.input === 'off'
                 && document.querySelector('[data-testid=notice]').textContent.startsWith('Reconnecting')""",
        polling="raf",
    )
    page.wait_for_function(f"() => {session}.dataset.input === 'on'", timeout=20_000)
    expect(page.get_by_test_id("notice")).not_to_contain_text("Reconnecting")
    assert page.evaluate(f"{SESSION_SOCKETS}.length") == 2

    # Think aloud, click into the terminal, type a command: two steps, recorded through the server.
    page.get_by_test_id("thought").fill("The terminal is open; I will write the note with echo.")
    page.wait_for_timeout(300)
    x, y = screen_point(page, 640, 360)
    page.mouse.click(x, y)
    page.keyboard.type("echo hello > note.txt")
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("steps").locator("li")).to_have_count(2, timeout=20_000)
    expect(page.get_by_test_id("steps").locator("li").nth(1)).to_contain_text("echo hello > note.txt")
    steps = list(Step.objects.filter(episode=episode).order_by("index"))
    assert [s.action["type"] for s in steps] == ["click", "type"]
    assert abs(steps[0].action["x"] - 640) <= 2 and abs(steps[0].action["y"] - 360) <= 2
    assert steps[0].thought == "The terminal is open; I will write the note with echo."
    assert steps[1].action["content"] == "echo hello > note.txt\n"
    assert all(s.screenshot and s.actor == "human" for s in steps)

    # Submit (once the shell has run the line, as a person sees): the checker's reward comes back.
    note_reads(episode, "hello")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("reward")).to_have_text("Reward: 1", timeout=30_000)
    episode.refresh_from_db()
    assert episode.status == "finished" and episode.reward == 1.0

    # The outcome survives a reload (it comes from the database): the reward, the checker's verdict,
    # the recorded steps; the next assigned task is one click away.
    following = assignment_create(task=task, annotator=personas.annotator, assigned_by=personas.admin)
    page.reload()
    expect(page.get_by_test_id("reward")).to_have_text("Reward: 1")
    expect(page.get_by_test_id("verdict")).to_have_text("solved")
    expect(page.get_by_test_id("checks")).to_contain_text("exact_match")
    expect(page.get_by_test_id("steps").locator("li")).to_have_count(2)
    expect(page.get_by_test_id("final-screen")).to_be_visible()
    expect(page.get_by_test_id("next-task")).to_have_text(f"Next task: {task.slug}")
    expect(page.locator('[data-testid="next"] input[name="assignment"]')).to_have_value(str(following.pk))

    check_outsider_and_review(browser, platform, personas, episode)


# Counts the WebRTC data channels a page opens (the session page opens none: its input goes through the
# session socket whatever shows the screen).
COUNT_CHANNELS = """() => {
  const native = RTCPeerConnection.prototype.createDataChannel;
  window.__dataChannels = 0;
  RTCPeerConnection.prototype.createDataChannel = function (...args) {
    window.__dataChannels += 1;
    return native.apply(this, args);
  };
}"""


def demonstrate(browser: Browser, platform: str, personas: Personas, *, transport: str = "") -> Episode:
    """The annotator's part: start the note task, click into the terminal, type, submit; reward 1.
    Over `transport` "webrtc" the picture must play over WebRTC (no fallback) and no data channel open:
    the input goes through the session socket, with the thought and the pause, as on any transport."""
    task = note_task()
    page = login(browser, platform, personas.annotator.get_username())
    page.get_by_role("link", name="Annotate").click()
    page.get_by_test_id("start-form").get_by_label("Task").select_option(str(task.pk))
    page.get_by_test_id("start-form").get_by_role("button", name="Start").click()
    expect(page.get_by_test_id("recorder")).to_be_visible(timeout=90_000)
    episode = Episode.objects.get(task=task, annotator=personas.annotator)
    if transport:
        page.add_init_script(f"({COUNT_CHANNELS})()")
        page.goto(f"/annotate/episodes/{episode.pk}/?transport={transport}")
        expect(page.get_by_test_id("recorder")).to_be_visible()
    live_state = "() => document.querySelector('[data-testid=session]').dataset.live"
    connected = wait_for(lambda: page.evaluate(live_state) == "connected", timeout=30)
    notice = page.get_by_test_id("notice").inner_text()
    assert connected, f"the live view did not connect: {page.evaluate(live_state)} {notice}"
    if transport:
        shown = page.evaluate("document.querySelector('#screen .live-box').dataset.transport")
        assert shown == transport, f"the live view fell back to {shown}"
    x, y = screen_point(page, 640, 360)
    page.mouse.click(x, y)
    page.keyboard.type("echo hello > note.txt")
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("steps").locator("li")).to_have_count(2, timeout=20_000)
    if transport == "webrtc":
        assert page.evaluate("window.__dataChannels") == 0, "the session page opened an input channel"
    note_reads(episode, "hello")
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("reward")).to_have_text("Reward: 1", timeout=30_000)
    episode.refresh_from_db()
    return episode


def test_over_webrtc_the_session_page_sends_its_input_through_the_session_socket(
    platform: str, browser: Browser, personas: Personas
) -> None:
    episode = demonstrate(browser, platform, personas, transport="webrtc")
    steps = list(Step.objects.filter(episode=episode).order_by("index"))
    assert [s.action["type"] for s in steps] == ["click", "type"]
    assert steps[1].action["content"] == "echo hello > note.txt\n"
    assert episode.status == "finished" and episode.reward == 1.0


def check_outsider_and_review(browser: Browser, platform: str, personas: Personas, episode: Episode) -> None:
    """A reviewer replays and accepts the demonstration; an outsider can open none of it."""
    # A reviewer replays the recorded trajectory, labels the click correct and accepts it.
    review = review_assign(episode=episode, reviewer=personas.reviewer, assigned_by=personas.admin)
    reviewer = login(browser, platform, personas.reviewer.get_username())
    reviewer.goto("/reviews/")
    reviewer.get_by_test_id("open-review").click()
    expect(reviewer.get_by_test_id("review-state")).to_have_text("In Progress")
    expect(reviewer.get_by_test_id("replay-index")).to_have_text("0")
    expect(reviewer.locator('[data-replay-overlay] [data-action="click"] circle').first).to_be_attached()
    reviewer.get_by_test_id("label-correct").click()
    expect(reviewer.get_by_test_id("labels-summary")).to_contain_text("1 step labelled")
    reviewer.keyboard.press("ArrowRight")
    expect(reviewer.get_by_test_id("replay-index")).to_have_text("1")
    expect(reviewer.locator('[data-replay-overlay] [data-action="type"]')).to_contain_text("echo hello")
    reviewer.get_by_test_id("quality-select").select_option("5")
    reviewer.get_by_test_id("accept").click()
    expect(reviewer.get_by_test_id("verdict-state")).to_have_text("Accepted")
    review.refresh_from_db()
    assert (review.state, review.quality) == (Review.State.ACCEPTED, 5)
    assert StepLabel.objects.get(review=review).step.index == 0

    # The outsider: no session page, no session socket, no ticket for the sandbox, no replay.
    outsider = login(browser, platform, personas.outsider.get_username())
    assert outsider.goto(f"/annotate/episodes/{episode.pk}/").status == 404
    assert outsider.goto(f"/episodes/{episode.pk}/").status == 404
    state = outsider.evaluate(OPEN_SOCKET, [f"/ws/episodes/{episode.pk}/session/", True])
    assert state["closeCode"] == 4403 and not state["messages"]
    status = outsider.evaluate(
        """async (url) => (await fetch(url, {method: 'POST',
            headers: {'X-CSRFToken': document.cookie.match(/csrftoken=([^;]+)/)?.[1] || ''},
            body: new URLSearchParams({mode: 'view', transport: 'vnc'})})).status""",
        f"/sandboxes/{episode.sandbox_id}/ticket/",
    )
    assert status in (403, 404)


def window_centre(env: Any, name: str) -> tuple[int, int]:
    """Where a person sees the window titled `name` (its centre, in screen pixels)."""
    command = f"xdotool search --onlyvisible --name {name!r} getwindowgeometry --shell | head -5"
    shown = env.exec(command).stdout
    geometry = dict(line.split("=", 1) for line in shown.split() if "=" in line)
    assert {"X", "Y", "WIDTH", "HEIGHT"} <= set(geometry), shown
    return int(geometry["X"]) + int(geometry["WIDTH"]) // 2, int(geometry["Y"]) + int(geometry["HEIGHT"]) // 2


def test_an_annotator_calls_a_sandbox_tool_beside_the_gui_and_the_replay_shows_its_result(
    platform: str, browser: Browser, personas: Personas
) -> None:
    """A GUI-SDK hybrid task by hand: the records tool (an MCP server inside the sandbox) from the Tools
    panel gives a price, the person types it into the quote in the editor and saves; reward 1, and the
    replay shows the tool call with its arguments and result."""
    suite_load(name="desktop")
    task = Task.objects.get(slug="desktop/hybrid/mcp-price-into-quote")
    Task.objects.filter(pk=task.pk).update(is_published=True)
    page, episode = start_live(browser, platform, personas.annotator, task)
    sku = episode.prepared["params"]["sku"]

    # The Tools panel lists what the sandbox's servers say they offer; the lookup is a recorded step.
    tools = page.get_by_test_id("tools")
    # The panel fills once the sandbox's servers have started (each imports the SDK: seconds, more on a
    # loaded machine).
    expect(tools.get_by_test_id("tool-name")).to_be_visible(timeout=60_000)
    tools.get_by_test_id("tool-name").select_option(label="records.lookup")
    expect(tools.get_by_test_id("tool-description")).to_contain_text("record stored under")
    tools.get_by_test_id("tool-arguments").fill(json.dumps({"key": sku}))
    tools.get_by_role("button", name="Call").click()
    expect(tools.get_by_test_id("tool-result")).to_contain_text("unit_price", timeout=20_000)
    found = re.search(r'"unit_price":\s*(\d+)', tools.get_by_test_id("tool-result").inner_text())
    assert found, tools.get_by_test_id("tool-result").inner_text()
    price = found.group(1)
    expect(page.get_by_test_id("steps").locator("li")).to_have_count(1)

    # The GUI part: into the editor, the blank on line 3 replaced by the price, saved.
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        env = demo_env(episode=episode)
        x, y = window_centre(env, "quote.txt")
        page.mouse.click(*screen_point(page, x, y))
        for key in ("Control+Home", "ArrowDown", "ArrowDown", "End", "Backspace", "Backspace", "Backspace"):
            page.keyboard.press(key)
        page.keyboard.type(price)
        page.keyboard.press("Control+s")
        line = f"Unit price: {price}\n"
        saved = wait_for(lambda: line in env.exec("cat quote.txt").stdout, 30, interval=0.3)
        assert saved, env.exec("cat quote.txt").stdout
    page.get_by_test_id("submit").click()
    expect(page.get_by_test_id("reward")).to_have_text("Reward: 1", timeout=30_000)
    episode.refresh_from_db()
    assert episode.status == "finished" and episode.reward == 1.0
    first = Step.objects.filter(episode=episode).order_by("index").first()
    assert first is not None and first.action == {
        "type": "mcp_call", "server": "records", "tool": "lookup", "arguments": {"key": sku}
    }  # fmt: skip
    assert first.actor == "human" and price in first.info["result"]["content"]

    # The replay shows the call, its arguments and what it gave back.
    page.goto(f"/episodes/{episode.pk}/")
    expect(page.get_by_test_id("replay-index")).to_have_text("0")
    result = page.get_by_test_id("step-result")
    expect(result).to_contain_text("records.lookup")
    expect(result).to_contain_text(sku)
    expect(result.get_by_test_id("step-result-text")).to_contain_text(price)
