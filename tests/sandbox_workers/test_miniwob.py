"""MiniWoB++ through a real (confined) browser sandbox: tasks solved by scripted clicks and typing."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_core.actions import Click, Type
from sandbox_workers import miniwob
from sandbox_workers.base import Profile
from sandbox_workers.providers.browser import BrowserProvider
from sandbox_workers.providers.browser.provider import InvalidParams
from tests.procs import worker_slot

needs_chromium = pytest.mark.skipif(not os.access("/usr/bin/chromium", os.X_OK), reason="no Chromium")


def reachable_root(base: Path) -> Path:
    """`base`, with o+x on its parents: the sandbox uid must traverse them (pytest's are 0700)."""
    for parent in [base, *base.parents]:
        if parent == Path("/tmp") or parent == Path("/"):
            break
        parent.chmod(parent.stat().st_mode | 0o011)
    return base


def test_tasks_are_discovered_from_the_package() -> None:
    tasks = miniwob.tasks()
    assert len(tasks) >= 120
    assert {"click-button", "enter-text", "click-checkboxes", "focus-text"} <= set(tasks)
    assert all(p.suffix == ".html" and p.is_file() for p in tasks.values())
    assert (miniwob.html_dir() / "core" / "core.js").is_file()
    assert miniwob.task_url("click-button", "/opt/miniwob") == "file:///opt/miniwob/miniwob/click-button.html"
    for bad in ("nope", "../core/core", "click-button.html", ""):
        with pytest.raises(miniwob.MiniWobError):
            miniwob.task_path(bad)


def test_file_urls_pass_only_as_plain_paths_inside_the_folder(tmp_path: Path) -> None:
    html = tmp_path / "html"
    (html / "miniwob").mkdir(parents=True)
    (html / "miniwob" / "task.html").write_text("<p>task</p>")
    (html / "miniwob" / "escape.html").symlink_to("/etc/passwd")
    (html / "linked").symlink_to("/etc")

    def ok(url: str) -> str:
        return miniwob.allowed_file_url(url, base="/opt/miniwob", host_dir=html)

    page = "file:///opt/miniwob/miniwob/task.html"
    assert ok(page) == page
    assert ok("File://LocalHost/opt/miniwob/miniwob/task.html?a=%2e#x") == page + "?a=%2e#x"
    for url in ("file:///opt/miniwob/miniwob/escape.html", "file:///opt/miniwob/linked/passwd"):
        with pytest.raises(miniwob.MiniWobError, match="symlink"):
            ok(url)
    for url in (
        "file:///opt/miniwob/./miniwob/task.html",
        "file:///opt/miniwob//miniwob/task.html",
        "file:///opt/miniwob/miniwob/task.html\x00",
        "file:///opt/miniwob/mini%77ob/task.html",
        "file:///opt/miniwob/.hidden",
        "file:///opt/miniwob",
        "http:///opt/miniwob/miniwob/task.html",
    ):
        with pytest.raises(miniwob.MiniWobError, match="plain paths"):
            ok(url)


def test_fields_and_success_follow_the_package() -> None:
    assert miniwob.extract_fields("click-button", 'Click on the "Ok" button.') == {"target": "Ok"}
    assert miniwob.extract_fields("no-such-task", "whatever") == {}
    assert miniwob.success({"done": True, "raw_reward": 1.0, "reward": 0.8})
    assert not miniwob.success({"done": True, "raw_reward": -1.0})
    assert not miniwob.success({"done": False, "raw_reward": 0})


@pytest.fixture(scope="module")
def sb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserProvider]:
    root = reachable_root(tmp_path_factory.mktemp("miniwob")) / "sb"
    provider = BrowserProvider(sandbox_id="mwtest", profile=Profile(name="b", provider="browser"), root=root)
    provider.slot = worker_slot(61)
    provider.start()
    yield provider
    provider.stop()
    shutil.rmtree(root, ignore_errors=True)


def elements(sb: BrowserProvider, selector: str = "#area *") -> list[dict[str, Any]]:
    result = sb.call("dom", {"selector": selector})
    return list(result["elements"])


def find(sb: BrowserProvider, *, tag: str, text: str | None = None) -> dict[str, Any]:
    for e in elements(sb):
        if e["tag"] == tag and (text is None or e.get("text") == text):
            return e
    raise AssertionError(f"no <{tag}> {text!r} on the page: {elements(sb)}")


def click(sb: BrowserProvider, e: dict[str, Any]) -> None:
    sb.act(Click(x=e["cx"], y=e["cy"]))


def reward(sb: BrowserProvider) -> dict[str, Any]:
    return dict(sb.call("miniwob_reward", {}))


@needs_chromium
@pytest.mark.slow
def test_click_button_right_and_wrong(sb: BrowserProvider) -> None:
    ep = sb.call("miniwob_start", {"task": "click-button", "seed": 3})
    assert ep["utterance"] == 'Click on the "no" button.' and ep["fields"] == {"target": "no"}
    assert ep["time_limit_ms"] == 10000
    assert reward(sb) == {**reward(sb), "done": False, "reward": 0, "raw_reward": 0, "success": 0}
    info = sb.observe(fmt="jpeg").info
    assert info["utterance"] == ep["utterance"] and info["done"] is False
    click(sb, find(sb, tag="button", text="no"))
    r = reward(sb)
    # The package's reward: raw 1 for the right button, scaled down by the time taken (0 < reward <= 1).
    assert r["done"] is True and r["raw_reward"] == 1 and 0 < r["reward"] <= 1 and r["success"] == 1

    again = sb.call("miniwob_start", {"task": "click-button", "seed": 3})
    assert again["utterance"] == ep["utterance"]  # the same seed, the same problem
    click(sb, find(sb, tag="button", text="Okay"))
    r = reward(sb)
    assert r["done"] is True and r["raw_reward"] == -1 and r["reward"] == -1 and r["success"] == 0


@needs_chromium
@pytest.mark.slow
def test_enter_text_typed_and_submitted(sb: BrowserProvider) -> None:
    ep = sb.call("miniwob_start", {"task": "enter-text", "seed": 1})
    assert ep["fields"] == {"target": "Jerald"}
    click(sb, find(sb, tag="input"))
    sb.act(Type(content=ep["fields"]["target"]))
    assert find(sb, tag="input")["value"] == "Jerald"
    click(sb, find(sb, tag="button", text="Submit"))
    r = reward(sb)
    assert r["done"] and r["raw_reward"] == 1 and r["success"] == 1

    # Typing the wrong text is a failed episode (raw reward -1), not an error.
    sb.call("miniwob_start", {"task": "enter-text", "seed": 2})
    click(sb, find(sb, tag="input"))
    sb.act(Type(content="Nobody"))
    click(sb, find(sb, tag="button", text="Submit"))
    r = reward(sb)
    assert r["done"] and r["raw_reward"] == -1 and r["success"] == 0


@needs_chromium
@pytest.mark.slow
def test_click_checkboxes_and_focus_text(sb: BrowserProvider) -> None:
    ep = sb.call("miniwob_start", {"task": "click-checkboxes", "seed": 2})
    targets = {v for k, v in ep["fields"].items() if k.startswith("target")}
    assert targets == {"fzzqo", "NYYyS82"}
    for e in elements(sb):
        if e["tag"] == "label" and e.get("text") in targets:
            click(sb, e)  # a click on the label toggles its checkbox
    checked = [e for e in elements(sb) if e.get("type") == "checkbox" and e.get("checked")]
    assert len(checked) == 2
    click(sb, find(sb, tag="button", text="Submit"))
    assert reward(sb)["success"] == 1

    sb.call("miniwob_start", {"task": "focus-text", "seed": 1})
    click(sb, find(sb, tag="input"))
    r = reward(sb)
    assert r["done"] and r["raw_reward"] == 1


@needs_chromium
@pytest.mark.slow
def test_paused_episode_keeps_its_time_limit_frozen(sb: BrowserProvider) -> None:
    ep = sb.call("miniwob_start", {"task": "click-button", "seed": 1, "paused": True})
    assert ep["virtual_time"] == "paused"
    time.sleep(1.2)
    assert reward(sb)["done"] is False
    assert elements(sb, "#timer-countdown")[0]["text"] == "10 / 10sec"
    click(sb, find(sb, tag="button", text="Ok"))
    r = reward(sb)
    # No page time passed, so the time-scaled reward is the full 1.0.
    assert r["done"] and r["reward"] == 1 and r["raw_reward"] == 1

    sb.call("miniwob_start", {"task": "click-button", "seed": 1, "paused": True})
    sb.call("virtual_time", {"mode": "advance", "ms": 10500})  # past the 10 s limit
    r = reward(sb)
    assert r["done"] and r["raw_reward"] == -1 and r["reason"] == "timed out"


@needs_chromium
def test_bad_miniwob_calls_are_rejected(sb: BrowserProvider) -> None:
    with pytest.raises(InvalidParams):
        sb.call("miniwob_start", {"task": "no-such-task"})
    with pytest.raises(InvalidParams):
        sb.call("miniwob_start", {"task": "click-button", "seed": [1]})
    sb.call("goto", {"url": "about:blank"})
    with pytest.raises(InvalidParams):
        sb.call("miniwob_reward", {})  # no episode was started on this page
    assert "click-button" in sb.call("miniwob_tasks", {})["tasks"]


@needs_chromium
def test_an_episode_whose_page_was_left_is_a_failure(sb: BrowserProvider) -> None:
    """An agent that reloads or navigates away from the task gets a failed episode, not an error."""
    sb.call("miniwob_start", {"task": "click-button", "seed": 3})
    assert reward(sb)["success"] == 0 and not reward(sb)["done"]

    async def leave() -> None:  # as a link or the history would (the random policy manages it)
        async with sb.page.expect_navigation():
            await sb.page.evaluate("setTimeout(() => { location.href = 'about:blank'; }, 0)")

    sb._run(leave, what="leave")
    r = reward(sb)
    assert r["success"] == 0 and r["reward"] == 0 and "left task click-button" in r["reason"], r
