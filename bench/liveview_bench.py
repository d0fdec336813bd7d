"""Live view: how fast a screen change reaches a viewer, and what many viewers of one sandbox cost.

    python bench/liveview_bench.py [--changes 30] [--viewers 1,10,20] [--seconds 8] [--webrtc-viewers 1,5]

Starts its own pieces on a throwaway SQLite database: daphne serving the web app (the real ASGI app,
the real Redis channel layer at REDIS_URL), a sandbox host with one light desktop (xterm) that
heartbeats into it, and viewers in this process that go through the web app's relays exactly as a
browser does (session cookie + ticket):

- noVNC path: a minimal RFB client (Raw encoding, always one incremental update request in flight,
  as noVNC does) over /ws/sandboxes/<pk>/vnc/ → daphne → host /vnc → x11vnc.
- WebRTC path: an aiortc client; daphne's aiortc peer encodes the host's screencast (JPEG at 30 fps).

Latency: the bench changes the root window's colour by running `xsetroot -solid` against the
sandbox's X display directly (not through the host's exec API: that holds the sandbox's one worker
thread, which the screencast also needs) and times until a viewer's pixel in the bottom-right corner
(root window, away from the xterm) has the new colour. Two bounds are printed: from just before
starting xsetroot (an upper bound: includes starting the process) and from its exit (xsetroot has
flushed its requests to the X server by then; a lower bound, ≤ 0 when the pixels win the race).

Throughput: while a loop changes the colour every ~30 ms, N viewers watch for --seconds; prints
updates (frames) per second per viewer and the CPU of daphne and of the host (with its children:
Xvfb, x11vnc, the sandbox) over that window.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import secrets
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import aiohttp  # noqa: E402
import psutil  # noqa: E402

from sandbox_workers.stats import percentile  # noqa: E402
from tests.procs import free_port, port_open, process, wait_for  # noqa: E402
from tests.sandbox_workers.rfbclient import RfbClient  # noqa: E402

TOKEN = "bench-live-token-0123456789abcdef"  # noqa: S105 (a throwaway host of this run)
PROFILES = {
    "desktop": {"provider": "xdesktop", "min_idle": 1, "max_total": 1, "options": {"apps": ["xterm"]}}
}


def colour(i: int) -> tuple[int, int, int]:
    return (40 + (i * 53) % 200, 40 + (i * 97) % 200, 40 + (i * 31) % 200)


def hexcolour(c: tuple[int, int, int]) -> str:
    return "#{:02x}{:02x}{:02x}".format(*c)


def close(a: tuple[int, int, int], b: tuple[int, int, int], tol: int) -> bool:
    return all(abs(x - y) <= tol for x, y in zip(a, b, strict=True))


class Site:
    """daphne + a host on a throwaway database; tickets issued in this process (same DB and secret)."""

    def __init__(self, var: Path) -> None:
        self.var = var
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        os.environ.update(
            DJANGO_SETTINGS_MODULE="webapp.settings",
            DATABASE_URL=f"sqlite:///{var / 'bench.sqlite3'}",
            FLYWHEEL_VAR_DIR=str(var),
            SECRET_KEY=os.environ.get("SECRET_KEY", "bench-" + secrets.token_hex(24)),
            SANDBOX_HOST_TOKEN=TOKEN,
            DEBUG="0",
            SECURE_COOKIES="0",
            CHANNELS_PREFIX="bench-live-" + secrets.token_hex(4),
        )
        import django

        django.setup()
        from django.contrib.auth import get_user_model
        from django.core.management import call_command
        from django.test import Client

        call_command("migrate", verbosity=0)
        self.user = get_user_model().objects.create_superuser("bench", "bench@example.org", "x")
        client = Client()
        client.force_login(self.user)
        from django.conf import settings

        self.session_key = client.cookies[settings.SESSION_COOKIE_NAME].value
        self.cookie = f"{settings.SESSION_COOKIE_NAME}={self.session_key}"

    def ticket_url(self, sandbox: Any, transport: str, fps: int | None = None) -> str:
        from webapp.sandboxes.tickets import ticket_issue

        t = ticket_issue(user=self.user, session_key=self.session_key, sandbox=sandbox, mode="view",
                         transport=transport)  # fmt: skip
        extra = f"&fps={fps}" if fps else ""
        return f"ws://127.0.0.1:{self.port}/ws/sandboxes/{sandbox.pk}/{transport}/?ticket={t}{extra}"

    def headers(self) -> dict[str, str]:
        return {"Cookie": self.cookie, "Origin": self.url}


async def vnc_viewer(site: Site, sandbox: Any, session: aiohttp.ClientSession):
    ws = await session.ws_connect(site.ticket_url(sandbox, "vnc"), headers=site.headers(), max_msg_size=0)

    async def recv() -> bytes:
        msg = await ws.receive()
        if msg.type != aiohttp.WSMsgType.BINARY:
            raise ConnectionError(f"relay closed: {msg.type} {msg.data}")
        return bytes(msg.data)

    rfb = RfbClient(ws.send_bytes, recv)
    await rfb.handshake()
    await rfb.request(incremental=False)
    await rfb.read_update()
    return ws, rfb


async def vnc_watch(rfb: RfbClient, on_update) -> None:
    """Keep one incremental request in flight, as noVNC does; call on_update() after each update."""
    while True:
        await rfb.request(incremental=True)
        await rfb.read_update()
        on_update()


async def webrtc_viewer(site: Site, sandbox: Any, session: aiohttp.ClientSession):
    from aiortc import RTCPeerConnection, RTCSessionDescription

    ws = await session.ws_connect(site.ticket_url(sandbox, "webrtc", fps=30), headers=site.headers())
    pc = RTCPeerConnection()
    pc.addTransceiver("video", direction="recvonly")
    got: asyncio.Future = asyncio.get_running_loop().create_future()
    pc.on("track", lambda track: got.done() or got.set_result(track))
    await pc.setLocalDescription(await pc.createOffer())
    await ws.send_str(json.dumps({"type": "offer", "sdp": pc.localDescription.sdp}))
    answer = json.loads((await ws.receive()).data)
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer["sdp"], type="answer"))
    track = await asyncio.wait_for(got, timeout=30)
    return ws, pc, track


def corner(frame: Any) -> tuple[int, int, int]:
    plane = frame.to_ndarray(format="rgb24")
    r, g, b = plane[-4, -4]
    return int(r), int(g), int(b)


def set_root(display: str, c: tuple[int, int, int]) -> None:
    subprocess.run(["xsetroot", "-solid", hexcolour(c)], env={**os.environ, "DISPLAY": display}, check=True)


async def latency(site: Site, sandbox: Any, display: str, changes: int, path: str) -> dict[str, list[float]]:
    loop = asyncio.get_running_loop()
    upper: list[float] = []
    lower: list[float] = []
    async with aiohttp.ClientSession() as session:
        if path == "vnc":
            ws, rfb = await vnc_viewer(site, sandbox, session)
            seen = asyncio.Event()
            target: dict[str, Any] = {}

            def check() -> None:
                if "c" in target and rfb.pixel(rfb.width - 4, rfb.height - 4) == target["c"]:
                    target.setdefault("at", time.perf_counter())
                    seen.set()

            watcher = asyncio.create_task(vnc_watch(rfb, check))
        else:
            ws, pc, track = await webrtc_viewer(site, sandbox, session)
            seen = asyncio.Event()
            target = {}

            async def frames() -> None:
                while True:
                    frame = await track.recv()
                    if "c" in target and close(corner(frame), target["c"], 40):
                        target.setdefault("at", time.perf_counter())
                        seen.set()

            watcher = asyncio.create_task(frames())
            await asyncio.sleep(2)  # let the first keyframe through
        try:
            for i in range(changes):
                c = colour(i + (0 if path == "vnc" else 1000))
                target.clear()
                seen.clear()
                target["c"] = c
                t0 = time.perf_counter()
                await loop.run_in_executor(None, lambda c=c: set_root(display, c))
                t1 = time.perf_counter()
                try:
                    await asyncio.wait_for(seen.wait(), timeout=5)
                except TimeoutError:
                    print(f"  {path}: change {i} never arrived", flush=True)
                    continue
                upper.append((target["at"] - t0) * 1000)
                lower.append((target["at"] - t1) * 1000)
                await asyncio.sleep(0.1)
        finally:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)
            if path == "webrtc":
                await pc.close()
            await ws.close()
    return {"upper": upper, "lower": lower}


def cpu_of(procs: list[psutil.Process]) -> float:
    total = 0.0
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def tree(pid: int) -> list[psutil.Process]:
    p = psutil.Process(pid)
    return [p, *p.children(recursive=True)]


async def throughput(site: Site, sandbox: Any, display: str, n: int, seconds: float, path: str,
                     daphne_pid: int, host_pid: int) -> dict[str, float]:  # fmt: skip
    loop = asyncio.get_running_loop()
    counts = [0] * n
    viewers: list[Any] = []
    tasks: list[asyncio.Task[None]] = []
    async with aiohttp.ClientSession() as session:
        for k in range(n):
            if path == "vnc":
                ws, rfb = await vnc_viewer(site, sandbox, session)
                viewers.append((ws, None))

                def bump(k: int = k) -> None:
                    counts[k] += 1

                tasks.append(asyncio.create_task(vnc_watch(rfb, bump)))
            else:
                ws, pc, track = await webrtc_viewer(site, sandbox, session)
                viewers.append((ws, pc))

                async def count(track: Any = track, k: int = k) -> None:
                    while True:
                        await track.recv()
                        counts[k] += 1

                tasks.append(asyncio.create_task(count()))
        await asyncio.sleep(2)
        stop = time.perf_counter() + seconds + 2

        def change() -> None:
            i = 0
            while time.perf_counter() < stop:
                set_root(display, colour(i))
                i += 1
                time.sleep(0.03)

        changer = loop.run_in_executor(None, change)
        await asyncio.sleep(1)
        daphne, host = tree(daphne_pid), tree(host_pid)
        c0 = [0] * n
        c0[:] = counts
        d0, h0, t0 = cpu_of(daphne), cpu_of(host), time.perf_counter()
        await asyncio.sleep(seconds)
        d1, h1, t1 = cpu_of(daphne), cpu_of(host), time.perf_counter()
        fps = [(counts[k] - c0[k]) / (t1 - t0) for k in range(n)]
        await changer
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for ws, pc in viewers:
            if pc is not None:
                await pc.close()
            await ws.close()
    cores = psutil.cpu_count() or 1
    return {
        "fps_mean": statistics.mean(fps),
        "fps_min": min(fps),
        "daphne_cpu": 100 * (d1 - d0) / (t1 - t0),
        "host_cpu": 100 * (h1 - h0) / (t1 - t0),
        "cores": cores,
    }


def ms(values: list[float]) -> str:
    if not values:
        return "no samples"
    return (f"p50 {percentile(values, 50):7.1f} ms  p95 {percentile(values, 95):7.1f} ms  "
            f"(n={len(values)})")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--changes", type=int, default=30)
    parser.add_argument("--viewers", default="1,10,20", help="VNC viewer counts")
    parser.add_argument("--webrtc-viewers", default="1,5", help="WebRTC viewer counts (each decodes here)")
    parser.add_argument("--seconds", type=float, default=8.0)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    for noisy in ("aioice", "aiortc", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    var = Path(tempfile.mkdtemp(prefix="liveview-bench-"))
    site = Site(var)
    from sandbox_workers.client import HostClient
    from webapp.sandboxes.models import Sandbox

    daphne_args = [str(Path(sys.executable).parent / "daphne"), "-b", "127.0.0.1", "-p", str(site.port),
                   "webapp.asgi:application"]  # fmt: skip
    host_port = free_port()
    host_args = [sys.executable, "-m", "sandbox_workers.host", "--port", str(host_port),
                 "--name", "bench-live", "--var-dir", str(var / "host"), "--profiles", json.dumps(PROFILES),
                 "--slot-base", "160",
                 "--web-url", site.url, "--heartbeat", "1"]  # fmt: skip
    env = os.environ.copy()
    with (
        process(daphne_args, ready=port_open(site.port), env=env, log_path=var / "daphne.log") as daphne,
        process(
            host_args, ready=port_open(host_port), env=env, log_path=var / "host.log", timeout=90
        ) as host,
    ):
        assert wait_for(lambda: Sandbox.objects.filter(state="idle", endpoints__has_key="vnc").exists(),
                        timeout=120, interval=0.3), f"no sandbox registered (logs in {var})"  # fmt: skip
        with HostClient(f"http://127.0.0.1:{host_port}", TOKEN) as client:
            leased = client.acquire("desktop", holder="bench", ttl_s=3600)
            sandbox = Sandbox.objects.get(external_id=leased.info.sandbox_id)
            display = str(sandbox.endpoints["display"])
            shot = leased.observe(fmt="png").screenshot
            print(f"live view bench: one light desktop {shot.width}x{shot.height}, daphne + host on "
                  f"{psutil.cpu_count()} cores; viewers in this process\n")  # fmt: skip
            print("screen change (xsetroot) -> pixels at the viewer")
            for path in ("vnc", "webrtc"):
                lat = asyncio.run(latency(site, sandbox, display, args.changes, path))
                name = "noVNC relay (RFB Raw)" if path == "vnc" else "WebRTC (aiortc, VP8)"
                print(f"  {name:24s} from before xsetroot  {ms(lat['upper'])}")
                print(f"  {'':24s} from xsetroot exit    {ms(lat['lower'])}")
            print("\nmany viewers of one sandbox (screen changing every ~30 ms)")
            plans = [("vnc", int(n)) for n in args.viewers.split(",") if n]
            plans += [("webrtc", int(n)) for n in args.webrtc_viewers.split(",") if n]
            for path, n in plans:
                r = asyncio.run(
                    throughput(site, sandbox, display, n, args.seconds, path, daphne.pid, host.pid)
                )
                print(f"  {path:6s} {n:3d} viewer(s): {r['fps_mean']:5.1f} fps per viewer"
                      f" (min {r['fps_min']:5.1f})  daphne CPU {r['daphne_cpu']:5.0f}%"
                      f"  host+sandbox CPU {r['host_cpu']:5.0f}%"
                      f"  (100% = one core)", flush=True)  # fmt: skip
            leased.release()
    print(f"\nlogs: {var}")


if __name__ == "__main__":
    main()
