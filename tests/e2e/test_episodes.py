"""Episode pages in the browser: not-found for others' episodes, live steps over a WebSocket."""

from __future__ import annotations

from typing import Any

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Personas
from tests.e2e.conftest import OpenAs
from tests.factories import PNG_1X1, make_episode
from webapp.accounts.roles import Role
from webapp.accounts.services import user_create
from webapp.episodes.services import episode_finish, step_record

pytestmark = pytest.mark.slow

# Opens a WebSocket from the page and resolves once it is open or closed; every message is kept.
OPEN_SOCKET = """
([path, wait_close]) => new Promise((resolve) => {
  const log = window.socketLog = {opened: false, closeCode: null, messages: []};
  const ws = new WebSocket(location.origin.replace(/^http/, "ws") + path);
  ws.onmessage = (event) => log.messages.push(JSON.parse(event.data));
  ws.onopen = () => { log.opened = true; if (!wait_close) resolve({...log}); };
  ws.onclose = (event) => { log.closeCode = event.code; resolve({...log}); };
})
"""


def received(page: Page, event_type: str) -> dict[str, Any]:
    """The first message of `event_type` the page's socket received (waits for it)."""
    page.wait_for_function(f"window.socketLog.messages.some(m => m.type === '{event_type}')")
    messages = page.evaluate("window.socketLog.messages")
    return next(m for m in messages if m["type"] == event_type)


def test_annotator_gets_not_found_for_another_persons_episode(personas: Personas, open_as: OpenAs) -> None:
    colleague = user_create(username="frank", password="x", roles=[Role.ANNOTATOR])
    theirs = make_episode(annotator=colleague, steps=1, reward=1.0)
    own = make_episode(annotator=personas.annotator, steps=1, reward=1.0)
    page = open_as("annotator")

    response = page.goto(f"/episodes/{theirs.pk}/")
    assert response is not None and response.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
    assert page.request.get(f"/episodes/{theirs.pk}/steps/0/screenshot.png").status == 404

    response = page.goto(f"/episodes/{own.pk}/")
    assert response is not None and response.status == 200
    screenshot = page.get_by_role("img", name="Screen before step 0")
    expect(screenshot).to_be_visible()
    # The bytes reach the browser: the 1x1 PNG decodes.
    width = screenshot.evaluate(
        """img => img.complete && img.naturalWidth ? img.naturalWidth : new Promise((resolve) => {
             img.onload = () => resolve(img.naturalWidth); img.onerror = () => resolve(-1); })"""
    )
    assert width == 1


def test_websocket_streams_steps_as_they_are_recorded(personas: Personas, open_as: OpenAs) -> None:
    episode = make_episode(annotator=personas.annotator, finish=False)
    page = open_as("annotator")
    page.goto(f"/episodes/{episode.pk}/")
    state = page.evaluate(OPEN_SOCKET, [f"/ws/episodes/{episode.pk}/", False])
    assert state["opened"], state

    step_record(
        episode=episode,
        actor="human",
        action={"type": "click", "x": 3, "y": 4},
        action_text="click(start_box='(3,4)')",
        thought="press OK",
        screenshot_png=PNG_1X1,
        screen_size=(1, 1),
    )
    step = received(page, "step.created")
    assert step["episode"] == episode.pk
    assert step["index"] == 0
    assert step["action_text"] == "click(start_box='(3,4)')"
    assert step["has_screenshot"] is True

    episode_finish(episode=episode, reward=1.0)
    status = received(page, "episode.status")
    assert (status["episode"], status["status"], status["reward"]) == (episode.pk, "finished", 1.0)


# The reviewer has no review of this episode, so it is not theirs to watch either.
@pytest.mark.parametrize("persona", ["outsider", "reviewer", None])
def test_websocket_refuses_whoever_may_not_see_the_episode(
    persona: str | None, personas: Personas, open_as: OpenAs
) -> None:
    episode = make_episode(annotator=personas.annotator, finish=False)
    page = open_as(persona)
    console: list[str] = []
    page.on("console", lambda message: console.append(message.text))
    page.goto("/accounts/login/")
    state = page.evaluate(OPEN_SOCKET, [f"/ws/episodes/{episode.pk}/", True])
    assert state["messages"] == []
    # The browser is told why: 4401 "log in", 4403 "not yours" (the consumer accepts, then closes).
    assert state["closeCode"] == (4401 if persona is None else 4403), state
    assert not any("Unexpected response code" in line for line in console), console
