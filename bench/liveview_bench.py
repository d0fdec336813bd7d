"""Live view: how fast a screen change reaches viewers, and what many viewers cost.

    python bench/liveview_bench.py [--viewers 1,10,20,50] [--changes 200] [--seconds 8] [--wall 32]
                                   [--transport screencast] [--python-clients]

Starts its own pieces on a throwaway SQLite database: daphne serving the web app (the real ASGI app,
the real Redis channel layer at REDIS_URL, collected static files) and a sandbox host with one light
desktop (xterm) that heartbeats into it. The viewers are real headless Chromium pages (one browser)
opening the product's live page (`/sandboxes/<pk>/live/?transport=…`), so each one runs the product's
live-view component; bench/liveview_pages.py instruments them to time when pixels land.

- Changes: the bench sets the root window's colour against the sandbox's X display directly (one
  persistent X connection; it returns once the X server has processed the change, XSync) and times
  until each viewer's canvas (or video frame) has the new colour in the bottom-right corner (the root
  window, away from the xterm): from the change in the X server to the drawImage that put the pixels
  in the viewer's canvas. A series of --changes changes, one every --interval s; a change no frame of
  a viewer ever showed within 3 s is counted missing for that viewer.
- Throughput: while a loop changes the colour every ~30 ms, the pages draw for --seconds; frames per
  second per viewer (min and median), and the CPU of daphne, of the host (with Xvfb, x11vnc and the
  sandbox) and of Chromium (the viewers, for scale) over that window. 100 % is one core.
- Wall: a second host with --wall desktops, each changing colour every second; one page of the wall
  (thumbnails at 2 fps) for --seconds: the longest time any thumbnail went without a frame.

--python-clients adds the earlier figures from viewers in this process (a minimal RFB client over the
noVNC relay, and aiortc WebRTC clients)."""

from __future__ import annotations

import argparse
import asyncio
import concurrent.futures
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
from tests.procs import free_port, port_open, process, redis_for_broadcasts, wait_for  # noqa: E402
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
            DJANGO_ALLOW_ASYNC_UNSAFE="1",  # the ORM beside Playwright's sync API (its loop in this thread)
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


class Painter:
    """Sets a display's root window colour over one persistent X connection: starting xsetroot for
    each change takes tens of ms on a loaded machine (hundreds with 50 browser pages), which would
    slow the changes themselves. `paint` returns once the X server has processed the change (XSync)."""

    def __init__(self, display: str) -> None:
        from Xlib import display as xdisplay

        self.d = xdisplay.Display(display)
        self.root = self.d.screen().root

    def paint(self, c: tuple[int, int, int]) -> None:
        r, g, b = c
        self.root.change_attributes(background_pixel=(r << 16) | (g << 8) | b)
        self.root.clear_area(0, 0, 0, 0)
        self.d.sync()

    def close(self) -> None:
        self.d.close()


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


def chromium_kinds(procs: list[psutil.Process]) -> dict[str, list[psutil.Process]]:
    """Chromium's processes by their --type (browser: none)."""
    kinds: dict[str, list[psutil.Process]] = {}
    for p in procs:
        try:
            kind = next((a.split("=", 1)[1] for a in p.cmdline() if a.startswith("--type=")), "browser")
        except psutil.Error:
            continue
        kinds.setdefault(kind, []).append(p)
    return kinds


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


def page_latency(viewers: Any, display: str, changes: int, interval: float) -> dict[str, Any]:
    """Change the colour `changes` times; per viewer and change, from the X server's change to its pixels."""
    viewers.clear()
    marks: list[tuple[tuple[int, int, int], float, float]] = []
    painter = Painter(display)
    for i in range(changes):
        c = colour(i)
        t0 = time.time()
        painter.paint(c)
        marks.append((c, t0, time.time()))
        time.sleep(max(0.0, interval - (time.time() - t0)))
    painter.close()
    time.sleep(3)
    stats = viewers.stats()
    lat: list[float] = []
    missing = [0] * len(stats)
    for k, page in enumerate(stats):
        for c, t0, t1 in marks:
            hit = next((t for r, g, b, t in page.seen if t >= t0 and close((r, g, b), c, 12)), None)
            if hit is None or hit - t0 > 3:
                missing[k] += 1
            else:
                lat.append((hit - t1) * 1000)
    return {"latency": lat, "missing": missing}


def page_throughput(viewers: Any, display: str, seconds: float, pids: dict[str, int]) -> dict[str, Any]:
    """Frames per second per viewer and CPU while the colour changes every ~30 ms (from before the first
    page's count is read until after the last one's: reading 50 busy pages takes seconds)."""
    import threading

    stop = threading.Event()

    def change() -> None:
        painter = Painter(display)
        i = 0
        while not stop.is_set():
            painter.paint(colour(i))
            i += 1
            time.sleep(0.03)
        painter.close()

    changer = threading.Thread(target=change, daemon=True)
    changer.start()
    try:
        time.sleep(1)
        trees = {n: chromium_viewers() if pid == CHROMIUM_VIEWERS else tree(pid) for n, pid in pids.items()}
        if "chromium" in trees:  # where the viewers' CPU goes: renderers (decode, canvas), GPU (compositing)
            for kind, procs in chromium_kinds(trees["chromium"]).items():
                trees[f"chromium_{kind}"] = procs
        before = viewers.counts()
        machine0 = psutil.cpu_times()
        cpu0, w0 = {n: cpu_of(t) for n, t in trees.items()}, time.perf_counter()
        time.sleep(seconds)
        cpu1, w1 = {n: cpu_of(t) for n, t in trees.items()}, time.perf_counter()
        machine1 = psutil.cpu_times()
        after = viewers.counts()
    finally:
        stop.set()
        changer.join()
    fps = [(b[0] - a[0]) / (b[1] - a[1]) for a, b in zip(before, after, strict=True)]
    idle = (machine1.idle - machine0.idle) / (w1 - w0) / (psutil.cpu_count() or 1)
    return {"fps": fps, "machine_busy": 100 * (1 - idle),
            **{f"cpu_{n}": 100 * (cpu1[n] - cpu0[n]) / (w1 - w0) for n in trees}}  # fmt: skip


def wall_bench(site: Site, playwright: Any, n: int, seconds: float, var: Path) -> dict[str, Any]:
    """A second host with `n` desktops, each changing colour every second; one wall page watches."""
    import threading

    from bench.liveview_pages import Viewers
    from webapp.sandboxes.models import Sandbox

    port = free_port()
    wall = {"provider": "xdesktop", "min_idle": n, "max_total": n, "options": {"apps": ["xterm"]}}
    profiles = {"wall": wall}
    args = [sys.executable, "-m", "sandbox_workers.host", "--port", str(port), "--name", "bench-wall",
            "--var-dir", str(var / "wall-host"), "--profiles", json.dumps(profiles), "--slot-base", "200",
            "--web-url", site.url, "--heartbeat", "1"]  # fmt: skip
    log_path = var / "wall-host.log"
    with process(args, ready=port_open(port), env=os.environ.copy(), log_path=log_path, timeout=300):
        ok = wait_for(lambda: Sandbox.objects.filter(profile="wall", state="idle").count() >= n, timeout=300)
        assert ok, f"the wall's {n} desktops did not all start (log {var / 'wall-host.log'})"
        displays = [str(s.endpoints["display"]) for s in Sandbox.objects.filter(profile="wall")]
        pks = {str(s.pk) for s in Sandbox.objects.filter(profile="wall")}
        stop = time.time() + seconds + 15
        painters = [Painter(d) for d in displays]

        def change() -> None:  # every desktop once a second, spread over the second
            i = 0
            while time.time() < stop:
                painters[i % n].paint(colour(i))
                i += 1
                time.sleep(1.0 / n)

        changer = threading.Thread(target=change, daemon=True)
        changer.start()
        viewers = Viewers(playwright, site.url, *site.cookie.split("=", 1), browser_each=False)
        try:
            viewers.context.set_default_timeout(120_000)
            page = viewers.context.new_page()
            page.set_viewport_size({"width": 1920, "height": 1080})
            page.goto(site.url + "/sandboxes/wall/", wait_until="domcontentloaded")
            viewers.pages.append(page)
            deadline = time.time() + 60
            while time.time() < deadline and not pks <= set(viewers.tiles()):
                time.sleep(0.5)
            time.sleep(5)  # every tile connected and drawing
            viewers.clear()
            t0 = time.time()
            time.sleep(seconds)
            t1 = time.time()
            tiles = viewers.tiles()
        finally:
            viewers.close()
        changer.join()
        for p in painters:
            p.close()
    gaps = []
    for pk in pks:
        times = [t for t in tiles.get(pk, []) if t0 <= t <= t1]
        edges = [t0, *times, t1]
        gaps.append(max(b - a for a, b in zip(edges, edges[1:], strict=False)))
    return {"tiles": len(pks), "max_gap": max(gaps), "median_gap": statistics.median(gaps),
            "live": sum(1 for g in gaps if g <= 2.0)}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--viewers", default="1,10,20,50", help="browser viewer counts of one sandbox")
    parser.add_argument("--transport", default="screencast", choices=["screencast", "webrtc", "vnc"])
    parser.add_argument("--changes", type=int, default=200)
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between the series' changes")
    parser.add_argument("--seconds", type=float, default=8.0)
    parser.add_argument("--wall", type=int, default=32, help="desktops on the wall (0: no wall)")
    parser.add_argument(
        "--browser-each",
        action="store_true",
        help="a browser of its own per viewer (as people have), not pages of one browser",
    )
    parser.add_argument("--python-clients", action="store_true", help="also in-process RFB/aiortc clients")
    parser.add_argument("--py-viewers", default="1,10,20", help="with --python-clients: VNC viewer counts")
    parser.add_argument("--webrtc-viewers", default="1,5", help="with --python-clients: WebRTC viewer counts")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    for noisy in ("aioice", "aiortc", "httpx"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    var = Path(tempfile.mkdtemp(prefix="liveview-bench-"))
    # The channel layer needs a Redis: REDIS_URL's if one answers there, else one of this run's own.
    with redis_for_broadcasts() as redis_url:
        os.environ["REDIS_URL"] = redis_url
        run(args, var)


def run(args: argparse.Namespace, var: Path) -> None:
    site = Site(var)
    from django.core.management import call_command
    from playwright.sync_api import sync_playwright

    from bench.liveview_pages import Viewers
    from sandbox_workers.client import HostClient
    from webapp.sandboxes.models import Sandbox

    call_command("collectstatic", "--no-input", verbosity=0)
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
        sync_playwright() as pw,
    ):
        assert wait_for(lambda: Sandbox.objects.filter(state="idle", endpoints__has_key="vnc").exists(),
                        timeout=120, interval=0.3), f"no sandbox registered (logs in {var})"  # fmt: skip
        with HostClient(f"http://127.0.0.1:{host_port}", TOKEN) as client:
            leased = client.acquire("desktop", holder="bench", ttl_s=3600)
            sandbox = Sandbox.objects.get(external_id=leased.info.sandbox_id)
            display = str(sandbox.endpoints["display"])
            shot = leased.observe(fmt="png").screenshot
            print(f"live view bench: one light desktop {shot.width}x{shot.height}; daphne, the host and "
                  f"headless Chromium viewers (the product's live page, {args.transport}) on "
                  f"{psutil.cpu_count()} cores; 100% CPU = one core\n")  # fmt: skip
            print(f"viewers  change->pixels p50   p95   missing (of {args.changes}/viewer)"
                  "   fps/viewer min  median   CPU daphne  host  chromium")  # fmt: skip
            url = f"{site.url}/sandboxes/{sandbox.pk}/live/?transport={args.transport}"
            pids = {"daphne": daphne.pid, "host": host.pid}
            pids["chromium"] = CHROMIUM_VIEWERS
            viewers = Viewers(pw, site.url, *site.cookie.split("=", 1), browser_each=args.browser_each)
            try:
                for n in [int(v) for v in args.viewers.split(",") if v]:
                    viewers.open(url, n - len(viewers.pages))
                    time.sleep(2)
                    lat = page_latency(viewers, display, args.changes, args.interval)
                    live0 = client.status().get("live", {}).get(leased.info.sandbox_id, {})
                    thr = page_throughput(viewers, display, args.seconds, pids)
                    live1 = client.status().get("live", {}).get(leased.info.sandbox_id, {})
                    fps, missing = thr["fps"], lat["missing"]
                    p50 = percentile(lat["latency"], 50) if lat["latency"] else float("nan")
                    p95 = percentile(lat["latency"], 95) if lat["latency"] else float("nan")
                    print(f"{n:7d}  {p50:20.0f} ms {p95:4.0f} ms"
                          f"   max {max(missing):4d} total {sum(missing):5d}"
                          f"        {min(fps):14.1f} {statistics.median(fps):7.1f}"
                          f"   {thr['cpu_daphne']:9.0f}% {thr['cpu_host']:4.0f}%"
                          f" {thr.get('cpu_chromium', float('nan')):8.0f}%", flush=True)  # fmt: skip
                    pre = "cpu_chromium_"
                    kinds = {k[len(pre) :]: v for k, v in thr.items() if k.startswith(pre)}
                    captured = live1.get("frames", 0) - live0.get("frames", 0)
                    print(f"         the machine: {thr['machine_busy']:.0f}% busy", flush=True)
                    print(f"         the host's capture: {captured} frames "
                          f"during the throughput run, {live1.get('viewers')} viewer(s), started "
                          f"{live1.get('starts')} time(s)", flush=True)  # fmt: skip
                    if args.transport == "webrtc":
                        for k, st in enumerate(viewers.webrtc_stats()):
                            got = ", ".join(f"{key} {st.get(key)}" for key in RECEIVER_STATS)
                            print(f"         viewer {k}: {got}")
                    if kinds:
                        print(
                            "         chromium by process: "
                            + ", ".join(f"{k} {v:.0f}%" for k, v in sorted(kinds.items())),
                            flush=True,
                        )
            finally:
                viewers.close()
            if args.wall:
                w = wall_bench(site, pw, args.wall, args.seconds * 2, var)
                print(f"\nwall of {w['tiles']} desktops (thumbnails at 2 fps, each desktop changing once a "
                      f"second): longest time without a frame {w['max_gap']:.2f} s (median tile "
                      f"{w['median_gap']:.2f} s); {w['live']}/{w['tiles']} tiles updated at least every 2 s",
                      flush=True)  # fmt: skip
            if args.python_clients:
                python_clients(site, sandbox, display, args, daphne.pid, host.pid)
            leased.release()
    print(f"\nlogs: {var}")


# Per WebRTC viewer: its receiver's statistics (inbound-rtp) and its player's (getVideoPlaybackQuality).
RECEIVER_STATS = (
    "framesReceived",
    "framesDecoded",
    "keyFramesDecoded",
    "framesDropped",
    "packetsLost",
    "nackCount",
    "pliCount",
    "freezeCount",
    "totalVideoFrames",
    "droppedVideoFrames",
)
CHROMIUM_VIEWERS = -1  # in the pids measured: every Chromium process this bench started (the viewers')


def chromium_viewers() -> list[psutil.Process]:
    """Every Chromium process under this one: the viewers' browsers (their renderers, GPU processes)."""
    return [p for p in psutil.Process().children(recursive=True) if "chrom" in p.name().lower()]


def run_async(coro: Any) -> Any:
    """asyncio.run on a thread of its own (Playwright's sync API holds this thread's event loop)."""
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def python_clients(site: Site, sandbox: Any, display: str, args: Any, daphne_pid: int, host_pid: int) -> None:
    """The earlier figures: viewers in this process (RFB Raw over the noVNC relay; aiortc WebRTC)."""
    print("\nviewers in this process: screen change (xsetroot) -> pixels")
    for path in ("vnc", "webrtc"):
        lat = run_async(latency(site, sandbox, display, 30, path))
        name = "noVNC relay (RFB Raw)" if path == "vnc" else "WebRTC (aiortc, VP8)"
        print(f"  {name:24s} from before xsetroot  {ms(lat['upper'])}")
        print(f"  {'':24s} from xsetroot exit    {ms(lat['lower'])}")
        if path == "webrtc":  # not the browsers' figure: aiortc's jitter buffer holds the last frame
            print(f"  {'':24s} (aiortc's receiver hands a frame on when the next one's packets arrive: "
                  f"after a change of a still screen, the next frame is the 1 s repeat)")  # fmt: skip
    plans = [("vnc", int(n)) for n in args.py_viewers.split(",") if n]
    plans += [("webrtc", int(n)) for n in args.webrtc_viewers.split(",") if n]
    for path, n in plans:
        r = run_async(throughput(site, sandbox, display, n, args.seconds, path, daphne_pid, host_pid))
        print(f"  {path:6s} {n:3d} viewer(s): {r['fps_mean']:5.1f} fps per viewer"
              f" (min {r['fps_min']:5.1f})  daphne CPU {r['daphne_cpu']:5.0f}%"
              f"  host+sandbox CPU {r['host_cpu']:5.0f}%", flush=True)  # fmt: skip


if __name__ == "__main__":
    main()
