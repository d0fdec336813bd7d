"""Channels over the real Redis layer: messages cross processes; WebSockets check who connects."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from tests.conftest import make_personas
from tests.factories import make_episode
from tests.procs import ROOT
from webapp.asgi import application
from webapp.common.live import broadcast, broadcast_flush, episode_group
from webapp.episodes.services import step_record

pytestmark = [pytest.mark.slow]


def test_a_message_sent_by_another_process_arrives_through_redis():
    group = f"test.{uuid.uuid4().hex}"
    code = (
        "import django; django.setup()\n"
        "from webapp.common.live import broadcast\n"
        f"broadcast({group!r}, 'test.event', {{'from_pid': __import__('os').getpid()}})\n"
    )

    async def scenario() -> dict:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-c", code, cwd=ROOT, env=os.environ.copy()
        )
        assert await proc.wait() == 0
        message = await asyncio.wait_for(layer.receive(channel), timeout=10)
        await layer.group_discard(group, channel)
        return message

    message = async_to_sync(scenario)()
    assert message["type"] == "test.event"
    assert message["payload"]["from_pid"] != os.getpid()
    assert settings.CHANNEL_LAYERS["default"]["BACKEND"] == "channels_redis.core.RedisChannelLayer"


def _cookie_for(user) -> list[tuple[bytes, bytes]]:
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    return [(b"cookie", cookie.encode()), (b"origin", b"http://localhost")]


async def _connect(episode_id: int, headers: list[tuple[bytes, bytes]]):
    communicator = WebsocketCommunicator(application, f"/ws/episodes/{episode_id}/", headers=headers)
    connected, code = await communicator.connect(timeout=10)
    return communicator, connected, code


@pytest.mark.parametrize(
    ("persona", "allowed"),
    [
        ("annotator", True),
        ("researcher", True),
        ("admin", True),
        ("reviewer", False),
        ("outsider", False),
        (None, False),
    ],
)
def test_live_steps_socket_admits_only_those_who_may_see_the_episode(transactional_db, persona, allowed):
    people = make_personas()
    episode = make_episode(annotator=people.annotator, finish=False)
    headers = _cookie_for(getattr(people, persona)) if persona else [(b"origin", b"http://localhost")]

    async def scenario():
        communicator, connected, _ = await _connect(episode.pk, headers)
        assert connected  # accepted first, so a browser can read the close code
        output = await communicator.receive_output(timeout=1) if not allowed else None
        await communicator.disconnect()
        return output

    output = async_to_sync(scenario)()
    if allowed:
        assert output is None
    else:
        assert output == {"type": "websocket.close", "code": 4401 if persona is None else 4403}


def test_a_recorded_step_reaches_a_connected_viewer(transactional_db):
    people = make_personas()
    episode = make_episode(annotator=people.annotator, finish=False)
    headers = _cookie_for(people.researcher)

    async def scenario():
        communicator, connected, _ = await _connect(episode.pk, headers)
        assert connected
        await asyncio.get_running_loop().run_in_executor(
            None,
            lambda: step_record(episode=episode, actor="human", action={"type": "wait"}, thought="looking"),
        )
        message = await communicator.receive_json_from(timeout=10)
        await communicator.disconnect()
        return message

    message = async_to_sync(scenario)()
    assert message["type"] == "step.created"
    assert (message["episode"], message["index"], message["thought"]) == (episode.pk, 0, "looking")
    assert episode_group(episode.pk) == f"episode.{episode.pk}"


def test_a_failed_broadcast_is_logged_and_later_ones_still_arrive(caplog):
    group = f"test.{uuid.uuid4().hex}"

    async def listen() -> tuple[object, str]:
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(group, channel)
        return layer, channel

    layer, channel = async_to_sync(listen)()
    broadcast("bad group name with spaces", "test.event", {"n": 1})  # channels refuses this name
    broadcast(group, "test.event", {"n": 2})
    assert broadcast_flush(timeout=10)

    async def receive() -> dict:
        return await asyncio.wait_for(layer.receive(channel), timeout=10)

    message = async_to_sync(receive)()
    assert message["payload"] == {"n": 2}
    assert "live broadcast to bad group name with spaces failed" in caplog.text
