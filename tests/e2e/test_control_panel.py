"""The live session's control buttons in a real Chromium: a button is visible only to who may press it,
only while it means something, and never on a finished episode (the sandbox rows are stand-ins: the
buttons follow the session socket, not the screen)."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Personas
from tests.e2e.conftest import OpenAs
from tests.webapp.annotation.test_control_panel import live_on_a_sandbox
from webapp.episodes.models import Episode
from webapp.episodes.services import episode_finish
from webapp.sandboxes.control import control_assign

pytestmark = pytest.mark.slow


def session(open_as: OpenAs, persona: str, episode: Episode) -> Page:
    page = open_as(persona)
    page.goto(f"/annotate/episodes/{episode.pk}/")
    expect(page.get_by_test_id("session")).to_have_attribute("data-ready", "1")  # the socket said hello
    return page


def visible(page: Page) -> set[str]:
    buttons = page.get_by_test_id("control-panel").get_by_role("button")
    return {buttons.nth(i).inner_text() for i in range(buttons.count()) if buttons.nth(i).is_visible()}


def test_control_buttons_show_only_to_who_may_use_them_and_only_while_live(
    personas: Personas, open_as: OpenAs
) -> None:
    rollout = live_on_a_sandbox()
    control_assign(sandbox=rollout.sandbox, episode=rollout, holder="agent")
    demo = live_on_a_sandbox(annotator=personas.annotator)
    control_assign(sandbox=demo.sandbox, episode=demo, holder="human", user=personas.annotator)

    assert visible(session(open_as, "researcher", rollout)) == {"Take control"}
    assert visible(session(open_as, "admin", demo)) == {"Take control", "Force take"}
    annotator = session(open_as, "annotator", demo)
    assert visible(annotator) == {"Hand back"}
    expect(annotator.get_by_test_id("recorder")).to_be_visible()

    episode_finish(episode=demo, reward=0.0)
    expect(annotator.get_by_test_id("status")).to_have_text("finished")
    assert visible(annotator) == set()
    expect(annotator.get_by_test_id("recorder")).to_be_hidden()
    for persona in ("admin", "annotator"):
        page = session(open_as, persona, demo)
        assert page.get_by_test_id("control-panel").get_by_role("button").count() == 0
