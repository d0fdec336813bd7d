"""Which episodes each role sees on the pages, and who gets a step's screenshot bytes."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.test import Client
from django.urls import reverse

from tests.conftest import Personas
from tests.factories import PNG_1X1, make_episode
from tests.webapp.pages.conftest import ClientFor
from tests.webapp.pages.html import episode_ids_listed
from webapp.accounts.roles import Role
from webapp.accounts.services import user_create
from webapp.episodes.models import Episode
from webapp.reviews.services import review_assign


@dataclass
class Episodes:
    own: Episode  # demonstrated by the annotator persona
    colleague: Episode  # demonstrated by another annotator
    agent: Episode  # an agent rollout

    def ids(self) -> set[int]:
        return {self.own.pk, self.colleague.pk, self.agent.pk}


@pytest.fixture
def episodes(personas: Personas) -> Episodes:
    colleague = user_create(username="frank", password="x", roles=[Role.ANNOTATOR])
    return Episodes(
        own=make_episode(annotator=personas.annotator, steps=2, reward=1.0),
        colleague=make_episode(annotator=colleague, steps=1, reward=0.0),
        agent=make_episode(steps=1, reward=1.0),
    )


def detail(episode: Episode) -> str:
    return reverse("episodes:episode_detail", args=[episode.pk])


def screenshot(episode: Episode, index: int = 0) -> str:
    return reverse("episodes:step_screenshot", args=[episode.pk, index])


def listed(client: Client, **params: str) -> set[int]:
    response = client.get(reverse("episodes:episode_list"), params)
    assert response.status_code == 200
    return episode_ids_listed(response)


def test_annotator_sees_only_own_episodes(episodes: Episodes, client_for: ClientFor) -> None:
    client = client_for("annotator")
    assert listed(client) == {episodes.own.pk}
    assert listed(client, source="agent") == set()
    assert client.get(detail(episodes.own)).status_code == 200
    for other in (episodes.colleague, episodes.agent):
        assert client.get(detail(other)).status_code == 404
        assert client.get(screenshot(other)).status_code == 404


def test_annotator_htmx_list_is_scoped_too(episodes: Episodes, client_for: ClientFor) -> None:
    response = client_for("annotator").get(reverse("episodes:episode_list"), headers={"HX-Request": "true"})
    assert episode_ids_listed(response) == {episodes.own.pk}


def test_reviewer_sees_an_episode_once_a_review_assigns_it(
    personas: Personas, episodes: Episodes, client_for: ClientFor
) -> None:
    client = client_for("reviewer")
    assert listed(client) == set()
    assert client.get(detail(episodes.colleague)).status_code == 404
    assert client.get(screenshot(episodes.colleague)).status_code == 404

    review_assign(episode=episodes.colleague, reviewer=personas.reviewer, assigned_by=personas.admin)

    assert listed(client) == {episodes.colleague.pk}
    assert client.get(detail(episodes.colleague)).status_code == 200
    assert b"".join(client.get(screenshot(episodes.colleague)).streaming_content) == PNG_1X1
    queue = client.get(reverse("reviews:queue")).content.decode()
    assert f'href="{detail(episodes.colleague)}"' in queue
    for unassigned in (episodes.own, episodes.agent):
        assert client.get(detail(unassigned)).status_code == 404


def test_another_reviewers_assignment_does_not_open_the_episode(
    personas: Personas, episodes: Episodes, client_for: ClientFor
) -> None:
    other = user_create(username="grace", password="x", roles=[Role.REVIEWER])
    review_assign(episode=episodes.agent, reviewer=other, assigned_by=personas.admin)
    assert client_for("reviewer").get(detail(episodes.agent)).status_code == 404


@pytest.mark.parametrize("persona", ["researcher", "admin"])
def test_researcher_and_admin_see_every_episode(
    persona: str, episodes: Episodes, client_for: ClientFor
) -> None:
    client = client_for(persona)
    assert listed(client) == episodes.ids()
    assert listed(client, source="agent") == {episodes.agent.pk}
    for episode in (episodes.own, episodes.colleague, episodes.agent):
        response = client.get(detail(episode))
        assert response.status_code == 200
        assert response.content.decode().count('data-testid="step"') == episode.num_steps


@pytest.mark.parametrize("persona", ["annotator", "researcher", "admin"])
def test_allowed_users_get_the_screenshot_bytes(
    persona: str, episodes: Episodes, client_for: ClientFor
) -> None:
    response = client_for(persona).get(screenshot(episodes.own, index=1))
    assert response.status_code == 200
    assert response["Content-Type"] == "image/png"
    assert response["Cache-Control"].startswith("private")
    assert b"".join(response.streaming_content) == PNG_1X1


@pytest.mark.parametrize("persona", ["anonymous", "reviewer", "outsider"])
def test_others_get_no_screenshot_bytes(persona: str, episodes: Episodes, client_for: ClientFor) -> None:
    response = client_for(None if persona == "anonymous" else persona).get(screenshot(episodes.own))
    assert response.status_code == (302 if persona == "anonymous" else 404)
    assert not response.streaming
    assert PNG_1X1 not in response.content


def test_detail_page_links_its_screenshots(episodes: Episodes, client_for: ClientFor) -> None:
    body = client_for("annotator").get(detail(episodes.own)).content.decode()
    assert f'src="{screenshot(episodes.own, 0)}"' in body
    assert f'src="{screenshot(episodes.own, 1)}"' in body


def test_missing_step_is_not_found_even_for_admin(episodes: Episodes, client_for: ClientFor) -> None:
    assert client_for("admin").get(screenshot(episodes.own, index=2)).status_code == 404
