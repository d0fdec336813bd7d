"""The replay page: step metadata as JSON once, one big image, thumbnails behind the screenshot's checks."""

from __future__ import annotations

import io
import json
import re

import pytest
from django.core.files.storage import default_storage
from django.urls import reverse
from PIL import Image

from tests.conftest import Personas
from tests.factories import make_episode, make_task
from tests.webapp.pages.conftest import ClientFor
from webapp.episodes.models import Episode
from webapp.episodes.responses import thumbnail_name
from webapp.episodes.services import episode_create, episode_finish, episode_start, step_record

pytestmark = pytest.mark.django_db


def png(width: int, height: int, colour: tuple[int, int, int] = (200, 30, 30)) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (width, height), colour).save(out, format="PNG")
    return out.getvalue()


def replay_data(body: str) -> dict:  # type: ignore[type-arg]
    found = re.search(r'<script id="replay-data" type="application/json">(.*?)</script>', body, re.S)
    assert found, "no replay data on the page"
    return json.loads(found.group(1))


def detail(episode: Episode, **params: str) -> str:
    url = reverse("episodes:episode_detail", args=[episode.pk])
    return url + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")


def thumb(episode: Episode, index: int) -> str:
    return reverse("episodes:step_thumbnail", args=[episode.pk, index])


@pytest.fixture
def demo(personas: Personas) -> Episode:
    """Alice's demonstration: a click, a proposal the annotator changed, a drag, then finished."""
    episode = episode_create(task=make_task(), source="mixed", annotator=personas.annotator)
    episode_start(episode=episode)
    shot = png(640, 360)
    step_record(
        episode=episode,
        actor="human",
        action={"type": "click", "x": 100, "y": 50},
        action_text="click(start_box='(100,50)')",
        thought="open the menu",
        screenshot_png=shot,
        screen_size=(640, 360),
        latency_ms=1200,
    )
    step_record(
        episode=episode,
        actor="human",
        action={"type": "type", "content": "hello"},
        action_text="type(content='hello')",
        screenshot_png=shot,
        screen_size=(640, 360),
        proposed_action={"type": "click", "x": 5, "y": 5},
        proposed_action_text="click(start_box='(5,5)')",
        proposed_thought="click the corner",
    )
    step_record(
        episode=episode,
        actor="agent",
        action={"type": "drag", "x1": 1, "y1": 2, "x2": 300, "y2": 200},
        action_text="drag(start_box='(1,2)', end_box='(300,200)')",
        screenshot_png=shot,
        screen_size=(640, 360),
    )
    step_record(
        episode=episode,
        actor="agent",
        action={"type": "finished", "content": "done"},
        action_text="finished(content='done')",
        screenshot_png=png(640, 360, (0, 0, 0)),
        screen_size=(640, 360),
    )
    episode_finish(
        episode=episode, reward=1.0, check_details=[{"check": "title", "metric": "exact", "score": 1.0}]
    )
    episode.refresh_from_db()
    return episode  # fmt: skip


def test_replay_page_renders_metadata_once_and_one_big_image(demo: Episode, client_for: ClientFor) -> None:
    body = client_for("annotator").get(detail(demo)).content.decode()
    data = replay_data(body)
    assert data["episode"] == demo.pk
    steps = data["steps"]
    assert [s["index"] for s in steps] == [0, 1, 2, 3]
    assert [s["action"]["type"] for s in steps] == ["click", "type", "drag", "finished"]
    assert steps[0]["latency_ms"] == 1200 and steps[0]["since_previous_ms"] is None
    assert steps[1]["since_previous_ms"] is not None and steps[1]["since_previous_ms"] >= 0
    assert steps[1]["proposed_action"] == {"type": "click", "x": 5, "y": 5}
    assert steps[1]["proposed_thought"] == "click the corner"
    assert (steps[2]["width"], steps[2]["height"], steps[2]["actor"]) == (640, 360, "agent")
    assert steps[3]["thumbnail"] == thumb(demo, 3)
    # The timeline links every step and loads thumbnails lazily; full screenshots: the shown one and the next.
    assert body.count('data-testid="step"') == 4
    assert body.count('loading="lazy"') == 4
    assert len(set(re.findall(r'src="(/episodes/\d+/steps/\d+/screenshot\.png)"', body))) == 2
    assert 'alt="Screen before step 0"' in body
    assert 'data-testid="checks"' in body
    assert "js/replay" in body


def test_step_parameter_picks_the_first_step_shown(demo: Episode, client_for: ClientFor) -> None:
    body = client_for("annotator").get(detail(demo, step="2")).content.decode()
    assert 'alt="Screen before step 2"' in body
    assert 'data-current="2"' in body
    body = client_for("annotator").get(detail(demo, step="99")).content.decode()
    assert 'data-current="3"' in body  # clamped to the last step


def test_a_long_episode_renders_no_more_full_images(personas: Personas, client_for: ClientFor) -> None:
    episode = make_episode(annotator=personas.annotator, steps=300, reward=1.0)
    body = client_for("annotator").get(detail(episode)).content.decode()
    assert len(replay_data(body)["steps"]) == 300
    assert body.count('data-testid="step"') == 300
    assert len(re.findall(r'src="[^"]*/screenshot\.png"', body)) == 2
    assert body.count('loading="lazy"') == 300


def test_running_episode_polls_with_the_timeline_out_of_band(
    personas: Personas, client_for: ClientFor
) -> None:
    episode = make_episode(annotator=personas.annotator, steps=2, finish=False)
    client = client_for("annotator")
    body = client.get(detail(episode)).content.decode()
    assert 'hx-trigger="every 2s"' in body and "data-replay-follow" in body
    fragment = client.get(detail(episode), headers={"HX-Request": "true"})
    assert fragment.status_code == 200
    text = fragment.content.decode()
    assert 'id="live"' in text and 'hx-swap-oob="true"' in text
    assert len(replay_data(text)["steps"]) == 2
    episode_finish(episode=episode, reward=0.0)
    assert client.get(detail(episode), headers={"HX-Request": "true"}).status_code == 286


def test_thumbnail_is_a_small_jpeg_cached_by_content_name(demo: Episode, client_for: ClientFor) -> None:
    step = demo.steps.get(index=0)
    name = thumbnail_name(step.screenshot.name)
    assert name.startswith("thumbs/") and name.endswith(".jpg")
    default_storage.delete(name)

    response = client_for("annotator").get(thumb(demo, 0))
    assert response.status_code == 200
    assert response["Content-Type"] == "image/jpeg"
    assert response["Cache-Control"].startswith("private")
    data = b"".join(response.streaming_content)
    with Image.open(io.BytesIO(data)) as image:
        assert image.format == "JPEG"
        assert image.size == (240, 135)
        red, green, blue = image.convert("RGB").getpixel((120, 60))
        assert red > 150 and green < 80 and blue < 80
    assert default_storage.exists(name)
    # Steps 1 and 2 share step 0's screenshot bytes, so they share its cached thumbnail.
    assert thumbnail_name(demo.steps.get(index=2).screenshot.name) == name
    again = b"".join(client_for("admin").get(thumb(demo, 2)).streaming_content)
    assert again == data


def test_a_tiny_screenshot_is_not_enlarged(personas: Personas, client_for: ClientFor) -> None:
    episode = make_episode(annotator=personas.annotator, steps=1, reward=1.0)  # 1×1 PNG
    data = b"".join(client_for("annotator").get(thumb(episode, 0)).streaming_content)
    with Image.open(io.BytesIO(data)) as image:
        assert image.size == (1, 1)


@pytest.mark.parametrize(
    ("persona", "status"), [("outsider", 404), ("reviewer", 404), ("annotator", 200), ("researcher", 200)]
)
def test_thumbnail_has_the_screenshots_access_checks(
    demo: Episode, client_for: ClientFor, persona: str, status: int
) -> None:
    response = client_for(persona).get(thumb(demo, 0))
    assert response.status_code == status
    if status == 404:
        assert not response.streaming


def test_thumbnail_of_a_missing_step_is_not_found(demo: Episode, client_for: ClientFor) -> None:
    assert client_for("admin").get(thumb(demo, 9)).status_code == 404
    assert client_for(None).get(thumb(demo, 0)).status_code == 302


@pytest.mark.parametrize("persona", ["outsider", "reviewer"])
def test_outsiders_get_not_found_for_the_replay(demo: Episode, client_for: ClientFor, persona: str) -> None:
    response = client_for(persona).get(detail(demo))
    assert response.status_code == 404
    assert b"replay-data" not in response.content


# --- the final screen: the result after the last action --------------------------------------------


@pytest.fixture
def ended(personas: Personas) -> Episode:
    """Alice's two-step demonstration that ended on a green screen (its result)."""
    from webapp.episodes.services import Screen

    episode = make_episode(annotator=personas.annotator, steps=2, finish=False)
    result = Screen(png(320, 180, (0, 160, 0)), 320, 180)
    episode_finish(episode=episode, reward=1.0, final_screen=result)
    episode.refresh_from_db()
    return episode


def test_replay_shows_the_final_screen_as_its_last_frame(ended: Episode, client_for: ClientFor) -> None:
    final_url = reverse("episodes:final_screenshot", args=[ended.pk])
    body = client_for("annotator").get(detail(ended)).content.decode()
    steps = replay_data(body)["steps"]
    assert [s.get("final", False) for s in steps] == [False, False, True]
    last = steps[-1]
    assert (last["index"], last["actor"], last["action"]) == (2, "result", None)
    assert last["screenshot"] == final_url
    assert (last["width"], last["height"], last["reward"]) == (320, 180, 1.0)
    assert replay_data(body)["count"] == 2 and "data-replay-count>2<" in body  # the result is no step
    assert body.count('data-testid="step"') == 2 and body.count('data-testid="final-frame"') == 1
    shown = client_for("annotator").get(detail(ended, step="2")).content.decode()
    assert 'alt="The screen after the last step"' in shown and f'src="{final_url}"' in shown
    image = client_for("annotator").get(final_url)
    assert image.status_code == 200 and image["Content-Type"] == "image/png"
    with Image.open(io.BytesIO(b"".join(image.streaming_content))) as img:
        assert img.size == (320, 180) and img.getpixel((5, 5)) == (0, 160, 0)
    small = client_for("annotator").get(reverse("episodes:final_thumbnail", args=[ended.pk]))
    assert small.status_code == 200 and small["Content-Type"] == "image/jpeg"


def test_the_final_screen_is_served_only_to_who_may_see_the_episode(
    ended: Episode, client_for: ClientFor
) -> None:
    url = reverse("episodes:final_screenshot", args=[ended.pk])
    assert client_for("researcher").get(url).status_code == 200
    assert client_for("reviewer").get(url).status_code == 404  # not reviewing it
    assert client_for("outsider").get(url).status_code in (403, 404)
    assert client_for(None).get(url).status_code == 302
    api = client_for("researcher").get(f"/api/v1/episodes/{ended.pk}").json()
    assert api["final_screenshot_url"].endswith(f"/api/v1/episodes/{ended.pk}/final-screenshot")
    assert client_for("researcher").get(f"/api/v1/episodes/{ended.pk}/final-screenshot").status_code == 200
    assert client_for("reviewer").get(f"/api/v1/episodes/{ended.pk}/final-screenshot").status_code == 404


def test_the_review_page_offers_no_labels_on_the_result(
    ended: Episode, personas: Personas, client_for: ClientFor
) -> None:
    from webapp.reviews.services import review_assign

    review = review_assign(episode=ended, reviewer=personas.reviewer, assigned_by=personas.admin)
    url = reverse("reviews:review", args=[review.pk]) + "?step=2"
    body = client_for("reviewer").get(url).content.decode()
    assert re.search(r'data-review-final data-testid="review-final">', body)  # shown, not hidden
    assert re.search(r"<div data-review-step-tools hidden>", body)
    assert replay_data(body)["steps"][-1]["final"] is True


def test_a_tool_call_replays_with_its_arguments_and_result(personas: Personas, client_for: ClientFor) -> None:
    episode = episode_create(task=make_task(), source="agent")
    episode_start(episode=episode)
    content = "SKU-7 costs 12.50\n" + "x" * 5000
    step_record(
        episode=episode,
        actor="agent",
        action={"type": "mcp_call", "server": "records", "tool": "lookup", "arguments": {"key": "SKU-7"}},
        action_text="mcp_call(server='records', tool='lookup', arguments='{\"key\": \"SKU-7\"}')",
        screenshot_png=png(64, 36),
        screen_size=(64, 36),
        info={"result": {"server": "records", "tool": "lookup", "content": content, "is_error": False}},
    )
    step_record(
        episode=episode, actor="agent", action={"type": "click", "x": 1, "y": 2}, screenshot_png=png(64, 36),
        screen_size=(64, 36),
    )  # fmt: skip
    response = client_for("researcher").get(detail(episode))
    steps = replay_data(response.content.decode())["steps"]
    tool, click = steps[0], steps[1]
    assert tool["action"]["arguments"] == {"key": "SKU-7"}
    assert tool["result"]["content"].startswith("SKU-7 costs 12.50\nxxx")
    assert tool["result"]["content"].endswith("(1018 more characters)")  # capped for the page
    assert tool["result"]["is_error"] is False and click["result"] is None
