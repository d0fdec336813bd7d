"""Every page, API, export and training prompt shows the instruction an episode was given, never the
task's template (`~/data/{{file}}.log`, `{{start.utterance}}`)."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.conftest import Personas
from tests.factories import make_episode, make_task
from tests.webapp.pages.conftest import ClientFor
from webapp.catalog.models import Task
from webapp.episodes.models import Episode
from webapp.reviews.services import review_assign
from webapp.reviews.trajectories import trajectory_view
from webapp.rollouts.selectors import episode_memory
from webapp.training.data import step_records_of

pytestmark = pytest.mark.django_db

TEMPLATE = "Count the lines of ~/data/{{file}}.log and write the count to ~/answer.txt"
GIVEN = "Count the lines of ~/data/audit.log and write the count to ~/answer.txt"


@pytest.fixture
def episode(personas: Personas) -> Episode:
    task = make_task(instruction=TEMPLATE, platform="desktop")
    Task.objects.filter(pk=task.pk).update(family="count")
    task.refresh_from_db()
    episode = make_episode(task=task, annotator=personas.annotator, steps=1, reward=1.0)
    prepared = {"seed": 0, "params": {"file": "audit"}, "instruction": GIVEN, "setup": {}}
    Episode.objects.filter(pk=episode.pk).update(prepared=prepared, summary="counted with wc -l")
    episode.refresh_from_db()
    return episode


def test_episode_and_review_pages_show_the_instruction_given(
    episode: Episode, personas: Personas, client_for: ClientFor
) -> None:
    review = review_assign(episode=episode, reviewer=personas.reviewer, assigned_by=personas.admin)
    pages = [
        ("researcher", reverse("episodes:episode_detail", args=[episode.pk])),
        ("annotator", reverse("episodes:episode_detail", args=[episode.pk])),
        ("reviewer", reverse("reviews:review", args=[review.pk])),
    ]
    for who, url in pages:
        body = client_for(who).get(url).content.decode()
        assert GIVEN in body, (who, url)
        assert "{{file}}" not in body, (who, url)


def test_api_export_and_training_prompt_use_the_instruction_given(
    episode: Episode, client_for: ClientFor
) -> None:
    got = client_for("researcher").get(f"/api/v1/episodes/{episode.pk}").json()
    assert got["instruction"] == GIVEN
    listed = client_for("researcher").get("/api/v1/episodes").json()["items"]
    assert [e["instruction"] for e in listed if e["id"] == episode.pk] == [GIVEN]
    assert trajectory_view(episode=episode).instruction == GIVEN
    assert step_records_of(episode)[0] == GIVEN
    assert [m.instruction for m in episode_memory(family="count")] == [GIVEN]


def test_an_unprepared_episode_says_it_shows_the_template(personas: Personas, client_for: ClientFor) -> None:
    episode = make_episode(task=make_task(instruction=TEMPLATE), annotator=personas.annotator, finish=False)
    url = reverse("episodes:episode_detail", args=[episode.pk])
    body = client_for("researcher").get(url).content.decode()
    assert 'data-testid="instruction-template"' in body
