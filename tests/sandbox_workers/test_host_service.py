"""The sandbox host service through the real thing: a host process, real desktops, the Python client."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import io
import os
import signal
import socket
import time

import aiohttp
import httpx
import psutil
import pytest
from PIL import Image, ImageChops

from agent_core import actions as A
from agent_core.actions import Click, Terminal, Type
from agent_core.agent import AgentConfig, run_episode
from agent_core.policies.base import Policy, PolicyInput, PolicyOutput
from sandbox_workers.agent_env import SandboxEnv
from sandbox_workers.base import EnvError, SandboxError, SandboxPathError
from sandbox_workers.client import HostAuthError, HostClient
from sandbox_workers.host import MAX_UPLOAD
from sandbox_workers.pool import LeaseBroken, LeaseNotFound
from sandbox_workers.providers.confine import disk
from sandbox_workers.reaper import sandbox_root
from tests import sweeps
from tests.agent_core.fakes import prepared
from tests.procs import is_alive as alive
from tests.procs import wait_for
from tests.sandbox_workers.hostproc import LIGHT_DESKTOP, TOKEN, HostProc, host_process, keep_changing
from tests.sandbox_workers.rfbclient import RfbClient
from tests.sandbox_workers.test_disk_quota import HAVE_QUOTAS, leftovers, plant_stray_loops

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def host(tmp_path_factory):
    var = tmp_path_factory.mktemp("host")
    # xterm draws typed text only after a round trip through the shell's pty: on a loaded 2-core CI
    # machine that took longer than the desktop's 25 ms wait for a first change (CI flake), so this
    # host waits up to 150 ms for it, as the office profile does for LibreOffice's bursts.
    profile = {**LIGHT_DESKTOP, "options": {**LIGHT_DESKTOP["options"], "settle_first_ms": 150}}
    with host_process(name="svc", var=var, profiles={"desktop": profile}) as h:
        yield h


@pytest.fixture
def client(host):
    with HostClient(host.url, TOKEN) as c:
        yield c


def changed_pixels(a: bytes, b: bytes) -> int:
    first, second = (Image.open(io.BytesIO(x)).convert("RGB") for x in (a, b))
    diff = ImageChops.difference(first, second)
    return int(diff.convert("L").point(lambda v: 255 if v else 0).histogram()[255])


def test_requests_without_the_token_are_refused(host):
    assert httpx.get(host.url + "/v1/status").status_code == 401
    assert httpx.get(host.url + "/v1/status", headers={"Authorization": "Bearer nope"}).status_code == 401
    with HostClient(host.url, "wrong-token-xxxxxxxx") as bad, pytest.raises(HostAuthError):
        bad.acquire("desktop", holder="t")


def test_act_returns_the_next_screenshot_and_the_shell_sees_what_the_gui_did(host, client):
    with client.acquire("desktop", holder="test:act", ttl_s=60, wait_s=30) as sb:
        before = sb.observe()
        assert (before.screenshot.width, before.screenshot.height) == (1280, 720)
        sb.act(Click(x=640, y=360))
        after = sb.act(Type(content="echo typed-in-xterm > from_gui.txt\n"))
        assert changed_pixels(before.screenshot.data, after.screenshot.data) > 50

        def typed() -> bool:
            return sb.exec("cat from_gui.txt").stdout.strip() == "typed-in-xterm"

        assert wait_for(typed, 5, interval=0.1), sb.exec("cat from_gui.txt")
        sb.put_file("notes/in.txt", b"uploaded")
        assert sb.exec(["cat", "notes/in.txt"]).stdout == "uploaded"
        assert sb.get_file("from_gui.txt") == b"typed-in-xterm\n"
        with pytest.raises(SandboxPathError):
            sb.get_file("../../etc/passwd")
        ran = sb.act(Terminal(command="echo sdk-$((6*7))"))
        assert ran.info["result"]["stdout"] == "sdk-42\n" and ran.info["result"]["exit_code"] == 0
        jpeg = sb.observe(fmt="jpeg", quality=50)
        assert jpeg.screenshot.data[:2] == b"\xff\xd8"


def test_bad_requests_get_typed_errors(host, client):
    with pytest.raises(SandboxError, match="unknown profile 'no-such-profile'; valid: desktop"):
        client.acquire("no-such-profile", holder="t")
    with client.acquire("desktop", holder="test:bad", ttl_s=60, wait_s=30) as sb:
        resp = httpx.post(f"{host.url}/v1/leases/{sb.info.id}/act", json={"action": {"type": "teleport"}},
                          headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        assert resp.status_code == 400 and "unknown action type 'teleport'" in resp.json()["error"]["message"]
        resp = httpx.post(f"{host.url}/v1/leases/{sb.info.id}/act", content=b"{not json",
                          headers={"Authorization": f"Bearer {TOKEN}"})  # fmt: skip
        assert resp.status_code == 400
        result = sb.exec("sleep 5", timeout=0.5)
        assert result.timed_out and result.exit_code is None
    with pytest.raises(LeaseNotFound):
        sb.observe()


def _raw_request(url: str, head: bytes, body: bytes, *, half_close: bool = True) -> bytes:
    """Send a hand-made request (a body shorter than its Content-Length, say), then half-close."""
    host, port = url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=30) as sock:
        sock.sendall(head + f"Authorization: Bearer {TOKEN}\r\n\r\n".encode() + body)
        if half_close:
            sock.shutdown(socket.SHUT_WR)
        answer = b""
        while (half_close or b"\r\n\r\n" not in answer) and (chunk := sock.recv(65536)):
            answer += chunk
    return answer


def test_uploads_and_restores_arrive_whole(host, client):
    with client.acquire("desktop", holder="test:upload", ttl_s=120, wait_s=30) as sb:
        for size in (1 << 20, 10 << 20):
            data = os.urandom(size)
            sb.put_file(f"up/{size}.bin", data)
            digest = hashlib.sha256(data).hexdigest()
            assert hashlib.sha256(sb.get_file(f"up/{size}.bin")).hexdigest() == digest
            assert sb.exec(["sha256sum", f"up/{size}.bin"]).stdout.split()[0] == digest
        blob = sb.snapshot()
        assert len(blob) > 10 << 20  # random bytes do not compress: the restore body is over 10 MB
        sb.put_file("after-snapshot.txt", b"gone after the restore")
        sb.restore(blob)
        assert hashlib.sha256(sb.get_file(f"up/{10 << 20}.bin")).hexdigest() == digest
        with pytest.raises(SandboxPathError):
            sb.get_file("after-snapshot.txt")


def test_uploads_over_the_limit_cut_short_or_corrupt_are_refused_and_change_nothing(host, client):
    with client.acquire("desktop", holder="test:short", ttl_s=120, wait_s=30) as sb:
        files = f"/v1/leases/{sb.info.id}/files?path="
        sb.put_file("kept.txt", b"before")
        blob = sb.snapshot()
        sb.put_file("kept.txt", b"after the snapshot")
        # Declared too large: refused before a byte is read.
        head = f"PUT {files}big.bin HTTP/1.1\r\nHost: x\r\nContent-Length: {MAX_UPLOAD + 1}\r\n".encode()
        answer = _raw_request(host.url, head, b"", half_close=False)
        assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
        # Too large, in chunks (no Content-Length to look at).
        chunk = b"x" * (1 << 20)
        resp = httpx.put(f"{host.url}{files}big.bin", content=iter([chunk] * (MAX_UPLOAD // len(chunk) + 1)),
                         headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)  # fmt: skip
        assert resp.status_code == 413 and resp.json()["error"]["type"] == "too_large"
        resp = httpx.post(f"{host.url}/v1/leases/{sb.info.id}/exec", content=iter([chunk] * 70),
                          headers={"Authorization": f"Bearer {TOKEN}"}, timeout=60)  # fmt: skip
        assert resp.status_code == 413 and resp.json()["error"]["type"] == "too_large"
        # Cut short: the client promised more than it sent.
        head = f"PUT {files}short.bin HTTP/1.1\r\nHost: x\r\nContent-Length: {1 << 20}\r\n".encode()
        answer = _raw_request(host.url, head, os.urandom(100_000))
        assert not answer.startswith((b"HTTP/1.1 2", b"HTTP/1.1 5")), answer[:200]
        head = (f"POST /v1/leases/{sb.info.id}/restore HTTP/1.1\r\nHost: x\r\n"
                f"Content-Length: {len(blob)}\r\n").encode()  # fmt: skip
        answer = _raw_request(host.url, head, blob[: len(blob) // 2])
        assert not answer.startswith((b"HTTP/1.1 2", b"HTTP/1.1 5")), answer[:200]
        # Whole, but not a snapshot: refused before the workspace is wiped.
        with pytest.raises(SandboxError, match="not a snapshot"):
            sb.restore(b"not a snapshot at all")
        for name in ("big.bin", "short.bin"):
            with pytest.raises(SandboxPathError):
                sb.get_file(name)
        assert sb.get_file("kept.txt") == b"after the snapshot"
        sb.restore(blob)
        assert sb.get_file("kept.txt") == b"before"


class Scripted(Policy):
    """Plays the given actions in turn, then finished()."""

    wants_messages = False

    def __init__(self, actions: list[A.Action]) -> None:
        self.actions = list(actions)

    def act(self, inp: PolicyInput) -> PolicyOutput:
        action = self.actions.pop(0) if self.actions else A.Finished()
        return PolicyOutput(actions=(action,), thought="scripted")


def test_a_nul_in_a_path_or_command_is_refused_and_the_sandbox_stays_usable(host, client):
    with client.acquire("desktop", holder="test:nul", ttl_s=120, wait_s=30) as sb:
        for refused in (lambda: sb.get_file("a\x00b"), lambda: sb.put_file("notes/a\x00b", b"x")):
            with pytest.raises(SandboxPathError, match="NUL"):
                refused()
        for command in ("echo a\x00b", ["echo", "a\x00b"]):
            with pytest.raises(SandboxError, match="NUL") as err:
                sb.exec(command)
            assert not isinstance(err.value, EnvError)
        with pytest.raises(SandboxError, match="NUL") as err:
            sb.call("launch", app="xterm", args=["-T", "a\x00b"])
        assert not isinstance(err.value, EnvError)
        assert sb.exec("echo still-here").stdout == "still-here\n"


def test_an_agents_bad_file_or_shell_action_is_an_invalid_step_never_an_env_error(host, client):
    with client.acquire("desktop", holder="test:agent-bad", ttl_s=120, wait_s=30) as sb:
        bad = [
            A.FileRead(path="notes\x00.txt"),
            A.FileWrite(path="a\x00b", content="x"),
            A.Terminal(command="echo \x00"),
            A.FileRead(path="no-such-file.txt"),
            A.FileRead(path="../../etc/passwd"),
            A.Press(key="no-such-key"),
        ]
        good = [A.FileWrite(path="out.txt", content="hi"), A.Terminal(command="cat out.txt")]
        out = run_episode(
            SandboxEnv(sb, platform="desktop"),
            Scripted(bad + good),
            prepared(),
            config=AgentConfig(max_consecutive_invalid=len(bad) + 1),
        )
        invalid = [bool(s.invalid_reason) for s in out.steps]
        assert invalid == [True] * len(bad) + [False] * (len(good) + 1)
        assert all("rejected" in s.invalid_reason for s in out.steps[: len(bad)]), out.steps
        assert out.steps[len(bad) + 1].info["result"]["stdout"] == "hi"
        assert out.stop_reason == "finished" and out.reward == 1.0
        assert sb.exec("echo still-here").stdout == "still-here\n"


WM_ALIVE = "xprop -id $(xprop -root _NET_SUPPORTING_WM_CHECK | awk '{print $5}') _NET_SUPPORTING_WM_CHECK"


def test_an_agent_that_kills_the_window_manager_goes_on_in_a_repaired_sandbox_not_an_env_error(host, client):
    with client.acquire("desktop", holder="test:xkill", ttl_s=120, wait_s=30) as sb:
        kill_wm = "xkill -id $(xprop -root _NET_SUPPORTING_WM_CHECK | awk '{print $5}')"
        actions = [
            A.Terminal(command=kill_wm),
            A.Click(x=640, y=360),
            A.FileWrite(path="out.txt", content="hi"),
            A.Terminal(command=WM_ALIVE),
        ]
        out = run_episode(SandboxEnv(sb, platform="desktop"), Scripted(actions), prepared())
        assert out.stop_reason == "finished" and out.reward == 1.0
        assert all(not s.invalid_reason for s in out.steps), [s.invalid_reason for s in out.steps]
        assert "killing creator" in out.steps[0].info["result"]["stdout"]
        assert out.steps[3].info["result"]["exit_code"] == 0  # a window manager runs again
        state = next(s for s in host.status()["sandboxes"] if s["id"] == sb.info.sandbox_id)
        assert state["lease"]["broken"] is None


def _x11vnc_pid(host: HostProc, sandbox_id: str) -> int:
    return next(p for p in _pids_of(host, sandbox_id) if psutil.Process(p).name() == "x11vnc")


async def _watch(url: str) -> tuple[int, int]:
    """A viewer through the host's VNC relay: handshake, one full screen; its size."""
    headers = {"Authorization": f"Bearer {TOKEN}"}
    async with aiohttp.ClientSession(headers=headers) as s, s.ws_connect(url) as ws:

        async def recv() -> bytes:
            msg = await asyncio.wait_for(ws.receive(), 10)
            assert msg.type == aiohttp.WSMsgType.BINARY, msg
            return bytes(msg.data)

        viewer = RfbClient(ws.send_bytes, recv)
        size = await viewer.handshake()
        await viewer.request(incremental=False)
        await viewer.read_update()
        return size


def test_demonstrations_watched_through_the_vnc_relay_leave_the_desktop_healthy(host, client):
    before = host.status()["counters"]
    for i in range(3):
        with client.acquire("desktop", holder=f"demo:{i}", ttl_s=120, wait_s=60) as sb:
            url = f"{host.url.replace('http', 'ws', 1)}/v1/sandboxes/{sb.info.sandbox_id}/vnc"
            assert asyncio.run(_watch(url)) == (1280, 720)
            sb.act(A.Type(content="echo demo é ✓\n"))
            if i == 1:
                # x11vnc crashing mid-demonstration (it exits 2 on a fatal signal): the desktop
                # restarts it on its port and the demonstration goes on; the viewer reconnects.
                crashed = _x11vnc_pid(host, sb.info.sandbox_id)
                os.kill(crashed, signal.SIGSEGV)
                assert wait_for(lambda pid=crashed: not alive(pid), 10)
                sb.observe()
                assert asyncio.run(_watch(url)) == (1280, 720)
            sb.act(A.Click(x=640, y=360))
        # Released: reset for the next person, with the viewer gone.
    assert wait_for(lambda: host.status()["profiles"]["desktop"]["states"]["idle"] >= 1, 30)
    after = host.status()["counters"]
    assert (after["replaced"], after["start_failed"]) == (before["replaced"], before["start_failed"]), after
    assert not [e for e in host.status()["errors"] if "x11vnc" in e["message"]]


def test_vnc_stream_and_screencast_over_websockets(host, client):
    with client.acquire("desktop", holder="test:live", ttl_s=60, wait_s=30) as sb:
        live = f"{host.url}/v1/sandboxes/{sb.info.sandbox_id}"

        async def go():
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with aiohttp.ClientSession(headers=headers) as s:
                async with s.ws_connect(f"{live}/vnc") as ws:
                    msg = await asyncio.wait_for(ws.receive(), 5)
                    assert msg.data.startswith(b"RFB 003.00")
                await asyncio.to_thread(keep_changing, sb, 2)
                async with s.ws_connect(f"{live}/screencast?fps=10") as ws:
                    frames = [await asyncio.wait_for(ws.receive(), 5) for _ in range(3)]
                    assert all(f.data[:2] == b"\xff\xd8" for f in frames)
            async with aiohttp.ClientSession() as s, s.get(f"{live}/vnc") as r:
                assert r.status == 401

        asyncio.run(go())


def test_a_leases_browser_devtools_are_served_under_a_ticket_one_client_at_a_time_while_it_holds(
    host, client
):
    with client.acquire("desktop", holder="test:devtools", ttl_s=60, wait_s=30) as sb:
        # No browser the host started: no endpoint, and the reason.
        assert sb.call("devtools")["endpoint"] is None
        sb.call("launch", app="chromium", args=["data:text/html,<title>ticketed</title>"], timeout=60)
        endpoint = sb.call("devtools")["endpoint"]
        assert endpoint.startswith(f"{host.url}/v1/devtools/")

        async def go() -> None:
            async with aiohttp.ClientSession() as s:  # no bearer token: the ticket is the credential
                async with s.get(f"{endpoint}/json/version/") as r:
                    assert r.status == 200
                    ws_url = (await r.json())["webSocketDebuggerUrl"]
                async with s.get(endpoint.rsplit("/", 1)[0] + "/not-a-ticket/json/version") as r:
                    assert r.status == 404
                async with s.ws_connect(ws_url) as ws:
                    await ws.send_json({"id": 7, "method": "Target.getTargets"})
                    reply = await asyncio.wait_for(ws.receive_json(), 10)
                    assert reply["id"] == 7
                    pages = [t["url"] for t in reply["result"]["targetInfos"] if t["type"] == "page"]
                    assert any("ticketed" in url for url in pages), reply
                    async with s.ws_connect(ws_url) as second:  # one connection per pipe
                        closed = await asyncio.wait_for(second.receive(), 10)
                        assert closed.type == aiohttp.WSMsgType.CLOSE and closed.data == 1013

        asyncio.run(go())
    # The lease ended: its ticket with it.
    with httpx.Client() as h:
        assert h.get(f"{endpoint}/json/version").status_code == 404


def test_screencast_viewers_of_a_sandbox_share_one_capture_each_at_its_own_rate(host, client):
    with client.acquire("desktop", holder="test:fanout", ttl_s=60, wait_s=30) as sb:
        live = f"{host.url}/v1/sandboxes/{sb.info.sandbox_id}/screencast"
        seen: dict[str, dict] = {}

        widths: set[int] = set()

        async def watch(s: aiohttp.ClientSession, fps: int, seconds: float, size: str = "") -> list[float]:
            at: list[float] = []
            async with s.ws_connect(f"{live}?fps={fps}{size}") as ws:
                end = time.monotonic() + seconds
                while time.monotonic() < end:
                    with contextlib.suppress(TimeoutError):
                        msg = await asyncio.wait_for(ws.receive(), end - time.monotonic())
                        assert msg.data[:2] == b"\xff\xd8"
                        if size:
                            widths.add(Image.open(io.BytesIO(msg.data)).width)
                        at.append(time.monotonic())
            return at

        async def go() -> list[list[float]]:
            headers = {"Authorization": f"Bearer {TOKEN}"}
            await asyncio.to_thread(keep_changing, sb, 3.5)
            async with aiohttp.ClientSession(headers=headers) as s:
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await s.ws_connect(f"{live}?fps=2&width=10")
                assert refused.value.status == 400
                watching = asyncio.gather(watch(s, 10, 3), watch(s, 10, 3), watch(s, 2, 3, "&width=320"))
                await asyncio.sleep(2)
                seen["during"] = (await asyncio.to_thread(host.status))["live"]
                return await watching

        fast1, fast2, thumb = asyncio.run(go())
        during, small = seen["during"][sb.info.sandbox_id], seen["during"][f"{sb.info.sandbox_id}@320"]
        # One capture at the fastest viewer's rate for all: the two full-size viewers and the one
        # scaling for thumbnails of that width, which its viewer gets at its own 2 fps.
        assert (during["viewers"], during["fps"], during["starts"]) == (3, 10, 1), during
        assert (small["viewers"], small["fps"]) == (1, 2), small
        assert len(fast1) >= 10 and len(fast2) >= 10, (len(fast1), len(fast2))
        assert 2 <= len(thumb) <= 7 and widths == {320}, (len(thumb), widths)
        assert wait_for(lambda: host.status()["live"] == {}, 5), host.status()["live"]


def _pids_of(host: HostProc, sandbox_id: str) -> list[int]:
    for s in host.status()["sandboxes"]:
        if s["id"] == sandbox_id:
            return list(s["pids"])
    return []


def test_killing_xvfb_gives_the_holder_an_env_error_within_2_s_and_the_pool_replaces_it(host, client):
    sb = client.acquire("desktop", holder="test:fault", ttl_s=60, wait_s=30)
    state = next(r for r in host.saved_state()["sandboxes"] if r["id"] == sb.info.sandbox_id)
    xvfb = int(state["provider_state"]["xvfb"][1])  # [name, pid, start time, …]
    os.kill(xvfb, signal.SIGKILL)
    killed = time.monotonic()
    with pytest.raises(EnvError) as err:
        while True:
            sb.observe()
            assert time.monotonic() - killed < 2, "no env error within 2 s"
            time.sleep(0.05)
    assert time.monotonic() - killed < 2
    assert isinstance(err.value, LeaseBroken)

    def replaced() -> bool:
        status = host.status()
        ids = {s["id"] for s in status["sandboxes"]}
        return sb.info.sandbox_id not in ids and status["profiles"]["desktop"]["states"]["idle"] >= 1

    assert wait_for(replaced, 30, interval=0.2), host.status()
    sb.release()  # releasing the broken lease is allowed


def test_restarting_the_host_keeps_live_sandboxes_and_leases_and_leaves_nothing_behind(tmp_path):
    host = HostProc(name="restart", var=tmp_path, profiles={"desktop": LIGHT_DESKTOP})
    pool = sandbox_root(host.var / host.name)
    host.start()
    try:
        with HostClient(host.url, TOKEN) as c:
            sb = c.acquire("desktop", holder="episode:restart", ttl_s=120)
            sb.exec("echo before-restart > marker.txt")
        status = host.status()
        pids = [p for s in status["sandboxes"] for p in s["pids"]]
        assert pids
        assert status["disk_quota"] == {"enabled": HAVE_QUOTAS, "reason": status["disk_quota"]["reason"]}
        host.kill9()
        assert all(alive(p) for p in pids), "sandboxes must outlive a crashed host process"
        if HAVE_QUOTAS:
            # Their disk volumes too; what a host killed while it made one left is swept at the next start.
            assert disk.mounted_source(pool / sb.info.sandbox_id) is not None
            plant_stray_loops(pool)
        host.start()
        with HostClient(host.url, TOKEN) as c:
            again = c.lease(sb.info)
            assert again.exec("cat marker.txt").stdout == "before-restart\n"
            again.act(Click(x=10, y=10))
            pids = [p for s in host.status()["sandboxes"] for p in s["pids"]]

        async def stop_while_watched() -> aiohttp.WSMessage:
            """A viewer is connected when the host stops: its socket is closed (1001), not waited on."""
            live = f"{host.url}/v1/sandboxes/{sb.info.sandbox_id}/vnc"
            headers = {"Authorization": f"Bearer {TOKEN}"}
            async with aiohttp.ClientSession(headers=headers) as s, s.ws_connect(live) as ws:
                assert (await asyncio.wait_for(ws.receive(), 5)).data.startswith(b"RFB 003.00")
                await asyncio.get_running_loop().run_in_executor(None, host.stop)
                return await asyncio.wait_for(ws.receive(), 5)

        closing = asyncio.run(stop_while_watched())
        assert closing.type == aiohttp.WSMsgType.CLOSE and closing.data == 1001, closing
        assert host.proc is not None and host.proc.returncode == 0, "the host had to be killed"
    finally:
        host.stop()
    assert wait_for(lambda: not any(alive(p) for p in pids), 10, interval=0.1), [p for p in pids if alive(p)]
    assert not leftovers(pool), "sandbox disks (volumes, images, loop devices) outlived the host"


@pytest.mark.sweep
def test_acquire_release_expire_cycles_leave_no_orphans_and_flat_memory(tmp_path):
    """500 cycles in `make verify-suites`, 100 in `make test` (memory sampled every 50 either way)."""
    import psutil

    cycles = 500 if sweeps.FULL else 100
    profiles = {"desktop": {**LIGHT_DESKTOP, "min_idle": 2, "max_total": 3}}
    host = HostProc(name="cycles", var=tmp_path, profiles=profiles)
    host.start()
    seen: set[int] = set()
    rss: list[int] = []
    try:
        proc = psutil.Process(host.proc.pid)
        with HostClient(host.url, TOKEN) as c:
            for i in range(cycles):
                if i % 50 == 0:
                    rss.append(proc.memory_info().rss)
                sb = c.acquire("desktop", holder=f"cycle:{i}", ttl_s=0.3 if i % 10 == 9 else 60, wait_s=30)
                if i % 10 == 9:  # let it expire: the reaper takes it back
                    time.sleep(0.9)
                    with pytest.raises(LeaseNotFound):
                        sb.observe()
                    continue
                sb.act(Click(x=5 + i % 100, y=5))
                sb.release(recycle=i % 25 == 24)
                if i % 25 == 0:
                    seen.update(p for s in host.status()["sandboxes"] for p in s["pids"])
            rss.append(proc.memory_info().rss)
            live = {p for s in host.status()["sandboxes"] for p in s["pids"]}
            seen |= live
            counters = host.status()["counters"]
    finally:
        host.stop()
    orphans = [p for p in seen - live if alive(p)]
    assert not orphans, f"processes of recycled sandboxes still alive: {orphans}"
    recycled = sum(1 for i in range(cycles) if i % 25 == 24 and i % 10 != 9)
    assert counters["expired"] == cycles // 10 and counters["recycled"] == recycled, counters
    growth_mib = (rss[-1] - rss[1]) / 2**20
    print(f"host RSS: {[round(r / 2**20) for r in rss]} MiB; growth after warm-up {growth_mib:.1f} MiB")
    assert growth_mib < 40, rss
    assert wait_for(lambda: not any(alive(p) for p in seen), 10, interval=0.1), [p for p in seen if alive(p)]
