"""Annotation pages and the session socket, without sandboxes: who may open what, and bad input."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.conftest import Personas
from tests.factories import make_episode, make_task
from webapp.annotation.models import Assignment
from webapp.annotation.services import DemoError, assignment_create, demo_start, demos_reap
from webapp.asgi import application
from webapp.episodes.models import Episode

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_celery")]


def published_task() -> Any:
    task = make_task(platform="desktop", env_profile="desktop", spec=note_spec())
    task.is_published = True
    task.save()
    return task


def note_spec() -> dict[str, Any]:
    from tests.webapp.annotation.conftest import NOTE_SPEC

    return NOTE_SPEC


def test_an_annotator_starts_a_picked_task_and_lands_on_its_session(
    client_for: Any, personas: Personas, no_celery: list[int]
) -> None:
    task = published_task()
    client: Client = client_for("annotator")
    assert client.get(reverse("annotation:queue")).status_code == 200
    response = client.post(reverse("annotation:start"), {"task": task.pk})
    episode = Episode.objects.get(task=task)
    assert response.status_code == 302 and response["Location"] == reverse(
        "annotation:session", args=[episode.pk]
    )
    assert (episode.source, episode.status, episode.annotator) == ("human", "pending", personas.annotator)
    assert no_celery == [episode.pk]  # preparing the sandbox is queued after the commit
    page = client.get(response["Location"])
    assert page.status_code == 200 and b"Preparing the sandbox" in page.content


def test_an_assignment_is_started_once_and_others_cannot_start_it(
    client_for: Any, personas: Personas
) -> None:
    task = published_task()
    assignment = assignment_create(task=task, annotator=personas.annotator, assigned_by=personas.admin)
    assert (
        client_for("admin").post(reverse("annotation:start"), {"assignment": assignment.pk}).status_code
        == 404
    )
    assert (
        client_for("annotator").post(reverse("annotation:start"), {"assignment": assignment.pk}).status_code
        == 302
    )
    assignment.refresh_from_db()
    assert assignment.state == Assignment.State.IN_PROGRESS and assignment.episode is not None
    assert (
        client_for("annotator").post(reverse("annotation:start"), {"assignment": assignment.pk}).status_code
        == 404
    )


def test_only_annotators_start_and_only_administrators_assign(client_for: Any, personas: Personas) -> None:
    task = published_task()
    for persona in ("reviewer", "researcher", "outsider"):
        assert client_for(persona).post(reverse("annotation:start"), {"task": task.pk}).status_code == 403
    data = {"task": task.pk, "annotator": personas.annotator.pk}
    assert client_for("annotator").post(reverse("annotation:assign"), data).status_code == 403
    assert client_for("admin").post(reverse("annotation:assign"), data).status_code == 302
    assert Assignment.objects.filter(task=task, annotator=personas.annotator).count() == 1
    with pytest.raises(PermissionError):
        demo_start(task=task, annotator=personas.reviewer)


def test_forks_need_an_ended_episode_and_a_step_within_it(client_for: Any, personas: Personas) -> None:
    task = published_task()
    ended = make_episode(task=task, annotator=personas.annotator, steps=3, reward=0.0)
    with pytest.raises(DemoError, match="cannot fork at 4"):
        demo_start(task=task, annotator=personas.annotator, fork_of=ended, fork_step=4)
    running = make_episode(task=task, annotator=personas.annotator, finish=False)
    client = client_for("annotator")
    assert client.post(reverse("annotation:fork", args=[running.pk]), {"step": 1}).status_code == 403
    assert (
        client_for("outsider").post(reverse("annotation:fork", args=[ended.pk]), {"step": 1}).status_code
        == 403
    )
    response = client.post(reverse("annotation:fork", args=[ended.pk]), {"step": 2})
    fork = Episode.objects.get(forked_from=ended)
    assert response["Location"] == reverse("annotation:session", args=[fork.pk])
    assert (fork.fork_step, fork.seed, fork.annotator) == (2, ended.seed, personas.annotator)


def test_the_reaper_ends_demonstrations_that_lost_their_sandbox_but_not_those_being_prepared(
    personas: Personas,
) -> None:
    task = published_task()
    lost = make_episode(task=task, annotator=personas.annotator, finish=False)
    preparing = make_episode(task=task, annotator=personas.annotator, finish=False)
    Episode.objects.filter(pk=lost.pk).update(prepared={"instruction": "x"})
    Episode.objects.filter(pk__in=[lost.pk, preparing.pk]).update(
        started_at=timezone.now() - timedelta(minutes=2)
    )
    assert demos_reap() == 1
    lost.refresh_from_db()
    preparing.refresh_from_db()
    assert lost.status == "failed" and "lost" in lost.error
    assert preparing.status == "running"


# --- the session socket -----------------------------------------------------------------------------


def _headers(user: Any) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    return [(b"cookie", cookie.encode()), (b"origin", b"http://localhost")]


def _talk(
    episode_id: int, user: Any, messages: list[dict[str, Any]]
) -> tuple[int | None, list[dict[str, Any]]]:
    """Connect as `user`, send `messages`, return (close code or None, what came back)."""

    headers = _headers(user) if user is not None else [(b"origin", b"http://localhost")]

    async def scenario() -> tuple[int | None, list[dict[str, Any]]]:
        comm = WebsocketCommunicator(application, f"/ws/episodes/{episode_id}/session/", headers=headers)
        connected, _ = await comm.connect(timeout=10)
        assert connected
        got: list[dict[str, Any]] = []
        first = await comm.receive_output(timeout=10)
        if first["type"] == "websocket.close":
            return first.get("code"), got
        got.append(json.loads(first["text"]))
        for message in messages:
            await comm.send_json_to(message)
            got.append(await comm.receive_json_from(timeout=10))
        await comm.disconnect()
        return None, got

    return async_to_sync(scenario)()


def test_the_session_socket_admits_only_who_may_see_the_episode(personas: Personas) -> None:
    episode = make_episode(task=published_task(), annotator=personas.annotator, finish=False)
    assert _talk(episode.pk, None, [])[0] == 4401
    for stranger in (personas.outsider, personas.reviewer):
        assert _talk(episode.pk, stranger, [])[0] == 4403
    code, got = _talk(episode.pk, personas.annotator, [])
    assert code is None and got[0]["type"] == "hello" and got[0]["may_control"] is True


def test_watchers_cannot_act_and_bad_messages_get_clear_errors(personas: Personas) -> None:
    episode = make_episode(task=published_task(), annotator=personas.annotator, finish=False)
    code, got = _talk(episode.pk, personas.researcher, [{"type": "input", "events": []}])
    assert code is None and got[0]["may_control"] is False  # no sandbox: nothing to take over
    assert got[1] == {"type": "error", "message": "you may watch this episode, not act on it"}
    bad = [
        {"nope": 1},
        {"type": "teleport"},
        {"type": "input", "events": []},
        {"type": "input", "events": [{"kind": "warp", "t": 1}]},
        {"type": "control", "op": "steal"},
        {"type": "tool_call", "server": "files", "arguments": {}},
        {"type": "clock", "clock": "warp"},
    ]
    code, got = _talk(episode.pk, personas.annotator, bad)
    errors = [m["message"] for m in got[1:]]
    assert errors[0] == "messages are JSON objects with a 'type'"
    assert errors[1] == "unknown message type 'teleport'"
    assert errors[2] == "input needs a list of 1 to 500 events"
    assert errors[3].startswith("bad input event: unknown event kind 'warp'")
    assert errors[4] == "control op is request, release or force"
    assert errors[5] == "a tool call needs a server and a tool"
    assert errors[6] == "clock is one of step, realtime, half"


def test_a_status_published_while_the_socket_connects_is_not_lost(
    personas: Personas, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The worker readies the demonstration's sandbox just after the socket read the episode's state:
    the page must still hear of it (it waited 90 s for a 'running' that had gone to nobody)."""
    from webapp.annotation import consumers
    from webapp.common.live import broadcast, broadcast_flush, episode_group

    episode = make_episode(task=published_task(), annotator=personas.annotator, finish=False)
    read_state = consumers._hello

    def hello_then_the_worker_publishes(user: Any, episode_id: int) -> dict[str, Any] | None:
        hello = read_state(user, episode_id)
        broadcast(episode_group(episode_id), "episode.status", {"episode": episode_id, "status": "running"})
        assert broadcast_flush(5)
        return hello

    monkeypatch.setattr(consumers, "_hello", hello_then_the_worker_publishes)
    headers = _headers(personas.annotator)

    async def scenario() -> list[dict[str, Any]]:
        comm = WebsocketCommunicator(application, f"/ws/episodes/{episode.pk}/session/", headers=headers)
        assert (await comm.connect(timeout=10))[0]
        got = [await comm.receive_json_from(timeout=5), await comm.receive_json_from(timeout=5)]
        await comm.disconnect()
        return got

    got = async_to_sync(scenario)()
    assert [m["type"] for m in got] == ["hello", "episode.status"] and got[1]["status"] == "running"
