"""Malformed WebSocket frames get a clear error and the socket stays open, on every consumer.

Before, a frame that was not JSON, a binary frame on a JSON socket, deep nesting or a huge number made
the consumer raise, and the socket closed with 1011. The episode sockets run on the real Redis layer;
the live ones relay a small fake sandbox host (aiohttp, in this process) so no desktop is started.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from aiohttp import WSMsgType, web
from asgiref.sync import async_to_sync
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client

from tests.conftest import make_personas
from tests.factories import make_episode
from tests.procs import free_port
from webapp.asgi import application
from webapp.common.sockets import MAX_DEPTH, MAX_MESSAGE_CHARS, MessageError, message_decode
from webapp.sandboxes.models import Sandbox, SandboxHost
from webapp.sandboxes.tickets import ticket_issue

pytestmark = pytest.mark.django_db(transaction=True)

SCREENCAST_TAKES_NOTHING = 'the screencast takes only "ack" (with ?ack=1): it sends frames'
SCREENCAST_NOT_PACED = '"ack" paces a screencast opened with ?ack=1; this one was not'
IN_MEMORY_LAYER = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

# (frame, words the error must contain): text frames unless bytes.
MALFORMED: list[tuple[str | bytes, str]] = [
    ("{not json", "not valid JSON"),
    (b"\x00\x01binary", "not binary"),
    ("[" * 100_000 + "]" * 100_000, "nest at most"),
    ("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1), "nest at most"),
    ('{"type": "ping", "n": ' + "9" * 5000 + "}", "at most 16 digits"),
    ('{"type": "ping", "n": 1e999}', "out of range"),
    ('{"type": "ping", "n": NaN}', "NaN is not a number"),
    ("x" * (MAX_MESSAGE_CHARS + 1), f"at most {MAX_MESSAGE_CHARS} characters"),
]


def _headers(user: Any) -> tuple[Client, list[tuple[bytes, bytes]]]:
    client = Client()
    client.force_login(user)
    cookie = f"{settings.SESSION_COOKIE_NAME}={client.cookies[settings.SESSION_COOKIE_NAME].value}"
    return client, [(b"cookie", cookie.encode()), (b"origin", b"http://localhost")]


async def _send(comm: WebsocketCommunicator, frame: str | bytes) -> None:
    if isinstance(frame, bytes):
        await comm.send_to(bytes_data=frame)
    else:
        await comm.send_to(text_data=frame)


async def _next_text(comm: WebsocketCommunicator) -> dict[str, Any]:
    """The next text message (binary frames of a stream in between are skipped); fails on a close."""

    async def text() -> dict[str, Any]:
        while True:
            out = await comm.receive_output(timeout=10)
            assert out["type"] == "websocket.send", f"the socket was closed: {out}"
            if out.get("text") is not None:
                return json.loads(out["text"])

    return await asyncio.wait_for(text(), timeout=10)


async def _assert_refused_each(comm: WebsocketCommunicator, key: str) -> None:
    for frame, words in MALFORMED:
        await _send(comm, frame)
        reply = await _next_text(comm)
        assert reply["type"] == "error" and words in reply[key], (str(frame)[:40], reply)


def test_message_decode_refuses_what_json_alone_lets_through():
    assert message_decode('{"type": "ping", "n": [1, 2.5, -3]}') == {"type": "ping", "n": [1, 2.5, -3]}
    for frame, words in MALFORMED:
        text, data = (None, frame) if isinstance(frame, bytes) else (frame, None)
        with pytest.raises(MessageError, match=re.escape(words)):
            message_decode(text, data)


def test_the_session_socket_answers_malformed_frames_and_stays_open():
    people = make_personas()
    episode = make_episode(annotator=people.annotator, finish=False)
    _, headers = _headers(people.annotator)
    wrong_types = [
        ({"type": 5}, "messages are JSON objects with a 'type'"),
        ([1, 2], "messages are JSON objects with a 'type'"),
        ({"type": "thought", "text": {"a": 1}}, "text must be a string"),
        ({"type": "thought", "text": "x" * 20_000}, "text may be at most 10000 characters"),
        ({"type": "edit", "text": "click(start_box='(1,1)')\x00"}, "text may not contain NUL characters"),
        ({"type": "submit", "answer": 42}, "answer must be a string"),
        ({"type": "input", "events": "click"}, "input needs a list of 1 to 500 events"),
        ({"type": "input", "events": [{"kind": "click", "t": 1e300}]}, "bad input event"),
    ]

    async def scenario() -> dict[str, Any]:
        comm = WebsocketCommunicator(application, f"/ws/episodes/{episode.pk}/session/", headers=headers)
        assert (await comm.connect(timeout=10))[0]
        assert (await _next_text(comm))["type"] == "hello"
        await _assert_refused_each(comm, "message")
        for message, words in wrong_types:
            await comm.send_json_to(message)
            reply = await _next_text(comm)
            assert reply["type"] == "error" and words in reply["message"], (message, reply)
        await comm.send_json_to({"type": "ping"})
        pong = await _next_text(comm)
        await comm.disconnect()
        return pong

    assert async_to_sync(scenario)() == {"type": "pong"}


def test_the_steps_socket_answers_malformed_frames_and_stays_open():
    people = make_personas()
    episode = make_episode(annotator=people.annotator, finish=False)
    _, headers = _headers(people.researcher)

    async def scenario() -> dict[str, Any]:
        comm = WebsocketCommunicator(application, f"/ws/episodes/{episode.pk}/", headers=headers)
        assert (await comm.connect(timeout=10))[0]
        await _assert_refused_each(comm, "message")
        await comm.send_json_to({"type": "ping"})
        last = await _next_text(comm)
        await comm.disconnect()
        return last

    assert async_to_sync(scenario)() == {"type": "error", "message": "this stream is read-only"}


# --- the live sockets, relaying a fake host -----------------------------------------------------------


async def _fake_host(port: int) -> web.AppRunner:
    """A sandbox host's live endpoints: an RFB greeting then an echo, and JPEG-ish frames at 20 fps."""

    async def vnc(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_bytes(b"RFB 003.008\n")
        async for msg in ws:
            if msg.type == WSMsgType.BINARY:
                await ws.send_bytes(b"echo:" + msg.data)
        return ws

    async def screencast(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        n = 0
        while not ws.closed:
            n += 1
            await ws.send_bytes(b"\xff\xd8fake-jpeg %d" % n)
            await asyncio.sleep(0.05)
        return ws

    app = web.Application()
    app.router.add_get("/v1/sandboxes/{sid}/vnc", vnc)
    app.router.add_get("/v1/sandboxes/{sid}/screencast", screencast)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner


@pytest.fixture
def live(settings):
    settings.CHANNEL_LAYERS = IN_MEMORY_LAYER
    settings.SANDBOX_HOST_TOKEN = "test-token"
    port = free_port()
    host = SandboxHost.objects.create(name="fake", api_url=f"http://127.0.0.1:{port}")
    sandbox = Sandbox.objects.create(host=host, external_id="sb-1", provider="xdesktop", profile="desktop",
                                     state="leased")  # fmt: skip
    people = make_personas()
    client, headers = _headers(people.researcher)

    def path(transport: str) -> str:
        ticket = ticket_issue(user=people.researcher, session_key=client.session.session_key,
                              sandbox=sandbox, mode="view", transport=transport)  # fmt: skip
        return f"/ws/sandboxes/{sandbox.pk}/{transport}/?ticket={ticket}"

    return port, path, headers


def test_the_vnc_relay_answers_a_text_frame_and_keeps_relaying(live):
    port, path, headers = live
    url = path("vnc")

    async def scenario() -> bytes:
        runner = await _fake_host(port)
        try:
            comm = WebsocketCommunicator(application, url, headers=headers)
            assert (await comm.connect(timeout=10))[0]
            assert await comm.receive_from(timeout=10) == b"RFB 003.008\n"
            for frame in ("hello", '{"type": "offer"}'):
                await comm.send_to(text_data=frame)
                reply = await _next_text(comm)
                assert reply == {"type": "error", "error": "the VNC relay carries binary RFB frames only"}
            await comm.send_to(bytes_data=b"RFB 003.008\n")  # the viewer's version: allowed in view mode
            echoed = await comm.receive_from(timeout=10)
            await comm.disconnect()
            return echoed
        finally:
            await runner.cleanup()

    assert async_to_sync(scenario)() == b"echo:RFB 003.008\n"


def test_the_screencast_answers_any_frame_and_keeps_streaming(live):
    port, path, headers = live
    url = path("screencast")

    async def scenario() -> bytes:
        runner = await _fake_host(port)
        try:
            comm = WebsocketCommunicator(application, url, headers=headers)
            assert (await comm.connect(timeout=10))[0]
            for frame, _ in MALFORMED[:2]:
                await _send(comm, frame)
                reply = await _next_text(comm)
                assert reply == {"type": "error", "error": SCREENCAST_TAKES_NOTHING}
            await comm.send_to(text_data="ack")  # not opened with ?ack=1
            assert (await _next_text(comm))["error"] == SCREENCAST_NOT_PACED
            out = await comm.receive_output(timeout=10)
            while out.get("bytes") is None:
                out = await comm.receive_output(timeout=10)
            await comm.disconnect()
            return out["bytes"]
        finally:
            await runner.cleanup()

    assert async_to_sync(scenario)().startswith(b"\xff\xd8fake-jpeg ")


def test_a_pacing_screencast_viewer_gets_at_most_two_unacknowledged_frames_and_then_the_newest(live):
    port, path, headers = live
    url = path("screencast") + "&ack=1&fps=30"

    async def scenario() -> tuple[list[int], bool, list[int]]:
        runner = await _fake_host(port)

        async def frame() -> int:
            out = await comm.receive_output(timeout=10)
            assert out["type"] == "websocket.send" and out.get("bytes"), out
            return int(out["bytes"].split(b" ")[1])

        try:
            comm = WebsocketCommunicator(application, url, headers=headers)
            assert (await comm.connect(timeout=10))[0]
            first = [await frame(), await frame()]
            # The host sends 20 fps meanwhile.
            quiet = [await comm.receive_nothing(timeout=0.6, interval=0.05)]
            later = []
            for _ in range(3):  # each ack lets one frame through, and only one
                await comm.send_to(text_data="ack")
                later.append(await frame())
                quiet.append(await comm.receive_nothing(timeout=0.3, interval=0.05))
            await comm.disconnect()
            return first, all(quiet), later
        finally:
            await runner.cleanup()

    first, quiet, later = async_to_sync(scenario)()
    assert quiet, "a frame came beyond the two unacknowledged ones"
    # After each ack the newest frame (the host sent several meanwhile), never the next one queued.
    assert later[0] >= first[1] + 5 and later[1] >= later[0] + 3 and later[2] >= later[1] + 3, (first, later)


def test_webrtc_signalling_answers_malformed_frames_and_stays_open(live):
    _, path, headers = live
    url = path("webrtc")

    async def scenario() -> dict[str, Any]:
        comm = WebsocketCommunicator(application, url, headers=headers)
        assert (await comm.connect(timeout=10))[0]
        await _assert_refused_each(comm, "error")
        for wrong in ({"type": "offer", "sdp": 123}, {"type": "offer", "sdp": ["v=0"]}, {"type": "answer"}):
            await comm.send_json_to(wrong)
            reply = await _next_text(comm)
            assert reply == {"type": "error", "error": "send {type: offer, sdp} with the offer's SDP text"}
        await comm.send_to(text_data="still there?")
        last = await _next_text(comm)
        await comm.disconnect()
        return last

    assert async_to_sync(scenario)()["type"] == "error"
