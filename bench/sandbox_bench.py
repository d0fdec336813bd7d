"""Sandbox benchmark: step latency, lease, cold start, reset, concurrency, and an OSWorld-style baseline.

    .venv/bin/python bench/sandbox_bench.py            # the full run (≈ 3 minutes)
    .venv/bin/python bench/sandbox_bench.py --quick    # fewer steps, 8 concurrent sandboxes

Every figure is measured in this run on this machine; the baseline (bench/osworld_baseline.py: an
HTTP server beside the display that starts a new Python process per action and returns a PNG) runs
on the same display, so the ratio compares like with like. Targets: ARCHITECTURE.md.

The headline step clicks into xterm and types into it, so the screen changes at once. A step waits for
the application the input goes to (sandbox_workers.display.settle): until its main thread has handled
the input, and for a repaint as long as that application has been seen to take (Chromium's renderer
draws 20-70 ms after its browser process has passed a click on), never past Settle.max_ms. Beside the
headline the bench measures a click that changes nothing (the window manager handles it and draws
nothing), typing a word, Chromium on the same desktop (a click that repaints a web page and one that
changes nothing on it), and the same two clicks in a browser sandbox, where the screenshot is the
page's own next frame (CDP). Each case also counts the screenshots that missed the step's effect and
the steps whose wait ended at the bound (their screen may still have been changing).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent_core.actions import Click, Type  # noqa: E402
from sandbox_workers.base import Profile  # noqa: E402
from sandbox_workers.pool import Pool  # noqa: E402
from sandbox_workers.pool_upkeep import PoolConfig  # noqa: E402
from sandbox_workers.providers.xdesktop import XDesktopProvider  # noqa: E402
from sandbox_workers.stats import percentile  # noqa: E402

W, H = 1280, 720
PROFILE = Profile(name="bench", provider="xdesktop", width=W, height=H, options={"apps": ["xterm"]})


def ms(values: list[float]) -> str:
    return f"p50 {percentile(values, 50):7.1f} ms   p95 {percentile(values, 95):7.1f} ms   (n={len(values)})"


def timed(fn: Callable[[], object]) -> float:
    started = time.perf_counter()
    fn()
    return (time.perf_counter() - started) * 1000


Box = tuple[int, int, int, int]


def xterm_box(windows: list[dict[str, object]]) -> Box:
    """The terminal's window (x, y, width, height) from a `windows` call's list."""
    w = next(w for w in windows if "xterm" in " ".join(w["class"]).lower())  # type: ignore[attr-defined]
    return int(w["x"]), int(w["y"]), int(w["width"]), int(w["height"])  # type: ignore[call-overload]


def step_actions(i: int, box: Box) -> object:
    # Alternate a click in the terminal and one typed character: both change the screen. A click comes
    # first and always lands in the terminal: it has the focus for the typing (typing with no window
    # focused is not delivered).
    x, y, w, h = box
    return (
        Type(content="x") if i % 2 else Click(x=x + 20 + (i * 37) % (w - 40), y=y + 20 + (i * 53) % (h - 40))
    )


def bench_direct(root: Path, steps: int) -> tuple[XDesktopProvider, dict[str, float]]:
    cold = []
    for i in range(3):
        p = XDesktopProvider(sandbox_id=f"cold{i}", profile=PROFILE, root=root / f"cold{i}")
        p.slot = 900 + i
        cold.append(timed(p.start))
        if i < 2:
            p.stop()
    provider = p
    print(f"cold start (Xvfb + x11vnc + openbox + xterm, confined)       {ms(cold)}")
    box = xterm_box(provider.call("windows", {})["windows"])
    for i in range(10):  # warm up
        provider.act(step_actions(i, box))  # type: ignore[arg-type]
        provider.observe()
    png = [
        timed(lambda i=i: (provider.act(step_actions(i, box)), provider.observe(fmt="png")))  # type: ignore[arg-type]
        for i in range(steps)
    ]
    jpg = [
        timed(lambda i=i: (provider.act(step_actions(i, box)), provider.observe(fmt="jpeg")))  # type: ignore[arg-type]
        for i in range(steps)
    ]
    obs = [timed(lambda: provider.observe(fmt="png")) for _ in range(steps)]
    print(f"step, act + fresh PNG screenshot, in process                  {ms(png)}")
    print(f"step, act + fresh JPEG screenshot, in process                 {ms(jpg)}")
    print(f"observe only (PNG)                                            {ms(obs)}")
    resets = [timed(provider.reset) for _ in range(10)]
    print(f"reset (kill apps, wipe workspace, new X server, WM + xterm)   {ms(resets)}")
    return provider, {
        "step_png_p50": percentile(png, 50),
        "step_png_p95": percentile(png, 95),
        "step_jpeg_p50": percentile(jpg, 50),
        "reset_p50": percentile(resets, 50),
        "cold_p50": percentile(cold, 50),
    }


PAGE = b"""<!doctype html><title>bench page</title>
<style>body{margin:0;user-select:none}#t{height:50vh;background:#eee}#t.on{background:#3b82f6}</style>
<div id=t onclick="this.classList.toggle('on')"></div><p style="margin:0;height:50vh">static text</p>"""


def bench_cases(provider: XDesktopProvider, steps: int) -> dict[str, float]:
    """The steps the headline leaves out: no change on screen, typing, a web page in Chromium.

    Each step's screenshot is also compared with the one before it: a step meant to change the screen
    whose screenshot did not change shows a repaint that came after `act` had returned (after the
    first-damage window), and one meant to change nothing whose screenshot changed shows a late one.
    """
    last = [provider.observe(fmt="png").screenshot.data]

    bounded = [0]

    def run(action: object, n: int) -> tuple[list[float], int]:
        """n steps of `action`: their latencies, and how many screenshots differ from the one before."""
        lat, changed = [], 0
        for _ in range(n):
            started = time.perf_counter()
            provider.act(action)  # type: ignore[arg-type]
            obs = provider.observe(fmt="png")
            lat.append((time.perf_counter() - started) * 1000)
            changed += obs.screenshot.data != last[0]
            bounded[0] += obs.info.get("settle", {}).get("ended") == "bound"
            last[0] = obs.screenshot.data
        return lat, changed

    def settle_all() -> None:
        time.sleep(0.5)
        last[0] = provider.observe(fmt="png").screenshot.data

    windows = provider.call("windows", {})["windows"]
    xterm = next(w for w in windows if "xterm" in " ".join(w["class"]).lower())
    # A point on the bare desktop (openbox does nothing on a left click there): no window changes.
    spot = (W - 40, H - 40)
    assert not (
        xterm["x"] <= spot[0] < xterm["x"] + xterm["width"]
        and xterm["y"] <= spot[1] < xterm["y"] + xterm["height"]
    )
    run(Click(x=spot[0], y=spot[1]), 1)  # the first click takes the focus from xterm
    settle_all()
    bounded[0] = 0
    noop, noop_changed = run(Click(x=spot[0], y=spot[1]), steps)
    print(f"step, a click that changes nothing (desktop background)       {ms(noop)}")
    # Give xterm the focus back (openbox may take a while under load), and check the keys reach it.
    for _ in range(10):
        provider.act(Click(x=xterm["x"] + xterm["width"] // 2, y=xterm["y"] + xterm["height"] // 2))
        settle_all()
        if run(Type(content="hello world"), 1)[1]:
            break
    else:
        raise AssertionError("typing did not reach xterm")
    typing, typing_changed = run(Type(content="hello world"), steps)
    print(f"step, typing 'hello world' into xterm (11 keys)               {ms(typing)}")
    provider.put_file("bench.html", PAGE)
    out = provider.call(
        "launch", {"app": "chromium", "args": ["file:///home/user/bench.html"], "timeout": 60}
    )
    assert out["window"] is not None, "chromium opened no window"
    deadline = time.monotonic() + 30
    while not any("bench page" in w["title"] for w in provider.call("windows", {})["windows"]):
        assert time.monotonic() < deadline, "chromium did not load the bench page"
        time.sleep(0.1)
    win = next(w for w in provider.call("windows", {})["windows"] if "bench page" in w["title"])
    # The page fills the window below the toolbar: the toggle is its top half, static text its bottom.
    toggle = Click(x=win["x"] + win["width"] // 2, y=win["y"] + win["height"] // 2 - 40)
    still = Click(x=win["x"] + win["width"] // 2, y=win["y"] + win["height"] - 40)
    for _ in range(6):  # warm up: focus, first paints
        run(toggle, 1)
        run(still, 1)
    settle_all()
    desktop_bounded, bounded[0] = bounded[0], 0
    web, web_changed = run(toggle, steps)
    print(f"step, a click that repaints a web page (Chromium, desktop)    {ms(web)}")
    settle_all()
    web_noop, web_noop_changed = run(still, steps)
    print(f"step, a click on a web page that changes nothing (Chromium)   {ms(web_noop)}")
    print(
        f"screenshots that missed the step's effect (its repaint came after act returned): "
        f"typing {steps - typing_changed} of {steps}, web page repaint {steps - web_changed} of {steps}; "
        f"changed although nothing should: desktop click {noop_changed} of {steps}, "
        f"web page click {web_noop_changed} of {steps}; waits that ended at the bound "
        f"(Settle.max_ms): desktop and typing {desktop_bounded} of {2 * steps}, "
        f"web page {bounded[0]} of {2 * steps}"
    )
    return {
        "noop_p50": percentile(noop, 50),
        "type_p50": percentile(typing, 50),
        "web_p50": percentile(web, 50),
        "web_noop_p50": percentile(web_noop, 50),
        "web_missed": float(steps - web_changed),
        "cases_n": float(steps),
    }


def bench_browser(root: Path, steps: int) -> dict[str, float]:
    """The web page's two clicks in a browser sandbox (CDP input; the screenshot is the page's next frame)."""
    from sandbox_workers.providers.browser import BrowserProvider

    profile = Profile(name="b", provider="browser", width=W, height=H)
    provider = BrowserProvider(sandbox_id="bench-browser", profile=profile, root=root)
    provider.slot = 950
    provider.start()
    try:
        provider._run(lambda: provider.page.set_content(PAGE.decode()), what="bench page")
        last = [provider.observe(fmt="png").screenshot.data]

        def run(action: Click, n: int) -> tuple[list[float], int]:
            lat, changed = [], 0
            for _ in range(n):
                started = time.perf_counter()
                provider.act(action)
                shot = provider.observe(fmt="png").screenshot.data
                lat.append((time.perf_counter() - started) * 1000)
                changed += shot != last[0]
                last[0] = shot
            return lat, changed

        toggle, still = Click(x=W // 2, y=H // 4), Click(x=W // 2, y=H * 3 // 4)
        for _ in range(6):
            run(toggle, 1)
            run(still, 1)
        web, web_changed = run(toggle, steps)
        web_noop, web_noop_changed = run(still, steps)
    finally:
        provider.stop()
    print(f"step, a click that repaints a web page (browser sandbox, CDP)  {ms(web)}")
    print(f"step, a click that changes nothing on it (browser sandbox)     {ms(web_noop)}")
    print(
        f"browser sandbox screenshots that missed the repaint: {steps - web_changed} of {steps}; changed "
        f"although nothing should: {web_noop_changed} of {steps}"
    )
    return {
        "browser_web_p50": percentile(web, 50),
        "browser_noop_p50": percentile(web_noop, 50),
        "browser_missed": float(steps - web_changed),
    }


def bench_baseline(provider: XDesktopProvider, steps: int) -> dict[str, float]:
    display = provider.endpoints()["display"]
    port = free_port()
    xauth = Path(tempfile.mkdtemp()) / "Xauthority"
    xauth.touch()  # the display needs no cookie, but python-xlib insists on the file
    env = {**os.environ, "DISPLAY": display, "XAUTHORITY": str(xauth)}
    server = subprocess.Popen([sys.executable, str(ROOT / "bench/osworld_baseline.py"), str(port)], env=env)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=60) as http:
            for _ in range(100):
                try:
                    http.get("/screenshot")
                    break
                except httpx.TransportError:
                    time.sleep(0.1)
            lat = []
            for i in range(steps):
                x, y = 200 + (i * 37) % 800, 200 + (i * 53) % 300
                started = time.perf_counter()
                r = http.post("/execute", json={"command": f"pyautogui.click({x}, {y})"})
                assert r.json()["returncode"] == 0, r.text
                png = http.get("/screenshot").content
                assert png[:4] == b"\x89PNG"
                lat.append((time.perf_counter() - started) * 1000)
    finally:
        server.terminate()
        server.wait()
    print(f"OSWorld-style step (new process per action + PNG), no 2 s pause {ms(lat)}")
    return {"baseline_p50": percentile(lat, 50), "baseline_p95": percentile(lat, 95)}


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def bench_host(var: Path, steps: int) -> dict[str, float]:
    """Lease latency and step latency through the host service's HTTP API."""
    from sandbox_workers.client import HostClient

    token = "bench-token-0123456789abcdef"  # noqa: S105 (a throwaway host of this run)
    port = free_port()
    profiles = {
        "desktop": {"provider": "xdesktop", "min_idle": 3, "max_total": 4, "options": {"apps": ["xterm"]}}
    }
    env = {**os.environ, "SANDBOX_HOST_TOKEN": token}
    log = open(var / "host.log", "wb")  # noqa: SIM115
    host = subprocess.Popen(
        [sys.executable, "-m", "sandbox_workers.host", "--port", str(port), "--name", "bench",
         "--var-dir", str(var / "host"), "--profiles", json.dumps(profiles), "--slot-base", "700"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        with HostClient(f"http://127.0.0.1:{port}", token) as client:
            wait_idle(client, 3)
            leases = []
            for _ in range(20):
                wait_idle(client, 3)
                started = time.perf_counter()
                sb = client.acquire("desktop", holder="bench", ttl_s=60)
                leases.append((time.perf_counter() - started) * 1000)
                sb.release()
            sb = client.acquire("desktop", holder="bench", ttl_s=300)
            box = xterm_box(sb.call("windows")["windows"])
            for i in range(10):
                sb.act(step_actions(i, box))  # type: ignore[arg-type]
            http_steps = [timed(lambda i=i: sb.act(step_actions(i, box))) for i in range(steps)]  # type: ignore[arg-type]
            sb.release()
            status = client.status()
    finally:
        host.terminate()
        host.wait(timeout=60)
        log.close()
    print(f"lease from the warm pool, over HTTP (client round trip)      {ms(leases)}")
    inside = status["lease_latency_ms"]["all"]["p50"]
    print(f"lease inside the pool (host's own measure)                   p50 {inside:7.1f} ms")
    print(f"step over HTTP: act + PNG screenshot in the same response    {ms(http_steps)}")
    return {"lease_http_p50": percentile(leases, 50), "step_http_p50": percentile(http_steps, 50)}


def wait_idle(client: object, n: int, timeout: float = 120) -> None:
    from sandbox_workers.client import HostUnreachable

    deadline = time.monotonic() + timeout
    while True:
        try:
            if client.status()["profiles"]["desktop"]["states"]["idle"] >= n:  # type: ignore[attr-defined]
                return
        except HostUnreachable:  # still starting
            pass
        if time.monotonic() > deadline:
            raise TimeoutError("pool did not warm up")
        time.sleep(0.05)


def bench_concurrency(root: Path, n: int, seconds: float) -> dict[str, float]:
    """Start n desktops, then step all of them at once from n threads for `seconds`."""
    cfg = PoolConfig(profile=PROFILE, min_idle=n, max_total=n)
    mem_before = psutil.virtual_memory().used

    async def start() -> Pool:
        pool = Pool([cfg], root, slot_base=100)
        await pool.start()
        await pool.wait_warm(timeout=600)
        return pool

    loop = asyncio.new_event_loop()
    started = time.perf_counter()
    pool = loop.run_until_complete(start())
    boot_s = time.perf_counter() - started
    mem_per = (psutil.virtual_memory().used - mem_before) / n / 2**20
    providers = [m.provider for m in pool.sandboxes.values()]
    counts = [0] * len(providers)
    lat: list[float] = []
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    boxes = [xterm_box(p.call("windows", {})["windows"]) for p in providers]

    def run(k: int) -> None:
        p = providers[k]
        i = 0
        while time.monotonic() < stop_at:
            t = timed(lambda i=i: (p.act(step_actions(i, boxes[k])), p.observe(fmt="png")))  # type: ignore[arg-type]
            with lock:
                lat.append(t)
            counts[k] += 1
            i += 1

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(providers))]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    total = sum(counts)
    print(f"{len(providers)} desktops started in {boot_s:.1f} s, ≈{mem_per:.0f} MiB each")
    print(
        f"{len(providers)} desktops stepping at once: {total / elapsed:.0f} steps/s in all, "
        f"{min(counts) / elapsed:.1f}–{max(counts) / elapsed:.1f} steps/s each, {ms(lat)}"
    )
    loop.run_until_complete(pool.shutdown())
    loop.close()
    return {"concurrent": float(len(providers)), "concurrent_steps_per_s": total / elapsed,
            "concurrent_min_each": min(counts) / elapsed}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer steps and 8 concurrent desktops")
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    steps = 60 if args.quick else 300
    n = 8 if args.quick else args.concurrency
    print(
        f"sandbox bench on {os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB, {W}x{H}\n"
    )
    tmp = Path(tempfile.mkdtemp(prefix="sandbox-bench-"))
    tmp.chmod(0o711)  # sandboxes run as their own uids and must reach their roots
    provider = None
    try:
        provider, direct = bench_direct(tmp / "direct", steps)
        base = bench_baseline(provider, 30 if args.quick else 60)
        direct |= bench_cases(
            provider, 30 if args.quick else 100
        )  # after the baseline: Chromium covers xterm
        provider.stop()
        direct |= bench_browser(tmp / "browser", 30 if args.quick else 100)
        host = bench_host(tmp, steps // 2)
        conc = bench_concurrency(tmp / "many", n, 10 if args.quick else 20)
    finally:
        if provider is not None:
            provider.stop()  # idempotent; a failed run must not leave a desktop behind
        shutil.rmtree(tmp, ignore_errors=True)
    print()
    ratio_direct = base["baseline_p50"] / direct["step_png_p50"]
    ratio_http = base["baseline_p50"] / host["step_http_p50"]
    print(
        f"speed-up over the OSWorld-style step (p50): {ratio_direct:.0f}x in process, "
        f"{ratio_http:.0f}x over HTTP"
    )
    print("targets: step p50 <= 15 ms | lease p50 <= 50 ms | reset <= 1 s | >= 32 desktops stepping at once")
    print(
        f"measured: step p50 {direct['step_png_p50']:.1f} ms (HTTP {host['step_http_p50']:.1f} ms) | "
        f"lease p50 {host['lease_http_p50']:.1f} ms | reset p50 {direct['reset_p50']:.0f} ms | "
        f"{conc['concurrent']:.0f} desktops at {conc['concurrent_steps_per_s']:.0f} steps/s"
    )
    print(
        f"the step (p50) beside the headline's click-or-type into xterm: a click that changes nothing "
        f"{direct['noop_p50']:.1f} ms | typing 11 keys {direct['type_p50']:.1f} ms | a web page repaint in "
        f"Chromium {direct['web_p50']:.1f} ms (its screenshot missed the repaint in "
        f"{direct['web_missed']:.0f} of {direct['cases_n']:.0f} steps) | a click that changes nothing on "
        f"the page {direct['web_noop_p50']:.1f} ms; in a browser sandbox {direct['browser_web_p50']:.1f} ms "
        f"(missed {direct['browser_missed']:.0f}) and {direct['browser_noop_p50']:.1f} ms"
    )
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
