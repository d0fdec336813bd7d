"""A desktop step waits for the application to take its input and for its effect to be on the screen
(sandbox_workers.display.settle), on a real desktop with the tests' own X application (settle_app.py)
run on its display: a late repaint (a busy main thread, a renderer process of its own), a click that
changes nothing, keys that come while the app is still busy with the previous one, typing before any
window has the focus, and input an app cannot take."""

from __future__ import annotations

import dataclasses
import io
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agent_core import actions as A
from agent_core.env import ActionRejected
from sandbox_workers.base import ActionFailed, Profile
from sandbox_workers.display.settle import InputNotDelivered
from tests.procs import wait_for
from tests.sandbox_workers.conftest import reachable, xdesktop_module

pytestmark = pytest.mark.slow

APP = Path(__file__).with_name("settle_app.py")
COLOURS = ((0x80, 0x80, 0x80), (0x20, 0x60, 0xE0), (0x20, 0xC0, 0x40))  # settle_app.COLOURS


@pytest.fixture(scope="module")
def desk(xdesktop_tools: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A desktop with no start-up app whose steps may wait 5 s: a step that ends before that bound
    ended for what it saw, whatever the load of the machine."""
    mod = xdesktop_module()
    base = reachable(tmp_path_factory.mktemp("settle"))
    options = {"apps": [], "settle_max_ms": 5000, "settle_ready_ms": 5000}
    p = mod.XDesktopProvider(
        sandbox_id=f"settle-{base.name}",
        profile=Profile(name="settle", provider="xdesktop", options=options),
        root=base / "sb",
    )
    p.start()
    yield p
    p.stop()


@dataclass
class App:
    proc: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def said(self, line: str) -> bool:
        return line in self.lines


@contextmanager
def app(sb: Any, tmp_path: Path, *args: str) -> Iterator[App]:
    """settle_app.py on the desktop's display, its stdout lines collected; killed (with its renderer)
    at the end."""
    xauth = tmp_path / "Xauthority"
    xauth.touch()  # the display needs no cookie, but python-xlib insists on the file
    env = {**os.environ, "DISPLAY": sb.endpoints()["display"], "XAUTHORITY": str(xauth)}
    proc = subprocess.Popen(
        [sys.executable, str(APP), *args], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
    )
    running = App(proc)

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            running.lines.append(line.strip())

    threading.Thread(target=read, daemon=True).start()
    try:
        yield running
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def app_window(sb: Any) -> dict[str, Any]:
    """The app's window once the window manager manages it."""
    found: list[dict[str, Any]] = []

    def managed() -> bool:
        found[:] = [w for w in sb.call("windows", {})["windows"] if "settleapp" in w["class"]]
        return bool(found)

    assert wait_for(managed), "settle_app's window never came"
    return found[-1]


def colour_at(sb: Any, x: int, y: int) -> tuple[int, int, int]:
    img = Image.open(io.BytesIO(sb.observe().screenshot.data)).convert("RGB")
    return img.getpixel((x, y))  # type: ignore[return-value]


def settled(sb: Any) -> dict[str, Any]:
    """How the last step's wait ended (the observation right after it says)."""
    return dict(sb.observe().info.get("settle") or {})


@pytest.mark.parametrize("late", [["--busy-ms", "150"], ["--renderer-ms", "150"]], ids=["busy", "renderer"])
def test_a_repaint_that_comes_late_is_in_the_screenshot_after_the_step(
    desk: Any, tmp_path: Path, late: list[str]
) -> None:
    with app(desk, tmp_path, *late) as running:
        win = app_window(desk)
        x, y = win["x"] + win["width"] // 4, win["y"] + win["height"] // 2
        assert wait_for(lambda: running.said("painted 0"))  # its first paint is not a click's
        for n in range(3):
            desk.act(A.Click(x=x, y=y))
            # 150 ms after the click, long past the old fixed 25 ms window for the first damage.
            assert colour_at(desk, x, y) == COLOURS[1 + n % 2], f"click {n + 1}: its repaint was missed"


def test_a_step_that_changes_nothing_does_not_wait_the_whole_bound(desk: Any, tmp_path: Path) -> None:
    with app(desk, tmp_path) as running:
        win = app_window(desk)
        y = win["y"] + win["height"] // 2
        desk.act(A.Click(x=win["x"] + win["width"] // 4, y=y))  # the app is seen drawing once
        assert wait_for(lambda: running.said("drawn 1"))
        before = desk.observe().screenshot.data
        desk.act(A.Click(x=win["x"] + win["width"] * 3 // 4, y=y))  # the half where nothing happens
        how = settled(desk)
        # It ended because the app had handled the click and drew nothing, not at the 5 s bound.
        assert how["changed"] is False and how["ended"] == "idle", how
        assert desk.observe().screenshot.data == before


def test_keys_wait_for_an_app_still_busy_with_the_previous_one(desk: Any, tmp_path: Path) -> None:
    # The app needs 150 ms for Right and handles keys meanwhile (as LibreOffice does while it is busy):
    # an "x" sent before it is done lands before the cursor moved.
    with app(desk, tmp_path, "--busy-ms", "150") as running:
        app_window(desk)
        desk.act(A.Press(key="right"))
        desk.act(A.Type(content="x"))
        assert wait_for(lambda: any(line.startswith("key ") for line in running.lines)), running.lines
        assert running.said("key 1 x"), running.lines


def test_typing_waits_for_a_window_to_take_the_focus(desk: Any, tmp_path: Path) -> None:
    with app(desk, tmp_path, "--map-after", "1.0") as running:
        assert not running.said("mapped")
        desk.act(A.Type(content="ab"))  # no window has the focus yet: it waits for one
        assert wait_for(lambda: running.said("key 0 b")), running.lines
        assert [line for line in running.lines if line.startswith("key")] == ["key 0 a", "key 0 b"]


@contextmanager
def ready_within(sb: Any, ms: float) -> Iterator[None]:
    old = sb.x.settle_conf
    sb.x.settle_conf = dataclasses.replace(old, ready_ms=ms)
    try:
        yield
    finally:
        sb.x.settle_conf = old


def test_input_the_app_cannot_take_is_not_delivered_and_says_why(desk: Any, tmp_path: Path) -> None:
    assert issubclass(InputNotDelivered, ActionFailed) and issubclass(InputNotDelivered, ActionRejected)
    with ready_within(desk, 300), pytest.raises(InputNotDelivered, match="no window has the keyboard focus"):
        desk.act(A.Type(content="lost"))
    with app(desk, tmp_path, "--hang") as running:
        app_window(desk)
        assert wait_for(lambda: running.said("focused"))
        with ready_within(desk, 300), pytest.raises(InputNotDelivered, match="still busy"):
            desk.act(A.Type(content="lost"))
        assert not any(line.startswith("key") for line in running.lines)
