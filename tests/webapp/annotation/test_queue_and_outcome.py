"""What an annotator reads before and after a demonstration: the queue and the pending session page show
the instance they will get (never `{{file}}` or `{{start.utterance}}`), and an ended session shows its
outcome from the database (reward, checks, the error) with the next assigned task one click away."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest
from django.urls import reverse

from agent_core.suites.miniwob import task_doc
from agent_core.tasks.spec import parse_task
from tests.conftest import Personas
from tests.factories import make_episode, make_task
from tests.webapp.pages.conftest import ClientFor
from webapp.annotation.models import Assignment
from webapp.annotation.selectors import assignment_seed
from webapp.annotation.services import assignment_create, demo_start
from webapp.catalog.models import Task
from webapp.episodes.models import Episode
from webapp.episodes.services import episode_finish

pytestmark = pytest.mark.django_db

TEMPLATED: dict[str, Any] = {
    "format": "flywheel-task/1",
    "id": "desktop/append",
    "title": "Append a line",
    "instruction": 'The text editor has ~/{{file}}.txt open. Add "{{extra}}" as a new line at the end.',
    "platform": "desktop",
    "profile": "desktop",
    "params": {"file": {"choice": ["groceries", "chores", "packing"]}, "extra": {"word": {"length": 7}}},
    "checker": {
        "checks": [{"probe": {"op": "file", "path": "x.txt"}, "metric": "exact_match", "expected": "x"}]
    },
}


@pytest.fixture(autouse=True)
def no_celery(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("webapp.annotation.services._enqueue_prepare", lambda episode_id: None)


def published(spec: dict[str, Any]) -> Task:
    task = make_task(slug=spec["id"], instruction=spec["instruction"], spec=spec, title=spec["title"])
    Task.objects.filter(pk=task.pk).update(is_published=True)
    task.refresh_from_db()
    return task


def instance(task: Task, seed: int) -> str:
    """The instruction the sandbox's preparation renders for `seed` (the reference)."""
    spec = parse_task(task.spec)
    params = spec.draw_params(seed)
    return spec.instruction.replace("{{file}}", params["file"]).replace("{{extra}}", params["extra"])


def test_the_queue_shows_the_instance_an_assignment_starts_and_start_uses_it(
    client_for: ClientFor, personas: Personas
) -> None:
    task = published(TEMPLATED)
    assignment = assignment_create(task=task, annotator=personas.annotator, assigned_by=personas.admin)
    client = client_for("annotator")
    body = client.get(reverse("annotation:queue")).content.decode()
    want = instance(task, assignment_seed(assignment))
    assert want in html.unescape(body)
    assert "{{" not in body and "}}" not in body

    client.post(reverse("annotation:start"), {"assignment": assignment.pk})
    episode = Episode.objects.get(task=task)
    assert episode.seed == assignment_seed(assignment)  # the very instance the queue showed
    pending = client.get(reverse("annotation:session", args=[episode.pk])).content.decode()
    assert want in html.unescape(pending) and "{{" not in pending
    assert 'data-testid="preparing"' in pending and 'data-testid="outcome"' in pending


def test_a_pending_miniwob_session_describes_the_task_until_its_page_gives_the_utterance(
    client_for: ClientFor, personas: Personas
) -> None:
    doc = task_doc("click-button")
    task = published(doc)
    episode = demo_start(task=task, annotator=personas.annotator)
    body = client_for("annotator").get(reverse("annotation:session", args=[episode.pk])).content.decode()
    assert "{{" not in body and "start.utterance" not in body
    shown = re.search(r'data-testid="instruction">([^<]*)<', body)
    assert shown and html.unescape(shown.group(1)) == doc["description"]
    assert "The exact instruction is shown once the sandbox is set up." in body
    # Once prepared, the page gives what the sandbox said.
    Episode.objects.filter(pk=episode.pk).update(prepared={"instruction": "Click on the Submit button."})
    body = client_for("annotator").get(reverse("annotation:session", args=[episode.pk])).content.decode()
    assert 'data-testid="instruction">Click on the Submit button.<' in body


def test_a_finished_session_keeps_its_outcome_and_offers_the_next_assigned_task(
    client_for: ClientFor, personas: Personas
) -> None:
    task = published(TEMPLATED)
    episode = make_episode(task=task, annotator=personas.annotator, steps=2, finish=False)
    checks = [
        {"check": "file x.txt", "metric": "exact_match", "score": 0.0, "artifact": "y", "expected": "x"}
    ]
    episode_finish(episode=episode, reward=0.0, check_details=checks, final_answer="done")
    following = assignment_create(task=task, annotator=personas.annotator, assigned_by=personas.admin)
    client = client_for("annotator")
    url = reverse("annotation:session", args=[episode.pk])
    for response in (client.get(url), client.get(url, headers={"HX-Request": "true"})):  # reload, htmx
        body = response.content.decode()
        assert 'data-testid="reward">Reward: 0<' in body and 'data-testid="verdict">not solved<' in body
        assert 'data-testid="checks"' in body and "exact_match" in body
        assert 'data-testid="final-answer">done<' in body
        assert f'name="assignment" value="{following.pk}"' in body and 'data-testid="next-task"' in body
    part = client.get(url, headers={"HX-Request": "true"}).content.decode()
    assert part.lstrip().startswith('<section id="outcome"') and "<html" not in part  # the outcome alone
    page = client.get(url).content.decode()
    assert page.count("<li data-index=") == 2  # the recorded steps, from the database

    # Next task starts the assignment on its own seed.
    response = client.post(reverse("annotation:start"), {"assignment": following.pk})
    started = Episode.objects.exclude(pk=episode.pk).get(task=task)
    assert response["Location"] == reverse("annotation:session", args=[started.pk])
    assert started.seed == assignment_seed(following)
    following.refresh_from_db()
    assert following.state == Assignment.State.IN_PROGRESS
    # With nothing else assigned the page says so and links to the queue; a watcher gets no such offer.
    body = client.get(url).content.decode()
    assert 'data-testid="queue-empty"' in body and 'data-testid="next-task"' not in body
    other = client_for("researcher").get(url).content.decode()
    assert 'data-testid="reward">Reward: 0<' in other and 'data-testid="next"' not in other


def test_a_failed_session_says_why(client_for: ClientFor, personas: Personas) -> None:
    episode = make_episode(task=published(TEMPLATED), annotator=personas.annotator, finish=False)
    episode_finish(
        episode=episode, reward=None, env_error=True, error="the sandbox could not be prepared: boom"
    )
    body = client_for("annotator").get(reverse("annotation:session", args=[episode.pk])).content.decode()
    assert "The episode failed" in body
    assert 'data-testid="episode-error">the sandbox could not be prepared: boom<' in body
    assert 'data-testid="reward"' not in body
