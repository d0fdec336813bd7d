"""A sandbox is clean when it is leased, and only the host reaches its VNC: through a real host process
with ONE light desktop (so every lease lands on the desktop that was planted on), the host's VNC relay
and the host's client. The pool's rules alone, with a fake provider: test_pool_clean.py."""

from __future__ import annotations

import asyncio
import io
import os
import shutil
import struct
import subprocess
from pathlib import Path
from typing import Any

import aiohttp
import psutil
import pytest
from PIL import Image, ImageChops

from agent_core.actions import Click, Type
from sandbox_workers.base import SandboxError
from sandbox_workers.client import HostClient, LeasedSandbox
from sandbox_workers.pool import SandboxUnavailable
from tests.procs import wait_for
from tests.sandbox_workers.hostproc import LIGHT_DESKTOP, TOKEN, HostProc, keep_changing
from tests.sandbox_workers.rfbclient import RfbClient

pytestmark = pytest.mark.slow

ONE_DESKTOP = {**LIGHT_DESKTOP, "min_idle": 1, "max_total": 1}
RETURN = 0xFF0D


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Any:
    h = HostProc(name="clean", var=tmp_path_factory.mktemp("clean"), profiles={"desktop": ONE_DESKTOP},
                 slot_base=160)  # fmt: skip
    h.start()
    try:
        yield h
    finally:
        h.stop()


@pytest.fixture(scope="module")
def client(host: HostProc) -> Any:
    with HostClient(host.url, TOKEN) as c:
        yield c


@pytest.fixture(scope="module")
def fresh_screen(client: HostClient) -> Image.Image:
    """The desktop's screen as a fresh sandbox shows it (the first lease's, before anything ran)."""
    with client.acquire("desktop", holder="test:baseline", ttl_s=120, wait_s=60) as sb:
        return screen(sb)


def screen(sb: LeasedSandbox) -> Image.Image:
    return Image.open(io.BytesIO(sb.observe().screenshot.data)).convert("RGB")


def looks_fresh(sb: LeasedSandbox, fresh: Image.Image) -> bool:
    """Whether the screen becomes what a fresh desktop shows (xterm may still be drawing its prompt)."""
    return wait_for(lambda: ImageChops.difference(screen(sb), fresh).getbbox() is None, 15, interval=0.2)


def the_sandbox(host: HostProc) -> dict[str, Any]:
    (sandbox,) = host.status()["sandboxes"]
    return dict(sandbox)


def workspace_of(sandbox: dict[str, Any]) -> Path:
    """The desktop's workspace as its xterm sees it (through /proc/PID/root, from the host)."""
    xterm = next(p for p in sandbox["pids"] if psutil.Process(p).name() == "xterm")
    return Path(f"/proc/{xterm}/root/home/user")


async def vnc_viewer(
    host: HostProc, sandbox_id: str, session: aiohttp.ClientSession
) -> tuple[Any, RfbClient]:
    """A viewer on the host's VNC relay of the sandbox, past the handshake and a first full screen."""
    ws = await session.ws_connect(f"{host.url.replace('http', 'ws', 1)}/v1/sandboxes/{sandbox_id}/vnc")

    async def recv() -> bytes:
        msg = await asyncio.wait_for(ws.receive(), 30)
        assert msg.type == aiohttp.WSMsgType.BINARY, msg
        return bytes(msg.data)

    viewer = RfbClient(ws.send_bytes, recv)
    await viewer.handshake()
    await viewer.request(incremental=False)
    await viewer.read_update()
    return ws, viewer


async def type_keys(viewer: RfbClient, text: str) -> None:
    """Click into the middle of the screen (the xterm) and type `text` (\\n is Return) as RFB keys."""
    await viewer.pointer(640, 360, 1)
    await viewer.pointer(640, 360, 0)
    for ch in text:
        keysym = RETURN if ch == "\n" else ord(ch)
        await viewer.key(keysym, True)
        await viewer.key(keysym, False)


async def cut_text(ws: Any, text: bytes) -> None:
    """A ClientCutText: the viewer's clipboard, which x11vnc puts on the X server (CUT_BUFFER0)."""
    await ws.send_bytes(struct.pack(">BxxxI", 6, len(text)) + text)


def test_a_file_planted_through_vnc_on_an_idle_desktop_is_gone_in_the_next_lease(
    host: HostProc, client: HostClient, fresh_screen: Image.Image
) -> None:
    """The issue's case: a control ticket's raw RFB on an idle desktop planted a file, with the command
    still on screen, in the next person's demonstration."""
    assert wait_for(lambda: the_sandbox(host)["state"] == "idle", 60)
    planted_on = the_sandbox(host)
    planted = workspace_of(planted_on) / "planted.txt"
    seen: dict[str, Any] = {}

    async def scenario() -> None:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as session:
            ws, viewer = await vnc_viewer(host, planted_on["id"], session)
            await type_keys(viewer, "echo planted-through-vnc > planted.txt\n")
            await cut_text(ws, b"planted-clipboard")
            assert await asyncio.to_thread(wait_for, planted.exists, 20), "the typed command made no file"
            seen["while_held"] = await asyncio.to_thread(the_sandbox, host)
            # Held for whoever is on it: no lease gets it while their stream is open...
            with pytest.raises(SandboxUnavailable, match="touched outside a lease"):
                await asyncio.to_thread(client.acquire, "desktop", holder="test:no-wait", ttl_s=60)
            # ...until a lease that waits needs it: reset first, and the stream is ended.
            seen["lease"] = await asyncio.to_thread(
                client.acquire, "desktop", holder="test:next", ttl_s=120, wait_s=60
            )
            closing = await asyncio.wait_for(ws.receive(), 30)
            while closing.type == aiohttp.WSMsgType.BINARY:
                closing = await asyncio.wait_for(ws.receive(), 30)
            seen["closed"] = (closing.type, closing.data)
            await ws.close()

    asyncio.run(scenario())
    sb: LeasedSandbox = seen["lease"]
    with sb:
        assert sb.info.sandbox_id == planted_on["id"]
        assert sb.exec(["test", "-e", "planted.txt"]).exit_code == 1, "the planted file is in the next lease"
        assert looks_fresh(sb, fresh_screen), "the next lease's screen is not a fresh desktop's"
        assert "not found" in sb.exec("xprop -root CUT_BUFFER0").stdout, "the planted clipboard survived"
        assert sb.info.clean["by"] == "reset" and "VNC input" in sb.info.clean["dirty"], sb.info.clean
    assert seen["while_held"].get("dirty") == "VNC input outside a lease", seen["while_held"]
    assert seen["closed"] == (aiohttp.WSMsgType.CLOSE, 4409), seen["closed"]
    assert host.status()["counters"]["dirty_resets"] >= 1


def test_what_a_holder_leaves_by_every_path_is_gone_for_the_next_holder(
    host: HostProc, client: HostClient, fresh_screen: Image.Image
) -> None:
    """A released lease: files (workspace, /tmp, an upload), a process left running, what the GUI did,
    VNC input under the lease, and the X server's own state (root window, keyboard map, Caps Lock, its
    access list) are gone for the next holder of the same desktop."""
    first = client.acquire("desktop", holder="test:planter", ttl_s=120, wait_s=60)
    with first:
        first.exec("echo x > exec.txt; echo x > /tmp/exec-tmp.txt; (setsid sleep 6001 >/dev/null 2>&1 &)")
        first.put_file("uploaded.bin", b"planted")
        first.act(Click(x=640, y=360))
        first.act(Type(content="echo planted-by-act > act.txt\n"))

        async def under_the_lease() -> None:
            async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as session:
                ws, viewer = await vnc_viewer(host, first.info.sandbox_id, session)
                await type_keys(viewer, "echo vnc > vnc.txt\n")
                await viewer.request(incremental=False)
                await viewer.read_update()
                await ws.close()

        asyncio.run(under_the_lease())
        assert wait_for(lambda: first.exec("cat act.txt vnc.txt").exit_code == 0, 20)
        assert the_sandbox(host).get("dirty") is None, "input under a lease is its holder's, not a touch"
        assert sleepers(), "the background process did not start"
        # Last, what changes the X server itself (typing after it would type other letters).
        first.exec(
            "xsetroot -solid '#ff0000'; xprop -root -f PLANTED 8s -set PLANTED yes; xhost +; "
            "xmodmap -e 'keycode 38 = z'; xdotool key Caps_Lock"
        )
    with client.acquire("desktop", holder="test:next-holder", ttl_s=120, wait_s=60) as sb:
        assert sb.info.sandbox_id == first.info.sandbox_id
        left = sb.exec("ls -A ~ /tmp; xprop -root PLANTED; xhost").stdout
        for name in ("exec.txt", "exec-tmp.txt", "uploaded.bin", "act.txt", "vnc.txt"):
            assert name not in left, left
        assert "PLANTED(" not in left and "access control enabled" in left, left
        assert "SI:localuser" in left and "INET" not in left, left
        assert not sleepers(), "a process of the last holder is still running"
        assert looks_fresh(sb, fresh_screen), "the root window or a window of the last holder is on screen"
        sb.act(Click(x=640, y=360))
        sb.act(Type(content="echo a > kb.txt\n"))
        assert wait_for(lambda: sb.exec("cat kb.txt").stdout == "a\n", 10), sb.exec("cat kb.txt")
        assert (sb.info.clean["why"], sb.info.clean["dirty"]) == ("released", None), sb.info.clean


def sleepers() -> list[int]:
    """The host pids of the `sleep 6001` a holder left running."""
    return [p.pid for p in psutil.process_iter(["name", "cmdline"])
            if p.info["name"] == "sleep" and "6001" in (p.info["cmdline"] or [])]  # fmt: skip


def as_user(uid: int, argv: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", *argv],
                          capture_output=True, text=True, timeout=30)  # fmt: skip


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_no_other_local_user_can_reach_a_desktops_vnc_or_its_x_server(host: HostProc) -> None:
    """x11vnc has no TCP port; its socket, the X server (its abstract socket, which a network-profile
    sandbox shares, included) and the sandbox's files refuse `nobody` and another sandbox's uid."""
    assert wait_for(lambda: the_sandbox(host)["state"] in ("idle", "leased"), 60)
    sandbox = the_sandbox(host)
    x11vnc = [psutil.Process(p) for p in sandbox["pids"] if psutil.Process(p).name() == "x11vnc"]
    assert x11vnc and not x11vnc[0].net_connections(kind="inet"), "x11vnc listens on a network port"
    vnc_socket, display = sandbox["endpoints"]["vnc"]["socket"], sandbox["endpoints"]["display"]
    probe = f"import socket; s = socket.socket(socket.AF_UNIX); s.connect({vnc_socket!r}); print(s.recv(4))"
    another_sandbox = 200000 + 99999
    for uid in (65534, another_sandbox):
        refused = as_user(uid, ["/usr/bin/python3", "-c", probe])
        assert refused.returncode != 0 and "PermissionError" in refused.stderr, refused
        x = as_user(uid, ["xprop", "-display", display, "-root"])
        assert x.returncode != 0 and "Authorization required" in x.stderr, x
        # Nor into its files: its workspace to read, its (world-writable) /tmp to plant in.
        root = Path(vnc_socket).parent.parent
        files = as_user(uid, ["sh", "-c", f"ls {root / 'home'} || touch {root / 'tmp' / 'planted'}"])
        assert files.returncode != 0 and not (root / "tmp" / "planted").exists(), files
    # The host's own user gets in (its relay and captures run as it).
    assert subprocess.run(["xprop", "-display", display, "-root"], capture_output=True).returncode == 0


def test_a_screencast_viewer_goes_on_watching_across_the_reset_between_two_leases(
    host: HostProc, client: HostClient
) -> None:
    """A reset starts a new X server; the one capture every screencast viewer shares moves to it."""
    assert wait_for(lambda: the_sandbox(host)["state"] == "idle", 60)
    sandbox_id = the_sandbox(host)["id"]

    async def scenario() -> int:
        async with aiohttp.ClientSession(headers={"Authorization": f"Bearer {TOKEN}"}) as session:
            live = f"{host.url.replace('http', 'ws', 1)}/v1/sandboxes/{sandbox_id}/screencast?fps=10"
            async with session.ws_connect(live) as ws:
                assert (await asyncio.wait_for(ws.receive(), 30)).data[:2] == b"\xff\xd8"
                first = await asyncio.to_thread(
                    client.acquire, "desktop", holder="t:cast", ttl_s=60, wait_s=60
                )
                await asyncio.to_thread(first.release)
                second = await asyncio.to_thread(
                    client.acquire, "desktop", holder="t:cast2", ttl_s=60, wait_s=60
                )
                with second:
                    while True:  # what came before the next holder's changes (a still screen sends none)
                        try:
                            await asyncio.wait_for(ws.receive(), 1.0)
                        except TimeoutError:
                            break
                    await asyncio.to_thread(keep_changing, second, 3)
                    frames = 0
                    while frames < 5:  # frames of the new display, while the next holder's screen changes
                        msg = await asyncio.wait_for(ws.receive(), 20)
                        assert msg.type == aiohttp.WSMsgType.BINARY and msg.data[:2] == b"\xff\xd8", msg
                        frames += 1
                    return frames

    assert asyncio.run(scenario()) == 5


def test_a_report_that_an_idle_desktop_was_touched_has_it_reset_before_its_next_lease(
    host: HostProc, client: HostClient
) -> None:
    """An admin's shell, say: the web app (or an operator) reports it through the host's API."""
    assert wait_for(lambda: the_sandbox(host)["state"] == "idle", 60)
    sandbox_id = the_sandbox(host)["id"]
    with pytest.raises(SandboxError, match="reason"):
        client.mark_dirty(sandbox_id, "")
    answer = client.mark_dirty(sandbox_id, "an admin's shell")
    assert answer["marked"] is True and answer["dirty"] == "an admin's shell", answer
    with client.acquire("desktop", holder="test:after-report", ttl_s=60, wait_s=60) as sb:
        assert sb.info.sandbox_id == sandbox_id
        assert sb.info.clean["dirty"] == "an admin's shell", sb.info.clean
        # Leased: a report changes nothing (the lease ends in a reset anyway).
        assert client.mark_dirty(sandbox_id, "an admin's shell")["marked"] is False
