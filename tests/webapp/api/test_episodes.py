"""Episodes: who sees which, filters, and steps in index order with their screenshots."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import make_episode
from tests.webapp.api.helpers import send
from webapp.episodes.models import Step
from webapp.episodes.services import episode_create, episode_start, step_record

pytestmark = pytest.mark.django_db


def ids(response) -> set[int]:
    assert response.status_code == 200, response.content
    return {e["id"] for e in response.json()["items"]}


# --- visibility -----------------------------------------------------------------------------------


def test_annotator_lists_only_their_own_episodes(world, token_client_for):
    assert ids(send(token_client_for("annotator"), "GET", "/episodes")) == {world.alice_episode.pk}


def test_reviewer_lists_only_the_episodes_they_review(world, token_client_for):
    assert ids(send(token_client_for("reviewer"), "GET", "/episodes")) == {world.alice_episode.pk}


@pytest.mark.parametrize("persona", ["researcher", "admin"])
def test_researchers_and_admins_list_every_episode(world, token_client_for, persona):
    everyone = {world.alice_episode.pk, world.frank_episode.pk, world.agent_episode.pk}
    assert ids(send(token_client_for(persona), "GET", "/episodes")) == everyone


@pytest.mark.parametrize("suffix", ["", "/steps"])
def test_annotator_gets_404_for_another_annotators_episode(world, token_client_for, suffix):
    response = send(token_client_for("annotator"), "GET", f"/episodes/{world.frank_episode.pk}{suffix}")
    assert response.status_code == 404
    assert response.json() == {"detail": f"no episode with id {world.frank_episode.pk}"}


def test_hidden_episode_and_missing_episode_look_the_same(world, token_client_for):
    """Same status and wording, so an annotator cannot probe which ids exist."""
    annotator = token_client_for("annotator")
    hidden = send(annotator, "GET", f"/episodes/{world.frank_episode.pk}")
    missing = send(annotator, "GET", "/episodes/999999")
    assert hidden.status_code == missing.status_code == 404
    assert hidden.json()["detail"].replace(str(world.frank_episode.pk), "N") == missing.json()[
        "detail"
    ].replace("999999", "N")


def test_reviewer_gets_404_for_an_episode_they_do_not_review(world, token_client_for):
    response = send(token_client_for("reviewer"), "GET", f"/episodes/{world.frank_episode.pk}")
    assert response.status_code == 404


def test_outsider_gets_403_on_episode_list(world, token_client_for):
    response = send(token_client_for("outsider"), "GET", "/episodes")
    assert response.status_code == 403
    assert "episodes.view_all_episodes" in response.json()["detail"]


# --- filters and pages ----------------------------------------------------------------------------


def test_episode_list_filters_by_task_status_source_and_policy(world, token_client_for):
    researcher = token_client_for("researcher")
    running = make_episode(task=world.task, finish=False)
    assert ids(send(researcher, "GET", f"/episodes?task={world.other_task.pk}")) == {world.agent_episode.pk}
    assert ids(send(researcher, "GET", "/episodes?status=running")) == {running.pk}
    assert ids(send(researcher, "GET", "/episodes?source=agent")) == {world.agent_episode.pk, running.pk}
    assert ids(send(researcher, "GET", f"/episodes?policy={world.policy.pk}")) == {world.agent_episode.pk}
    both = send(researcher, "GET", f"/episodes?source=human&task={world.task.pk}")
    assert ids(both) == {world.alice_episode.pk, world.frank_episode.pk}


def test_filters_do_not_widen_what_an_annotator_sees(world, token_client_for):
    response = send(token_client_for("annotator"), "GET", f"/episodes?task={world.task.pk}&source=human")
    assert ids(response) == {world.alice_episode.pk}


@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ("task=abc", "task", "valid integer"),
        ("policy=1.5", "policy", "valid integer"),
        ("status=done", "status", "'pending', 'running', 'finished', 'failed' or 'cancelled'"),
        ("source=robot", "source", "'human', 'agent' or 'mixed'"),
    ],
)
def test_bad_episode_filters_get_400_naming_the_field(world, token_client_for, query, field, message):
    response = send(token_client_for("researcher"), "GET", f"/episodes?{query}")
    assert response.status_code == 400
    body = response.json()
    assert [e["field"] for e in body["errors"]] == [field]
    assert message in body["detail"]


def test_episode_list_is_newest_first_and_pages(world, token_client_for):
    researcher = token_client_for("researcher")
    first = send(researcher, "GET", "/episodes?limit=2").json()
    rest = send(researcher, "GET", "/episodes?limit=2&offset=2").json()
    assert first["count"] == rest["count"] == 3
    order = [e["id"] for e in first["items"] + rest["items"]]
    assert order == [world.agent_episode.pk, world.frank_episode.pk, world.alice_episode.pk]


# --- one episode and its steps --------------------------------------------------------------------


def test_episode_detail_has_its_task_policy_and_outcome(world, token_client_for):
    body = send(token_client_for("researcher"), "GET", f"/episodes/{world.agent_episode.pk}").json()
    assert body["task"] == world.other_task.pk
    assert body["task_slug"] == "desktop/open-terminal"
    assert (body["policy"], body["policy_name"]) == (world.policy.pk, "oracle-v1")
    assert (body["source"], body["status"], body["reward"], body["num_steps"]) == (
        "agent",
        "finished",
        1.0,
        1,
    )
    assert body["steps"][0]["actor"] == "agent"


def scramble_step_order(episode) -> None:
    """Make row order differ from index order, so only an explicit ORDER BY index passes."""
    steps = list(Step.objects.filter(episode=episode).order_by("pk"))
    n = len(steps)
    for offset, step in enumerate(steps):
        Step.objects.filter(pk=step.pk).update(index=1000 + offset)
    for offset, step in enumerate(steps):
        Step.objects.filter(pk=step.pk).update(index=n - 1 - offset)


def test_episode_detail_lists_steps_in_index_order(world, token_client_for):
    scramble_step_order(world.alice_episode)
    body = send(token_client_for("annotator"), "GET", f"/episodes/{world.alice_episode.pk}").json()
    assert [s["index"] for s in body["steps"]] == [0, 1, 2]
    assert [s["thought"] for s in body["steps"]] == ["step 2", "step 1", "step 0"]


def test_step_carries_action_text_and_screenshot_url_of_the_api_route(world, token_client_for):
    body = send(token_client_for("annotator"), "GET", f"/episodes/{world.alice_episode.pk}").json()
    step = body["steps"][1]
    assert step["action"] == {"type": "click", "x": 10, "y": 5}
    assert step["action_text"] == "click(start_box='(10,5)')"
    assert step["proposed_action"] is None
    path = reverse("api:episode_step_screenshot", args=[world.alice_episode.pk, 1])
    assert step["screenshot_url"] == f"http://testserver{path}"


def test_a_token_script_can_fetch_a_screenshot_and_others_cannot(world, token_client_for):
    detail = send(token_client_for("annotator"), "GET", f"/episodes/{world.alice_episode.pk}").json()
    url = detail["steps"][0]["screenshot_url"]
    assert token_client_for("outsider").get(url).status_code == 403
    assert token_client_for("reviewer").get(url).status_code == 200  # assigned to review it
    theirs = send(token_client_for("admin"), "GET", f"/episodes/{world.frank_episode.pk}").json()
    denied = token_client_for("annotator").get(theirs["steps"][0]["screenshot_url"])  # another's episode
    assert denied.status_code == 404 and "no episode" in denied.json()["detail"]
    image = token_client_for("annotator").get(url)
    assert image.status_code == 200 and image["Content-Type"] == "image/png"
    assert b"".join(image.streaming_content).startswith(b"\x89PNG")
    image.close()  # last: closing the response ends the request, which closes the DB connection


def test_screenshot_url_serves_the_png_to_the_same_user(world, client_for):
    browser = client_for("annotator")
    body = browser.get(f"/api/v1/episodes/{world.alice_episode.pk}").json()
    image = browser.get(body["steps"][0]["screenshot_url"])
    assert image.status_code == 200
    assert image["Content-Type"] == "image/png"
    assert b"".join(image.streaming_content).startswith(b"\x89PNG")
    image.close()


def test_step_without_screenshot_has_null_url_and_keeps_proposal(world, personas, token_client_for):
    episode = episode_create(task=world.task, source="mixed", annotator=personas.annotator)
    episode_start(episode=episode)
    step_record(
        episode=episode,
        actor="human",
        action={"type": "type", "text": "hi"},
        action_text="type(content='hi')",
        proposed_action={"type": "click", "x": 1, "y": 2},
        proposed_action_text="click(start_box='(1,2)')",
        latency_ms=42,
    )
    step = send(token_client_for("annotator"), "GET", f"/episodes/{episode.pk}").json()["steps"][0]
    assert step["screenshot_url"] is None
    assert step["proposed_action"] == {"type": "click", "x": 1, "y": 2}
    assert step["proposed_action_text"] == "click(start_box='(1,2)')"
    assert step["latency_ms"] == 42


def test_steps_endpoint_pages_through_a_long_episode_in_order(world, token_client_for):
    long = make_episode(task=world.task, steps=7)
    scramble_step_order(long)
    researcher = token_client_for("researcher")
    page = send(researcher, "GET", f"/episodes/{long.pk}/steps?limit=3&offset=2").json()
    assert page["count"] == 7
    assert [s["index"] for s in page["items"]] == [2, 3, 4]
    tail = send(researcher, "GET", f"/episodes/{long.pk}/steps?limit=3&offset=6").json()
    assert [s["index"] for s in tail["items"]] == [6]
    beyond = send(researcher, "GET", f"/episodes/{long.pk}/steps?offset=50").json()
    assert beyond == {"count": 7, "items": []}
