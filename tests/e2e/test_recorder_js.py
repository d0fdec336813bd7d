"""recorder.js in a real Chromium: what it sends for real input merges into the expected actions."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, Page

from agent_core import actions as A
from agent_core.data.recording import Commit, EventMerger, RawEvent

pytestmark = pytest.mark.slow

RECORDER_JS = Path(__file__).resolve().parents[2] / "static" / "js" / "recorder.js"
PAGE = """<!doctype html><html><body style="margin:0">
<div id="screen" style="position:absolute;left:0;top:0;width:400px;height:300px;background:#ccc"></div>
<div style="height:3000px"></div>
</body></html>"""
# The page's screen shows the sandbox at half size: screen pixels are twice the CSS pixels.
ATTACH = """() => {
  window.sent = [];
  const el = document.getElementById("screen");
  const r = el.getBoundingClientRect();
  const inside = (x, y) => x >= r.left && x < r.right && y >= r.top && y < r.bottom;
  const toScreen = (x, y) => (inside(x, y) ? { x: (x - r.left) * 2, y: (y - r.top) * 2 } : null);
  window.rec = FlywheelRecorder.attach(el, { toScreen, send: (m) => window.sent.push(m) });
}"""


@pytest.fixture
def page(browser: Browser) -> Any:
    context = browser.new_context()
    context.set_default_timeout(10_000)
    page = context.new_page()
    page.set_content(PAGE)
    page.add_script_tag(content=RECORDER_JS.read_text(), type="module")
    page.wait_for_function("typeof window.FlywheelRecorder === 'object'")
    page.evaluate(ATTACH)
    yield page
    context.close()


def sent_events(page: Page) -> list[dict[str, Any]]:
    messages = page.evaluate("window.sent")
    assert all(m["type"] == "input" and m["events"] for m in messages)
    return [ev for m in messages for ev in m["events"]]


def wait_for_kind(page: Page, kind: str, count: int = 1) -> None:
    page.wait_for_function(
        "([kind, n]) => window.sent.flatMap((m) => m.events).filter((e) => e.kind === kind).length >= n",
        arg=[kind, count],
    )


def test_click_drag_typing_hotkey_and_wheel_merge_into_actions(page: Page) -> None:
    page.mouse.click(50, 40)
    page.mouse.move(100, 100)
    page.mouse.down()
    page.mouse.move(150, 130, steps=5)
    page.mouse.up()
    page.keyboard.type("Hi")
    page.keyboard.press("Enter")
    page.keyboard.press("Control+a")
    page.mouse.move(200, 100)
    page.mouse.wheel(0, 200)
    wait_for_kind(page, "wheel")

    events = sent_events(page)
    kinds = [e["kind"] for e in events]
    assert kinds[:2] == ["down", "up"] and {"move", "key", "wheel"} <= set(kinds)
    assert events[0] == {"kind": "down", "t": events[0]["t"], "x": 100, "y": 80, "button": "left"}
    keys = [(e["key"], e["text"], e["mods"]) for e in events if e["kind"] == "key"]
    assert keys == [
        ("h", "H", keys[0][2]),  # Playwright may or may not hold shift for a capital
        ("i", "i", []),
        ("enter", "", []),
        ("ctrl", "", ["ctrl"]),
        ("a", "a", ["ctrl"]),
    ]
    assert [e["dy"] for e in events if e["kind"] == "wheel"] == [2]

    merger = EventMerger(screen=(800, 600))
    ops = [op for ev in events for op in merger.feed(RawEvent.from_json(ev))] + merger.flush()
    assert [op.action for op in ops if isinstance(op, Commit)] == [
        A.Click(x=100, y=80),
        A.Drag(x1=200, y1=200, x2=300, y2=260),
        A.Type(content="Hi\n"),
        A.Hotkey(keys=("ctrl", "a")),
        A.Scroll(x=400, y=200, direction="down", amount=2),
    ]


def test_named_keys_and_shifted_hotkeys(page: Page) -> None:
    page.focus("#screen")
    for combo in (
        "Escape",
        "Tab",
        "ArrowLeft",
        "PageDown",
        "F5",
        "Backspace",
        "Delete",
        "Control+Shift+Digit1",
        "Space",
    ):
        page.keyboard.press(combo)
    wait_for_kind(page, "key", 11)
    keys = [
        (e["key"], e["mods"])
        for e in sent_events(page)
        if e["kind"] == "key" and e["key"] not in ("ctrl", "shift")
    ]
    assert keys == [
        ("esc", []),
        ("tab", []),
        ("left", []),
        ("pagedown", []),
        ("f5", []),
        ("backspace", []),
        ("delete", []),
        ("1", ["ctrl", "shift"]),  # the key that types "!" is named by its position
        ("space", []),
    ]
    for ev in sent_events(page):
        RawEvent.from_json(ev)  # every one is valid for the server


def test_outside_points_are_ignored_and_disabled_sends_nothing(page: Page) -> None:
    page.mouse.click(50, 350)  # below the screen element
    page.evaluate("window.rec.setEnabled(false)")
    page.mouse.click(50, 40)
    page.keyboard.press("a")
    page.evaluate("window.rec.setEnabled(true)")
    page.keyboard.press("b")
    wait_for_kind(page, "key")
    assert [(e["kind"], e.get("key")) for e in sent_events(page)] == [("key", "b")]


def test_right_click_and_keys_stay_on_the_page(page: Page) -> None:
    page.mouse.click(50, 40, button="right")
    wait_for_kind(page, "up")
    assert [(e["kind"], e["button"]) for e in sent_events(page)] == [("down", "right"), ("up", "right")]
    page.evaluate("window.scrollTo(0, 0)")
    page.keyboard.press("PageDown")  # focus is on the screen: the page must not scroll
    wait_for_kind(page, "key")
    assert page.evaluate("window.scrollY") == 0
