"""Replay and review in a real Chromium: keyboard navigation, labels, first error, a verdict."""

from __future__ import annotations

import io
import re

import pytest
from PIL import Image
from playwright.sync_api import Page, expect

from tests.conftest import Personas
from tests.e2e.conftest import OpenAs
from tests.factories import PNG_1X1, make_episode, make_task
from webapp.episodes.models import Episode
from webapp.episodes.services import episode_create, episode_finish, episode_start, step_record
from webapp.reviews.models import Review, StepLabel
from webapp.reviews.services import review_assign

pytestmark = pytest.mark.slow

COLOURS = [(220, 40, 40), (40, 160, 60), (40, 80, 220), (240, 200, 40)]
ACTIONS = [
    ({"type": "click", "x": 40, "y": 30}, "click(start_box='(40,30)')"),
    ({"type": "type", "content": "hello"}, "type(content='hello')"),
    (
        {"type": "drag", "x1": 10, "y1": 10, "x2": 200, "y2": 150},
        "drag(start_box='(10,10)', end_box='(200,150)')",
    ),
    ({"type": "hotkey", "keys": ["ctrl", "s"]}, "hotkey(key='ctrl s')"),
]


def png(colour: tuple[int, int, int]) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (320, 200), colour).save(out, format="PNG")
    return out.getvalue()


def demonstration(annotator: object) -> Episode:
    """A finished four-step demonstration with real screenshots, one colour per step."""
    episode = episode_create(task=make_task(platform="desktop"), source="human", annotator=annotator)
    episode_start(episode=episode)
    for (action, text), colour in zip(ACTIONS, COLOURS, strict=True):
        step_record(
            episode=episode,
            actor="human",
            action=action,
            action_text=text,
            thought=f"now {action['type']}",
            screenshot_png=png(colour),
            screen_size=(320, 200),
        )
    episode_finish(episode=episode, reward=1.0)
    episode.refresh_from_db()
    return episode


def shown_index(page: Page) -> str:
    return page.get_by_test_id("replay-index").inner_text()


def centre_colour(page: Page) -> list[int]:
    """The RGB at the centre of the big screenshot, read back from the decoded image."""
    return page.evaluate(
        """() => new Promise((resolve) => {
             const img = document.querySelector('[data-replay-img]');
             const read = () => { const c = document.createElement('canvas'); c.width = img.naturalWidth;
               c.height = img.naturalHeight; const g = c.getContext('2d'); g.drawImage(img, 0, 0);
               resolve(Array.from(g.getImageData(c.width / 2, c.height / 2, 1, 1).data.slice(0, 3))); };
             if (img.complete && img.naturalWidth) read(); else img.onload = read; })"""
    )


def test_reviewer_replays_labels_and_accepts(personas: Personas, open_as: OpenAs) -> None:
    episode = demonstration(personas.annotator)
    review = review_assign(episode=episode, reviewer=personas.reviewer, assigned_by=personas.admin)
    page = open_as("reviewer")
    page.goto("/reviews/")
    page.get_by_test_id("open-review").click()
    expect(page.get_by_test_id("review-state")).to_have_text("In Progress")
    expect(page.get_by_test_id("replay-index")).to_have_text("0")
    expect(page.locator('[data-replay-overlay] [data-action="click"] circle').first).to_be_attached()
    assert centre_colour(page) == list(COLOURS[0])

    for key, expected in [
        ("ArrowRight", "1"),
        ("j", "2"),
        ("k", "1"),
        ("End", "3"),
        ("Home", "0"),
        ("ArrowRight", "1"),
    ]:
        page.keyboard.press(key)
        expect(page.get_by_test_id("replay-index")).to_have_text(expected)
    expect(page.get_by_test_id("step-thought")).to_have_text("now type")
    expect(page.locator('[data-replay-overlay] [data-action="type"]')).to_contain_text("hello")
    assert centre_colour(page) == list(COLOURS[1])
    expect(page.locator('[data-replay-timeline] > li[aria-current="step"]')).to_have_attribute(
        "data-pos", "1"
    )

    page.get_by_label("Note").fill("typed into the wrong field")
    page.get_by_test_id("label-wrong").click()
    expect(page.get_by_test_id("labels-summary")).to_contain_text("1 step labelled")
    expect(page.get_by_test_id("label-wrong")).to_have_attribute("aria-pressed", "true")
    page.get_by_test_id("set-first-error").click()
    expect(page.get_by_test_id("first-error")).to_have_text("step 1")
    marked = page.locator('[data-replay-timeline] > li[data-pos="1"]')
    expect(marked).to_have_class(re.compile(r"\blabel-wrong\b"))
    expect(marked).to_have_class(re.compile(r"\bfirst-error\b"))

    # A correction that does not parse is refused with a clear error, and what was typed stays.
    page.get_by_text("Edit thought or action").click()
    page.get_by_test_id("action-text").fill("clik(start_box='(1,1)')")
    page.get_by_test_id("save-correction").click()
    expect(page.get_by_test_id("review-error")).to_contain_text("not a valid action")
    expect(page.get_by_test_id("action-text")).to_have_value("clik(start_box='(1,1)')")

    page.get_by_test_id("quality-select").select_option("4")
    page.get_by_test_id("accept").click()
    expect(page.get_by_test_id("verdict-state")).to_have_text("Accepted")
    expect(page.get_by_test_id("history-row")).to_have_count(3)

    review.refresh_from_db()
    assert (review.state, review.quality, review.first_error_step) == (Review.State.ACCEPTED, 4, 1)
    assert list(
        review.events.order_by("at", "pk").values_list("from_state", "to_state", "actor__username")
    ) == [
        ("", "assigned", "dave"),
        ("assigned", "in_progress", "bob"),
        ("in_progress", "accepted", "bob"),
    ]
    label = StepLabel.objects.get(review=review)
    assert (label.step.index, label.label, label.note) == (1, "wrong", "typed into the wrong field")
    assert label.corrected_action_text == ""


def test_outsider_cannot_open_the_replay(personas: Personas, open_as: OpenAs) -> None:
    episode = demonstration(personas.annotator)
    review = review_assign(episode=episode, reviewer=personas.reviewer, assigned_by=personas.admin)
    page = open_as("outsider")
    response = page.goto(f"/episodes/{episode.pk}/")
    assert response is not None and response.status == 404
    expect(page.get_by_role("heading", level=1)).to_have_text("Not found")
    assert page.request.get(f"/episodes/{episode.pk}/steps/0/thumb.jpg").status == 404
    assert page.request.get(f"/episodes/{episode.pk}/steps/0/screenshot.png").status == 404
    response = page.goto(f"/reviews/{review.pk}/")
    assert response is not None and response.status == 403
    assert (
        page.request.post(f"/reviews/{review.pk}/decide/", form={"verdict": "accept", "quality": "5"}).status
        == 403
    )
    review.refresh_from_db()
    assert review.state == Review.State.ASSIGNED


def test_a_300_step_replay_loads_and_steps_with_the_keyboard(personas: Personas, open_as: OpenAs) -> None:
    episode = make_episode(steps=300, reward=0.0)  # an agent rollout, 1×1 screenshots
    page = open_as("researcher")
    page.goto(f"/episodes/{episode.pk}/")
    expect(page.get_by_test_id("step")).to_have_count(300)
    expect(page.get_by_test_id("replay-index")).to_have_text("0")
    for expected in ("1", "2", "3"):
        page.keyboard.press("ArrowRight")
        expect(page.get_by_test_id("replay-index")).to_have_text(expected)
    expect(page.get_by_test_id("step-action")).to_have_text("click(start_box='(30,5)')")
    page.keyboard.press("End")
    expect(page.get_by_test_id("replay-index")).to_have_text("299")
    page.keyboard.press("ArrowLeft")
    expect(page.get_by_test_id("replay-index")).to_have_text("298")
    # Only the shown screenshots (and the one ahead) were fetched, never all 300.
    fetched = page.evaluate(
        "performance.getEntriesByType('resource').filter(e => e.name.endsWith('/screenshot.png')).length"
    )
    assert 1 <= fetched <= 12, fetched
    assert "step=298" in page.url


def test_a_running_episode_keeps_updating(personas: Personas, open_as: OpenAs) -> None:
    episode = make_episode(annotator=personas.annotator, steps=1, finish=False)
    page = open_as("annotator")
    page.goto(f"/episodes/{episode.pk}/")
    expect(page.get_by_test_id("replay-index")).to_have_text("0")
    step_record(
        episode=episode,
        actor="human",
        action={"type": "press", "key": "enter"},
        action_text="press(key='enter')",
        screenshot_png=PNG_1X1,
        screen_size=(1, 1),
    )
    # The page polls; following new steps, it moves to the new one.
    expect(page.get_by_test_id("step")).to_have_count(2)
    expect(page.get_by_test_id("replay-index")).to_have_text("1")
    expect(page.get_by_test_id("step-action")).to_have_text("press(key='enter')")
    episode_finish(episode=episode, reward=1.0)
    expect(page.get_by_test_id("episode-status")).to_have_text("finished")


def test_the_result_screen_is_the_replays_last_frame(personas: Personas, open_as: OpenAs) -> None:
    """The screen after the last action (once a 404) shows last, in replay and review; it is no step."""
    from webapp.episodes.services import Screen

    episode = episode_create(task=make_task(platform="desktop"), source="human", annotator=personas.annotator)
    episode_start(episode=episode)
    for (action, text), colour in zip(ACTIONS[:2], COLOURS, strict=False):
        step_record(episode=episode, actor="human", action=action, action_text=text,
                    screenshot_png=png(colour), screen_size=(320, 200))  # fmt: skip
    result = (120, 40, 160)
    episode_finish(episode=episode, reward=1.0, final_screen=Screen(png(result), 320, 200))
    review = review_assign(episode=episode, reviewer=personas.reviewer, assigned_by=personas.admin)
    page = open_as("reviewer")
    page.goto(f"/reviews/{review.pk}/")
    expect(page.locator("[data-replay-count]")).to_have_text("2")
    expect(page.get_by_test_id("final-frame")).to_have_count(1)
    page.keyboard.press("End")
    expect(page.get_by_test_id("replay-index")).to_have_text("result")
    expect(page.get_by_test_id("final-info")).to_contain_text("The screen after the last step")
    assert centre_colour(page) == list(result)
    expect(page.get_by_test_id("review-final")).to_be_visible()
    expect(page.get_by_test_id("label-wrong")).to_be_hidden()
    page.keyboard.press("ArrowLeft")
    expect(page.get_by_test_id("replay-index")).to_have_text("1")
    expect(page.get_by_test_id("label-wrong")).to_be_visible()
    expect(page.get_by_test_id("review-final")).to_be_hidden()
    assert centre_colour(page) == list(COLOURS[1])


def test_reviewer_labels_with_keys_and_enlarges_the_screenshot_with_its_overlay(
    personas: Personas, open_as: OpenAs
) -> None:
    episode = demonstration(personas.annotator)
    review = review_assign(episode=episode, reviewer=personas.reviewer, assigned_by=personas.admin)
    page = open_as("reviewer")  # 1280 × 720
    page.goto(f"/reviews/{review.pk}/")
    expect(page.get_by_test_id("replay-index")).to_have_text("0")
    expect(page.get_by_test_id("review-keys")).to_contain_text("1 correct")
    shot = page.locator("[data-replay-img]")
    small = shot.bounding_box()
    assert small is not None and small["width"] >= 800, small  # the screenshot takes the page's width

    # Keys label the shown step; a digit typed into the note is text, not a label.
    page.keyboard.press("1")
    expect(page.get_by_test_id("labels-summary")).to_contain_text("1 step labelled")
    expect(page.get_by_test_id("label-correct")).to_have_attribute("aria-pressed", "true")
    page.keyboard.press("ArrowRight")
    expect(page.get_by_test_id("replay-index")).to_have_text("1")
    page.get_by_label("Note").fill("3 times")
    page.get_by_label("Note").press("3")
    expect(page.get_by_label("Note")).to_have_value("3 times3")
    page.get_by_label("Note").blur()
    page.keyboard.press("3")
    expect(page.get_by_test_id("labels-summary")).to_contain_text("2 steps labelled")
    page.keyboard.press("f")
    expect(page.get_by_test_id("first-error")).to_have_text("step 1")
    page.keyboard.press("2")
    expect(page.get_by_test_id("label-redundant")).to_have_attribute("aria-pressed", "true")
    page.keyboard.press("0")
    expect(page.get_by_test_id("labels-summary")).to_contain_text("1 step labelled")

    # Saving a corrected thought of an unlabelled step leaves it unlabelled.
    page.keyboard.press("ArrowRight")
    expect(page.get_by_test_id("replay-index")).to_have_text("2")
    page.get_by_text("Edit thought or action").click()
    page.locator("[data-review-thought]").fill("I drag the file onto the folder")
    page.get_by_test_id("save-correction").click()
    expect(page.get_by_test_id("labels-summary")).to_contain_text("1 step labelled · 1 corrected")
    expect(page.locator('[data-testid="label-row"][data-step="2"]')).to_contain_text("not labelled")

    # Click to enlarge: fit to the window, then the image's own pixels; the overlay stays on its mark.
    page.keyboard.press("Home")
    expect(page.get_by_test_id("replay-index")).to_have_text("0")
    shot.click()
    expect(page.get_by_test_id("replay-shot")).to_have_attribute("data-zoom", "fit")
    big = shot.bounding_box()
    assert big is not None and big["width"] > small["width"] * 1.1, (small, big)

    def mark_at() -> tuple[float, float]:
        dot = page.locator('[data-replay-overlay] [data-action="click"] .ov-dot').bounding_box()
        box = shot.bounding_box()
        assert dot is not None and box is not None
        scale = box["width"] / 320  # the step's screenshot is 320 × 200, the click at (40, 30)
        centre_x, centre_y = dot["x"] + dot["width"] / 2, dot["y"] + dot["height"] / 2
        return (centre_x - box["x"]) / scale, (centre_y - box["y"]) / scale

    x, y = mark_at()
    assert abs(x - 40) < 1.5 and abs(y - 30) < 1.5, (x, y)
    page.keyboard.press("z")
    expect(page.get_by_test_id("replay-shot")).to_have_attribute("data-zoom", "actual")
    actual = shot.bounding_box()
    assert actual is not None and abs(actual["width"] - 320) < 1, actual
    x, y = mark_at()
    assert abs(x - 40) < 1.5 and abs(y - 30) < 1.5, (x, y)
    page.keyboard.press("ArrowRight")  # steps go on while enlarged
    expect(page.get_by_test_id("replay-index")).to_have_text("1")
    page.keyboard.press("Escape")
    expect(page.get_by_test_id("replay-shot")).to_have_attribute("data-zoom", "")

    labels = {label.step.index: label for label in StepLabel.objects.filter(review=review)}
    assert (labels[0].label, labels[2].label, labels[2].corrected_thought) == (
        "correct", "", "I drag the file onto the folder"
    )  # fmt: skip
    assert 1 not in labels  # cleared with 0
    review.refresh_from_db()
    assert review.first_error_step == 1
