"""Every input into a demonstration's sandbox is in the episode, whichever live transport carried it: a
real desktop sandbox host, the web app's live consumers in this process (over the real Redis layer),
an RFB client through the VNC relay and aiortc peers on the WebRTC data channel. Raw input is
recorded as steps of whoever holds control, or refused (and the viewer told); a task solved through
raw RFB is a trajectory of steps, never a reward with none behind it."""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import override_settings

from tests.conftest import Personas
from tests.sandbox_workers.hostproc import TOKEN
from tests.webapp.annotation.conftest import note_reads
from tests.webapp.sandboxes.test_live_real import refusals, rfb_over, session, ticket_for
from webapp.annotation.services import DemoError, demo_env
from webapp.annotation.session import LiveSession
from webapp.asgi import application
from webapp.episodes.models import Episode, Step

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

RETURN = 0xFF0D


def steps_of(episode: Episode) -> list[Step]:
    return list(Step.objects.filter(episode=episode).order_by("index"))


async def steps_become(episode: Episode, kinds: list[str], timeout: float = 30) -> list[Step]:
    """The episode's steps once their action types are `kinds` (waited for: they are recorded behind
    the socket), or whatever they are at the deadline."""
    deadline = asyncio.get_running_loop().time() + timeout
    while True:
        steps = await database_sync_to_async(steps_of)(episode)
        if [s.action["type"] for s in steps] == kinds or asyncio.get_running_loop().time() > deadline:
            return steps
        await asyncio.sleep(0.2)


async def type_rfb(rfb: Any, text: str) -> None:
    for ch in text:
        sym = RETURN if ch == "\n" else ord(ch)
        await rfb.key(sym, True)
        await rfb.key(sym, False)


def key_events(text: str, t0: float) -> list[dict[str, Any]]:
    return [
        {"kind": "key", "key": "enter", "t": t0 + i * 0.05}
        if ch == "\n"
        else {"kind": "key", "key": "space" if ch == " " else ch, "text": ch, "t": t0 + i * 0.05}
        for i, ch in enumerate(text)
    ]


class ControlPeer:
    """An aiortc peer on a WebRTC ticket with the "input" data channel open (as the live page's)."""

    def __init__(self, path: str, headers: Any) -> None:
        self.path, self.headers = path, headers

    async def open(self) -> ControlPeer:
        from aiortc import RTCPeerConnection, RTCSessionDescription

        self.comm = WebsocketCommunicator(application, self.path, headers=self.headers)
        assert (await self.comm.connect(timeout=20))[0]
        self.pc = RTCPeerConnection()
        self.pc.addTransceiver("video", direction="recvonly")
        self.channel = self.pc.createDataChannel("input")
        opened = asyncio.Event()
        self.channel.on("open", opened.set)
        await self.pc.setLocalDescription(await self.pc.createOffer())
        await self.comm.send_to(text_data=json.dumps({"type": "offer", "sdp": self.pc.localDescription.sdp}))
        answer = json.loads(await self.comm.receive_from(timeout=30))
        assert answer["type"] == "answer", answer
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type="answer"))
        await asyncio.wait_for(opened.wait(), timeout=30)
        return self

    def send(self, events: list[dict[str, Any]]) -> None:
        self.channel.send(json.dumps({"type": "input", "events": events}))

    async def close(self) -> None:
        await self.pc.close()
        await self.comm.disconnect()


def test_raw_input_through_every_live_transport_is_recorded_or_refused(
    started: Episode, personas: Personas
) -> None:
    """While the annotator holds control, a researcher's input through a control ticket (VNC, WebRTC),
    the session socket or the Tools panel, and a view ticket's, reach nothing, and each is told why
    with its stream still going. The annotator's own input on the WebRTC data channel and as raw RFB
    through the VNC relay is recorded as her steps: the attack of issue 34 (the task solved through
    raw RFB, which the old relay passed to x11vnc: reward 1.0 with 0 recorded steps) is now a
    trajectory whose steps explain its reward. (One test: one host and one demonstration for all.)"""
    sandbox = started.sandbox
    researcher, rheaders = session(personas.researcher)
    annotator, aheaders = session(personas.annotator)

    async def ticket(client: Any, mode: str, transport: str) -> str:
        """A fresh ticket (they live a minute: each is asked for just before its socket opens)."""
        return await database_sync_to_async(ticket_for)(client, sandbox, mode=mode, transport=transport)

    opened: list[Any] = []  # closed whatever happens: a failing run must not leave a peer running

    async def vnc(client: Any, mode: str, headers: Any) -> tuple[Any, Any]:
        comm, rfb = await rfb_over(await ticket(client, mode, "vnc"), headers)
        opened.append(comm)
        return comm, rfb

    async def webrtc(client: Any, headers: Any) -> ControlPeer:
        peer = ControlPeer(await ticket(client, "control", "webrtc"), headers)
        opened.append(peer)
        return await peer.open()

    async def scenario() -> dict[str, Any]:
        try:
            return await steps_through_every_transport()
        finally:
            for thing in opened:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(
                        thing.close() if isinstance(thing, ControlPeer) else thing.disconnect(), 10
                    )

    async def steps_through_every_transport() -> dict[str, Any]:
        seen: dict[str, Any] = {}
        comm, rfb = await vnc(researcher, "control", rheaders)
        await rfb.handshake()
        await rfb.pointer(640, 360, 1)
        await rfb.pointer(640, 360, 0)
        await type_rfb(rfb, "echo evil > evil.txt\n")
        seen["vnc"] = await refusals(comm)
        await rfb.request(incremental=False)  # the stream goes on: the picture still comes
        seen["vnc_update"] = await asyncio.wait_for(rfb.read_update(), timeout=30)
        await comm.disconnect()

        comm, rfb = await vnc(annotator, "view", aheaders)
        await rfb.handshake()
        await type_rfb(rfb, "echo view > view.txt\n")
        seen["view"] = await refusals(comm)
        await comm.disconnect()

        # The session socket (the episode's page) refuses the researcher's input the same way.
        page = WebsocketCommunicator(application, f"/ws/episodes/{started.pk}/session/", headers=rheaders)
        opened.append(page)
        assert (await page.connect(timeout=20))[0]
        hello = await page.receive_json_from(timeout=20)
        await page.send_json_to({"type": "input", "events": key_events("echo page > page.txt\n", 1.0)})
        seen["session"] = (hello, await page.receive_json_from(timeout=30))
        await page.disconnect()

        peer = await webrtc(researcher, rheaders)
        peer.send(key_events("echo rtc > rtc.txt\n", 1.0))
        seen["webrtc"] = json.loads(await peer.comm.receive_from(timeout=30))
        await peer.close()

        # The annotator's own: WebRTC data-channel events, then raw RFB, are her steps.
        peer = await webrtc(annotator, aheaders)
        peer.channel.send("typed, not JSON")  # a message it cannot read: said so, nothing sent
        seen["malformed"] = json.loads(await peer.comm.receive_from(timeout=30))
        peer.send(key_events("ls\n", 1.0))
        seen["webrtc_steps"] = await steps_become(started, ["type"])
        seen["quiet"] = await peer.comm.receive_nothing(timeout=0.5)
        await peer.close()

        comm, rfb = await vnc(annotator, "control", aheaders)
        await rfb.handshake()
        await rfb.request(incremental=False)
        await rfb.read_update()
        await rfb.pointer(640, 360, 1)
        await rfb.pointer(640, 360, 0)
        await asyncio.sleep(0.7)  # past the click's repeat window: a click, then a run of typing
        await type_rfb(rfb, "echo hello > note.txt\n")
        seen["steps"] = await steps_become(started, ["type", "click", "type"])
        seen["told"] = await refusals(comm, timeout=2)
        await comm.disconnect()
        return seen

    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        seen = async_to_sync(scenario)()
        assert seen["vnc"] and "do not hold control" in seen["vnc"][0], seen["vnc"]
        assert seen["vnc_update"], "the refused viewer's picture stopped"
        assert seen["view"] and "view-only" in seen["view"][0], seen["view"]
        hello, refused = seen["session"]
        assert hello["type"] == "hello" and hello["may_control"] is True  # may take control, holds none
        assert refused["type"] == "error" and "do not hold control" in refused["message"], refused
        assert seen["webrtc"]["type"] == "input_refused" and "do not hold control" in seen["webrtc"]["error"]
        assert seen["malformed"]["type"] == "input_refused" and '"events"' in seen["malformed"]["error"]
        assert [s.action for s in seen["webrtc_steps"]] == [{"type": "type", "content": "ls\n"}]
        assert seen["quiet"], "the annotator's recorded input was answered with a refusal"
        with pytest.raises(DemoError, match="do not hold control"):
            LiveSession(episode_id=started.pk, user=personas.researcher).tool_call(
                "files", "write_file", {"path": "tool.txt", "content": "x"}
            )

        steps = seen["steps"]
        assert [s.action["type"] for s in steps] == ["type", "click", "type"], [s.action for s in steps]
        assert not seen["told"], seen["told"]
        assert (steps[1].action["x"], steps[1].action["y"]) == (640, 360)
        assert steps[2].action["content"] == "echo hello > note.txt\n"
        assert all(s.actor == "human" and s.screenshot for s in steps)
        note_reads(started, "hello")
        env = demo_env(episode=started)
        leftovers = env.exec("ls evil.txt view.txt page.txt rtc.txt tool.txt 2>/dev/null; true").stdout
        assert leftovers == "", f"refused input reached the sandbox: {leftovers!r}"
        done = LiveSession(episode_id=started.pk, user=personas.annotator).submit()
    assert done.status == "finished" and done.reward == 1.0, done.check_details
    assert Step.objects.filter(episode=done).count() == 3
