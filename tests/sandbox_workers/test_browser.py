"""The browser provider through the real Chromium: observe/act, virtual time, screencast, confinement,
crashes and cleanup."""

from __future__ import annotations

import json
import os
import signal
import threading
import time
import urllib.parse
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import psutil
import pytest

from agent_core.actions import (
    CallUser,
    Click,
    Drag,
    Finished,
    Hotkey,
    LongPress,
    MiddleSingle,
    Press,
    RightSingle,
    Scroll,
    Terminal,
    Type,
    Wait,
)
from sandbox_workers.base import (
    ActionUnsupported,
    EnvError,
    OperationUnsupported,
    Profile,
    SandboxPathError,
)
from sandbox_workers.providers.browser import BrowserProvider
from sandbox_workers.providers.browser.provider import InvalidParams
from sandbox_workers.registry import provider_class
from tests.procs import alive, wait_for, worker_slot

pytestmark = pytest.mark.skipif(not os.access("/usr/bin/chromium", os.X_OK), reason="no Chromium")

PNG, JPEG = b"\x89PNG\r\n\x1a\n", b"\xff\xd8\xff"
COUNTER = (
    "<body><div id=c>0</div><script>let n = 0; setInterval(() => { n++; c.textContent = n }, 100)</script>"
)

INPUTS = """<body style="margin:0"><input id=t style="position:absolute;left:10px;top:10px;width:300px">
<div id=log style="position:absolute;left:10px;top:50px">-</div><div style="height:5000px"></div><script>
const log = [];
for (const ev of ['mousedown', 'mouseup', 'dblclick', 'contextmenu', 'auxclick', 'keydown'])
  document.addEventListener(ev, e => {
    const button = ev == 'auxclick' ? ':b' + e.button : '';
    log.push(ev + (e.key ? ':' + e.key : ':' + e.clientX + ',' + e.clientY) + button);
    document.getElementById('log').textContent = log.slice(-5).join(' ');
    if (ev === 'contextmenu') e.preventDefault();
  }, true);
</script>"""


def data_url(html: str) -> str:
    return "data:text/html," + urllib.parse.quote(html)


def reachable_root(base: Path) -> Path:
    """`base`, with o+x on its parents: the sandbox uid must traverse them (pytest's are 0700)."""
    for parent in [base, *base.parents]:
        if parent in (Path("/tmp"), Path("/")):
            break
        parent.chmod(parent.stat().st_mode | 0o011)
    return base


def make(root: Path, slot: int, **profile: Any) -> BrowserProvider:
    p = BrowserProvider(
        sandbox_id=f"bt{slot}", profile=Profile(name="b", provider="browser", **profile), root=root
    )
    p.slot = worker_slot(slot)
    return p


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserProvider]:
    p = make(reachable_root(tmp_path_factory.mktemp("browser")) / "sb", 51)
    p.start()
    yield p
    p.stop()


@pytest.fixture
def fresh_root(tmp_path: Path) -> Path:
    return reachable_root(tmp_path) / "sb"


def text(sb: BrowserProvider, selector: str) -> str:
    els = sb.call("dom", {"selector": selector})["elements"]
    return str(els[0].get("text", "")) if els else ""


@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, list[str]]]:
    """An HTTP server on the host's loopback; the list collects the paths it was asked for."""
    hits: list[str] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            body = b"<title>host server</title><p id=p>hello from the host</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Access-Control-Allow-Origin", "*")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}", hits
    httpd.shutdown()


# --- basics ------------------------------------------------------------------------------------------


def test_registered_with_its_operations() -> None:
    cls = provider_class("browser")
    assert cls is BrowserProvider and cls.supports_snapshot
    assert {"goto", "miniwob_start", "miniwob_reward", "virtual_time", "dom"} <= cls.extensions


def test_observe_png_jpeg_a11y_dom(sb: BrowserProvider) -> None:
    assert sb.health().ok
    page = "<title>Hello</title><body><h1>Heading</h1><button>Press me</button></body>"
    nav = sb.call("goto", {"url": data_url(page)})
    assert nav["title"] == "Hello" and nav["error"] is None
    png = sb.observe(fmt="png")
    assert png.screenshot.data.startswith(PNG) and (png.screenshot.width, png.screenshot.height) == (
        1280,
        720,
    )
    # The PNG header's own size: CSS pixels are screen pixels (device scale factor 1).
    assert (
        int.from_bytes(png.screenshot.data[16:20]) == 1280
        and int.from_bytes(png.screenshot.data[20:24]) == 720
    )
    assert png.info["title"] == "Hello" and png.info["url"].startswith("data:") and png.a11y is None
    jpg = sb.observe(fmt="jpeg", quality=50, a11y=True)
    assert jpg.screenshot.data.startswith(JPEG) and jpg.screenshot.content_type == "image/jpeg"
    assert jpg.a11y is not None and 'button "Press me"' in jpg.a11y and "Heading" in jpg.a11y
    assert jpg.dom is not None and "<button>Press me</button>" in jpg.dom
    with pytest.raises(InvalidParams):
        sb.observe(fmt="gif")  # type: ignore[arg-type]


def test_mouse_and_keyboard_actions(sb: BrowserProvider) -> None:
    sb.call("goto", {"url": data_url(INPUTS)})
    sb.act(Click(x=100, y=20))
    assert text(sb, "#log") == "mousedown:100,20 mouseup:100,20"
    sb.act(Type(content="hello world"))
    assert sb.call("dom", {"selector": "#t"})["elements"][0]["value"] == "hello world"
    sb.act(Hotkey(keys=("ctrl", "a")))
    sb.act(Press(key="backspace"))
    assert text(sb, "#log").endswith("keydown:Control keydown:a keydown:Backspace")
    sb.act(Type(content="abc\n"))
    assert sb.call("dom", {"selector": "#t"})["elements"][0]["value"] == "abc"
    assert text(sb, "#log").endswith("keydown:c keydown:Enter")
    sb.act(RightSingle(x=300, y=300))
    sb.act(Drag(x1=400, y1=400, x2=500, y2=450))
    log = text(sb, "#log")
    assert "contextmenu:300,300" in log and "mousedown:400,400" in log and log.endswith("mouseup:500,450")
    sb.act(MiddleSingle(x=200, y=300))
    assert text(sb, "#log").endswith("mousedown:200,300 mouseup:200,300 auxclick:200,300:b1")
    assert _top(sb, "#t") == 10
    sb.act(Scroll(x=600, y=400, direction="down", amount=3))  # 3 notches of 100 px
    assert wait_for(lambda: _top(sb, "#t") == 10 - 300), _top(sb, "#t")
    sb.act(Scroll(x=600, y=400, direction="up", amount=1))
    assert wait_for(lambda: _top(sb, "#t") == 10 - 200), _top(sb, "#t")
    sb.act(Finished(content="done"))
    sb.act(CallUser())
    with pytest.raises(ActionUnsupported):
        sb.act(LongPress(x=1, y=1))
    with pytest.raises(ActionUnsupported):
        sb.act(Terminal(command="ls"))
    with pytest.raises(ActionUnsupported):
        sb.act(Press(key="nosuchkey"))


def _top(sb: BrowserProvider, selector: str) -> float:
    return float(sb.call("dom", {"selector": selector})["elements"][0]["top"])


def test_goto_only_allows_safe_urls(sb: BrowserProvider, server: tuple[str, list[str]]) -> None:
    for url in ("file:///etc/passwd", "file:///opt/miniwob/../../etc/passwd", "javascript:alert(1)",
                "chrome://version", server[0] + "/", "ftp://x", ""):  # fmt: skip
        with pytest.raises(InvalidParams):
            sb.call("goto", {"url": url})
    assert sb.call("goto", {"url": "about:blank"})["url"] == "about:blank"
    with pytest.raises(OperationUnsupported, match="valid: "):
        sb.call("eval", {"js": "1"})
    with pytest.raises(InvalidParams):
        sb.call("dom", {"selector": "[[["})


def test_goto_refuses_file_urls_chromium_would_read_outside_the_miniwob_folder(sb: BrowserProvider) -> None:
    base = sb._spec.html_base
    bypasses = [
        f"file://{base}/..\\..\\etc\\passwd",  # Chromium reads a backslash as a slash
        f"FILE://{base}/..\\..\\etc\\passwd",
        f"file:{base}/..\\..\\etc\\passwd",
        f"file:\\\\{base}/..\\..\\etc\\passwd",
        f"file://{base}/%2e%2e/%2E%2e/etc/passwd",  # and %2e as a dot
        f"file://{base}/.%2e/%2e./etc/passwd",
        f"file://{base}/%5c..%5c..%5cetc%5cpasswd",
        f"file://{base}/..%2f..%2fetc%2fpasswd",
        f"file://localhost{base}/../../etc/passwd",
        f"file://{base}/.\t./.\n./etc/passwd",  # and drops tabs and newlines
        f"file://{base}/miniwob/../../../etc/passwd",
        f"file://{base}x/../etc/passwd",
        f"file://{base}/",
        f"file://evil.example{base}/miniwob/click-button.html",
    ]
    for url in bypasses:
        with pytest.raises(InvalidParams, match="MiniWoB folder"):
            sb.call("goto", {"url": url})
        assert "root:" not in (sb.observe(a11y=True).dom or ""), url
    # The MiniWoB pages themselves still load, in their usual forms.
    page = f"{base}/miniwob/click-button.html"
    for url in (f"file://{page}", f"file://localhost{page}", f"FILE://{page}?x=1#top"):
        nav = sb.call("goto", {"url": url})
        assert nav["error"] is None and nav["url"].startswith(f"file://{page}"), nav
        assert "Click" in (sb.observe(a11y=True).dom or ""), url
    started = sb.call("miniwob_start", {"task": "click-button", "seed": 1})
    assert started["url"] == f"file://{page}" and started["utterance"]


def test_no_shell_and_files_in_the_downloads_folder(sb: BrowserProvider) -> None:
    with pytest.raises(OperationUnsupported, match="no shell"):
        sb.exec("ls")
    sb.put_file("sub/a.txt", b"data")
    assert sb.get_file("sub/a.txt") == b"data"
    assert sb.get_file(str(sb.downloads / "sub" / "a.txt")) == b"data"
    for bad in ("../escape.txt", "/etc/passwd", "sub/../../x", ""):
        with pytest.raises(SandboxPathError):
            sb.put_file(bad, b"x")
    with pytest.raises(SandboxPathError):
        sb.get_file("missing.txt")
    os.symlink("/etc/hostname", sb.downloads / "link")
    with pytest.raises(SandboxPathError):
        sb.get_file("link")
    page = (
        '<a id=d href="data:text/plain,downloaded%20bytes" download="note.txt" style="font-size:40px">get</a>'
    )
    sb.call("goto", {"url": data_url(page)})
    e = sb.call("dom", {"selector": "#d"})["elements"][0]
    sb.act(Click(x=e["cx"], y=e["cy"]))
    assert wait_for(lambda: (sb.downloads / "note.txt").exists())
    assert sb.get_file("note.txt") == b"downloaded bytes"


def test_snapshot_and_restore_storage_and_url(sb: BrowserProvider) -> None:
    sb.call("miniwob_start", {"task": "click-test", "seed": 1})
    # Test-only reach into the page: callers have no way to run JavaScript.
    sb._run(lambda: sb.page.evaluate("localStorage.setItem('k', 'v1')"))
    blob = sb.snapshot()
    assert json.loads(blob)["url"].endswith("/miniwob/click-test.html")
    sb.reset()
    assert sb.observe().info["url"] == "about:blank"
    sb.restore(blob)
    assert sb.observe().info["url"].endswith("/miniwob/click-test.html")
    assert sb._run(lambda: sb.page.evaluate("localStorage.getItem('k')")) == "v1"
    sb.reset()  # a fresh context: the storage is gone
    sb.call("miniwob_start", {"task": "click-test", "seed": 1})
    assert sb._run(lambda: sb.page.evaluate("localStorage.length")) == 0
    with pytest.raises(InvalidParams):
        sb.restore(b"not json")


# --- virtual time ------------------------------------------------------------------------------------


def test_virtual_time_pause_advance_accelerate(sb: BrowserProvider) -> None:
    sb.call("goto", {"url": data_url(COUNTER)})
    time.sleep(0.35)
    paused = sb.call("virtual_time", {"mode": "pause"})
    assert paused["mode"] == "paused"
    n0 = int(text(sb, "#c"))
    assert n0 >= 1
    time.sleep(0.6)
    assert int(text(sb, "#c")) == n0
    assert sb.call("virtual_time", {"mode": "pause"})["page_time_ms"] == paused["page_time_ms"]
    adv = sb.call("virtual_time", {"mode": "advance", "ms": 2000})
    assert adv["completed"] and adv["mode"] == "paused"
    assert abs(adv["page_time_ms"] - paused["page_time_ms"] - 2000) <= 1
    assert abs(int(text(sb, "#c")) - (n0 + 20)) <= 1
    sb.act(Wait(seconds=1.0))  # paused: a wait is a wait in page time
    assert abs(sb.call("virtual_time", {"mode": "pause"})["page_time_ms"] - adv["page_time_ms"] - 1000) <= 1
    t0 = sb.call("virtual_time", {"mode": "accelerate", "rate": 10})["page_time_ms"]
    time.sleep(0.5)
    w0 = time.monotonic()
    t1 = sb.call("virtual_time", {"mode": "realtime"})["page_time_ms"]
    assert t1 - t0 >= 1000  # about 5000 at rate 10; realtime would be about 500
    time.sleep(0.5)
    t2 = sb.call("virtual_time", {"mode": "realtime"})["page_time_ms"]
    wall_ms = (time.monotonic() - w0) * 1000
    # Realtime again: page time keeps the wall clock's pace (not 10x), however slow the calls under load.
    assert 250 <= t2 - t1 <= wall_ms + 100, (t2 - t1, wall_ms)
    with pytest.raises(InvalidParams):
        sb.call("virtual_time", {"mode": "advance", "ms": -5})
    with pytest.raises(InvalidParams):
        sb.call("virtual_time", {"mode": "rewind"})
    # A navigation leaves virtual time behind (a fresh page): the counter runs on the wall clock again.
    sb.call("goto", {"url": data_url(COUNTER)})
    assert wait_for(lambda: int(text(sb, "#c")) >= 3, timeout=2)
    assert "virtual_time" not in sb.observe().info


def test_a_fresh_page_that_does_not_open_gives_a_new_context(
    sb: BrowserProvider, monkeypatch: pytest.MonkeyPatch
) -> None:
    """If Chromium is too slow to open the fresh page a navigation off virtual time needs, a whole new
    context replaces the old one and the navigation still completes on the wall clock."""
    import sandbox_workers.providers.browser.session as browser_mod

    sb.call("goto", {"url": data_url(COUNTER)})
    sb.call("virtual_time", {"mode": "pause"})
    old_context = sb._context
    monkeypatch.setattr(browser_mod, "FRESH_PAGE_S", 0.0)
    nav = sb.call("goto", {"url": data_url(COUNTER)})
    assert nav["error"] is None and sb._context is not old_context
    assert wait_for(lambda: int(text(sb, "#c")) >= 3, timeout=2)
    assert "virtual_time" not in sb.observe().info
    monkeypatch.undo()
    sb.call("virtual_time", {"mode": "pause"})
    context = sb._context
    sb.call("goto", {"url": data_url(COUNTER)})  # the usual way again: a fresh page, same context
    assert sb._context is context and wait_for(lambda: int(text(sb, "#c")) >= 3, timeout=2)


def test_drag_and_scroll_on_a_paused_clock(sb: BrowserProvider) -> None:
    """Input that waits for the renderer (a drag's moves, a wheel) completes on paused virtual time.

    Chromium holds those answers until the page's clock runs; the action lets it run for the moment
    it needs and pauses it again (this used to time out after 10 s).
    """
    sb.call("goto", {"url": data_url(INPUTS)})
    paused = sb.call("virtual_time", {"mode": "pause"})
    sb.act(Drag(x1=400, y1=400, x2=500, y2=450))
    log = text(sb, "#log")
    assert "mousedown:400,400" in log and log.endswith("mouseup:500,450"), log
    sb.act(Scroll(x=600, y=400, direction="down", amount=2))
    assert wait_for(lambda: _top(sb, "#t") == 10 - 200), _top(sb, "#t")
    after = sb.call("virtual_time", {"mode": "pause"})
    assert after["mode"] == "paused" and sb.observe().info["virtual_time"] == "paused"
    assert 0 <= after["page_time_ms"] - paused["page_time_ms"] < 10_000  # ran only while it waited


# --- screencast --------------------------------------------------------------------------------------


def test_screencast_delivers_jpeg_frames_until_stopped(sb: BrowserProvider) -> None:
    anim = "<body><script>let i = 0; (function f() { document.body.style.background = " \
           "`hsl(${i++ % 360},80%,50%)`; requestAnimationFrame(f) })()</script>"  # fmt: skip
    sb.call("goto", {"url": data_url(anim)})
    frames: list[bytes] = []
    threads: set[str] = set()

    def on_frame(jpeg: bytes) -> None:
        frames.append(jpeg)
        threads.add(threading.current_thread().name)

    sb.start_screencast(on_frame, max_fps=8)
    time.sleep(1.5)
    sb.stop_screencast()
    n = len(frames)
    assert 4 <= n <= 8 * 1.5 + 2
    assert all(f.startswith(JPEG) for f in frames)
    assert threads == {"screencast-bt51"}  # never the shared loop thread
    time.sleep(0.5)
    assert len(frames) == n
    sb.stop_screencast()  # twice is fine


# --- confinement -------------------------------------------------------------------------------------


PROBE = """<body><div id=r>pending</div><script>
fetch('{url}/probe', {{mode: 'no-cors'}})
  .then(() => r.textContent = 'reached', () => r.textContent = 'blocked')
</script>"""


def test_no_network_and_no_host_files(sb: BrowserProvider, server: tuple[str, list[str]]) -> None:
    base, hits = server
    sb.call("goto", {"url": data_url(PROBE.format(url=base))})
    assert wait_for(lambda: text(sb, "#r") != "pending")
    assert text(sb, "#r") == "blocked" and hits == []
    # The provider's goto refuses these; go around it to test the sandbox underneath. (Unconfined,
    # as root, Chromium shows both files.)
    for path, err in (("/etc/shadow", "ERR_ACCESS_DENIED"), ("/work/main/README.md", "ERR_FILE_NOT_FOUND")):
        res = sb._run(lambda path=path: sb._navigate("file://" + path))
        assert err in (res["error"] or ""), res
        body = sb.observe(a11y=True).dom or ""
        assert "root:" not in body and "flywheel" not in body


@pytest.mark.slow
def test_network_profile_reaches_the_host_loopback(fresh_root: Path, server: tuple[str, list[str]]) -> None:
    base, hits = server
    p = make(fresh_root, 52, network=True)
    p.start()
    try:
        nav = p.call("goto", {"url": base + "/page"})
        assert nav["status"] == 200 and nav["title"] == "host server" and "/page" in hits
        # One tab per sandbox: a link opening a new window shows its page in the sandbox's page.
        link = f'<a id=a href="{base}/popup" target=_blank style="font-size:40px">open</a>'
        p.call("goto", {"url": data_url(link)})
        e = p.call("dom", {"selector": "#a"})["elements"][0]
        p.act(Click(x=e["cx"], y=e["cy"]))
        assert wait_for(lambda: p.observe().info["url"] == base + "/popup")
        assert p.observe().info["title"] == "host server"
    finally:
        p.stop()


# --- crashes, stop and cleanup -----------------------------------------------------------------------


def _chromium_pid(p: BrowserProvider) -> int:
    for pid in p.pids():
        cmd = psutil.Process(pid).cmdline()
        if cmd and cmd[0].endswith("/chromium") and not any(a.startswith("--type=") for a in cmd):
            return pid
    raise AssertionError("no Chromium browser process")


@pytest.mark.slow
def test_killed_chromium_is_an_env_error_then_reset_relaunches(fresh_root: Path) -> None:
    p = make(fresh_root, 53)
    p.start()
    try:
        before = p.pids()
        assert len(before) >= 3 and p.health().ok
        os.kill(_chromium_pid(p), signal.SIGKILL)
        t0 = time.monotonic()
        assert wait_for(lambda: not p.health().ok, timeout=2)
        assert "exited" in p.health().detail or "closed" in p.health().detail
        with pytest.raises(EnvError):
            p.observe()
        with pytest.raises(EnvError):
            p.act(Click(x=5, y=5))
        with pytest.raises(EnvError):
            p.call("goto", {"url": "about:blank"})
        assert time.monotonic() - t0 < 2.0
        p.reset()
        assert p.health().ok and p.observe().screenshot.data.startswith(PNG)
        assert wait_for(lambda: not alive(before), timeout=3), alive(before)
        now = p.pids()
    finally:
        p.stop()
    assert wait_for(lambda: not alive(now), timeout=3), alive(now)
    assert not fresh_root.exists()
    p.stop()  # idempotent


@pytest.mark.slow
def test_cleanup_kills_a_browser_left_by_a_crashed_host(fresh_root: Path) -> None:
    p = make(fresh_root, 54)
    p.start()
    state = json.loads(json.dumps(p.state()))  # what the pool persists
    assert state["pids"] and len(state["pids"]) == len(state["create_times"])
    assert set(state["pids"]) <= set(p.pids())
    BrowserProvider.cleanup(root=fresh_root, state=state)
    assert wait_for(lambda: not alive(state["pids"]), timeout=3), alive(state["pids"])
    assert not fresh_root.exists()
    p.stop()  # the host-side object of the lost sandbox: must not raise
