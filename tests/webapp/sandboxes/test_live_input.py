"""Where a live viewer's input goes (webapp.sandboxes.live_input): the rules, and the VNC relay applying
them on each use against a stand-in for the sandbox host's VNC socket (the one boundary faked here;
test_live_input_real.py in tests/webapp/annotation drives real desktops)."""

from __future__ import annotations

import asyncio
import json
import struct
from datetime import timedelta
from typing import Any

import pytest
from aiohttp import WSMsgType, web
from asgiref.sync import async_to_sync
from channels.db import database_sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.test import Client, override_settings
from django.utils import timezone

from tests.conftest import make_personas
from tests.factories import make_episode
from tests.procs import free_port
from webapp.asgi import application
from webapp.episodes.models import Episode
from webapp.sandboxes.live_input import InputRefused, InputTarget, input_target
from webapp.sandboxes.models import Lease, Sandbox, SandboxHost
from webapp.sandboxes.tickets import ticket_issue

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "test-host-token-0123456789abcdef"
HANDSHAKE = b"RFB 003.008\n" + b"\x01" + b"\x00"
FB_REQUEST = b"\x03\x01" + struct.pack(">HHHH", 0, 0, 64, 48)
KEY_A = struct.pack(">BBxxI", 4, 1, 0x61)
CLICK = struct.pack(">BBHH", 5, 1, 10, 20) + struct.pack(">BBHH", 5, 0, 10, 20)


def sandbox_on(url: str, state: str = "idle") -> Sandbox:
    host = SandboxHost.objects.create(name="fake-host", api_url=url)
    return Sandbox.objects.create(
        host=host, external_id="sb-1", provider="xdesktop", profile="desktop", state=state,
        endpoints={"vnc": {"host": "127.0.0.1", "port": 5999}},
    )  # fmt: skip


def lease(sandbox: Sandbox, holder: str, user: Any = None) -> Lease:
    now = timezone.now()
    return Lease.objects.create(
        sandbox=sandbox, holder=holder, user=user, acquired_at=now, heartbeat_at=now,
        expires_at=now + timedelta(minutes=5),
    )  # fmt: skip


# --- the rules ---------------------------------------------------------------------------------------


def test_input_goes_to_the_live_episode_raw_to_an_idle_sandbox_and_nowhere_else():
    people = make_personas()
    sandbox = sandbox_on("http://127.0.0.1:9")
    admin, researcher = people.admin, people.researcher
    assert input_target(sandbox_id=sandbox.pk, user=admin) == InputTarget(episode_id=None)
    with pytest.raises(InputRefused, match="no longer control"):
        input_target(sandbox_id=sandbox.pk, user=people.reviewer)  # may not even see it

    for state in ("resetting", "starting", "unhealthy", "leased"):
        Sandbox.objects.filter(pk=sandbox.pk).update(state=state)
        with pytest.raises(InputRefused, match=f"is {state}"):
            input_target(sandbox_id=sandbox.pk, user=admin)
    Sandbox.objects.filter(pk=sandbox.pk).update(state="leased")

    check = lease(sandbox, "verify:desktop/x")  # a catalog check: nobody's episode records input
    with pytest.raises(InputRefused, match=r"leased \(verify:desktop/x\) outside a live episode"):
        input_target(sandbox_id=sandbox.pk, user=researcher)
    Lease.objects.filter(pk=check.pk).update(state="released", ended_at=timezone.now())

    episode = make_episode(annotator=people.annotator, finish=False)
    Episode.objects.filter(pk=episode.pk).update(sandbox=sandbox, status="pending")
    lease(sandbox, f"episode:{episode.pk}", user=people.annotator)
    with pytest.raises(InputRefused, match="outside a live episode"):  # still being set up
        input_target(sandbox_id=sandbox.pk, user=researcher)
    Episode.objects.filter(pk=episode.pk).update(status="running")
    assert input_target(sandbox_id=sandbox.pk, user=researcher) == InputTarget(episode_id=episode.pk)
    # The annotator controls the sandbox through her lease: her input goes to her episode too.
    assert input_target(sandbox_id=sandbox.pk, user=people.annotator) == InputTarget(episode_id=episode.pk)

    Lease.objects.filter(sandbox=sandbox).update(state="released", ended_at=timezone.now())
    Sandbox.objects.filter(pk=sandbox.pk).update(state="idle")
    with pytest.raises(InputRefused, match="holds no lease"):  # running, its lease lost: not idle
        input_target(sandbox_id=sandbox.pk, user=admin)


# --- the VNC relay, against a stand-in host --------------------------------------------------------


class FakeHost:
    """The sandbox host's VNC WebSocket: keeps every byte the relay forwards."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.received = bytearray()
        self.runner: web.AppRunner | None = None

    async def start(self) -> None:
        async def vnc(request: web.Request) -> web.WebSocketResponse:
            assert request.headers["Authorization"] == f"Bearer {TOKEN}"
            ws = web.WebSocketResponse()
            await ws.prepare(request)
            await ws.send_bytes(b"RFB 003.008\n")
            async for msg in ws:
                if msg.type == WSMsgType.BINARY:
                    self.received += msg.data
            return ws

        app = web.Application()
        app.router.add_get("/v1/sandboxes/{sb}/vnc", vnc)
        self.runner = web.AppRunner(app)
        await self.runner.setup()
        await web.TCPSite(self.runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()

    async def got(self, data: bytes, timeout: float = 10) -> bool:
        """Whether the host has received `data` at the end of its stream within `timeout`."""
        deadline = asyncio.get_running_loop().time() + timeout
        while not bytes(self.received).endswith(data):
            if asyncio.get_running_loop().time() > deadline:
                return False
            await asyncio.sleep(0.02)
        return True


def viewer(user: Any, sandbox: Sandbox, mode: str) -> tuple[str, list[tuple[bytes, bytes]]]:
    client = Client()
    client.force_login(user)
    key = client.cookies[settings.SESSION_COOKIE_NAME].value
    ticket = ticket_issue(user=user, session_key=key, sandbox=sandbox, mode=mode, transport="vnc")
    cookie = f"{settings.SESSION_COOKIE_NAME}={key}".encode()
    return f"/ws/sandboxes/{sandbox.pk}/vnc/?ticket={ticket}", [
        (b"cookie", cookie),
        (b"origin", b"http://localhost"),
    ]


async def texts(comm: WebsocketCommunicator, timeout: float = 10) -> list[dict[str, Any]]:
    """The text messages the relay sent the viewer by the time one came (within `timeout`) and the
    socket went quiet; the host's bytes it relays are skipped. (receive_output's own timeout would
    cancel the consumer: receive_nothing waits without.)"""
    got: list[dict[str, Any]] = []
    deadline = asyncio.get_running_loop().time() + timeout
    while asyncio.get_running_loop().time() < deadline:
        if await comm.receive_nothing(timeout=0.3, interval=0.02):
            if got:
                break
            continue
        out = await comm.receive_output()
        if out.get("text"):
            got.append(json.loads(out["text"]))
    return got


@override_settings(SANDBOX_HOST_TOKEN=TOKEN)
def test_the_relay_sends_raw_input_to_an_idle_sandbox_only_and_tells_the_viewer_what_it_refused():
    people = make_personas()
    host = FakeHost()

    async def scenario() -> None:
        await host.start()
        try:
            sandbox = await database_sync_to_async(sandbox_on)(host.url)
            path, headers = await database_sync_to_async(viewer)(people.admin, sandbox, "control")
            comm = WebsocketCommunicator(application, path, headers=headers)
            assert (await comm.connect(timeout=10))[0]
            # Idle, and the admin may control it: raw input reaches it, in order with the rest.
            await comm.send_to(bytes_data=HANDSHAKE + FB_REQUEST + KEY_A + CLICK)
            assert await host.got(b"RFB 003.008\n\x01\x01" + FB_REQUEST + KEY_A + CLICK)

            # A catalog check leases it: the next key reaches nothing, the viewer is told why, and the
            # pictures' requests still pass.
            await database_sync_to_async(lease)(sandbox, "verify:desktop/x")
            await comm.send_to(bytes_data=KEY_A + FB_REQUEST)
            assert await host.got(CLICK + FB_REQUEST)
            told = await texts(comm)
            assert told and told[0]["type"] == "input_refused", told
            assert "leased (verify:desktop/x) outside a live episode" in told[0]["error"]
            await comm.send_to(bytes_data=CLICK + FB_REQUEST)  # hovering or clicking: the same
            assert await host.got(CLICK + FB_REQUEST + FB_REQUEST)
            await comm.disconnect()

            # A view ticket's input never passes, wherever the sandbox is; the viewer is told.
            path, headers = await database_sync_to_async(viewer)(people.researcher, sandbox, "view")
            comm = WebsocketCommunicator(application, path, headers=headers)
            assert (await comm.connect(timeout=10))[0]
            before = len(host.received)
            await comm.send_to(bytes_data=HANDSHAKE + KEY_A + CLICK + FB_REQUEST)
            assert await host.got(b"RFB 003.008\n\x01\x01" + FB_REQUEST)
            assert KEY_A not in bytes(host.received[before:])
            told = await texts(comm)
            assert [m["type"] for m in told] == ["input_refused"] and "view-only" in told[0]["error"]
            await comm.disconnect()
        finally:
            await host.stop()

    async_to_sync(scenario)()
