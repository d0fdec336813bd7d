"""The "elements" observation: the page's visible elements with screen centres, for text-only models.

A fake target stands in for the sandbox at the one boundary (observe / act / call); one test goes
through a real browser sandbox on a MiniWoB page.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from agent_core.actions import Click
from sandbox_workers.agent_env import ELEMENT_LINES, SandboxEnv, element_line, element_list
from sandbox_workers.base import Observation, Profile, Screenshot
from tests.procs import worker_slot
from tests.sandbox_workers.conftest import reachable

PNG_1X1 = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415408d763f8cfc000000301010018dd8db00000000049454e44ae426082"
)
ELEMENTS = [
    {"tag": "div", "id": "wrap", "left": 0, "top": 0, "width": 160, "height": 210, "cx": 80, "cy": 105},
    {"tag": "div", "id": "query", "text": "Enter  into the field.", "left": 0, "top": 0, "width": 160,
     "height": 50, "cx": 80, "cy": 25},
    {"tag": "span", "text": "kiwi", "left": 33, "top": 3, "width": 30, "height": 11, "cx": 48, "cy": 9},
    {"tag": "input", "type": "text", "value": "", "cx": 80, "cy": 110, "focused": True},
    {"tag": "input", "type": "checkbox", "value": "on", "checked": True, "cx": 12, "cy": 140},
    {"tag": "input", "type": "radio", "value": "on", "checked": False, "cx": 12.4, "cy": 160},
    {"tag": "label", "text": "kiwi", "cx": 40, "cy": 140},
    {"tag": "button", "text": "Submit", "cx": 67, "cy": 152},
    {"tag": "button", "label": "Close", "cx": 150, "cy": 55},
    {"tag": "textarea", "value": "hello\nworld", "cx": 60, "cy": 190},
    {"tag": "div", "id": "reward-display", "left": 165, "top": 0, "width": 160, "height": 210, "cx": 245,
     "cy": 105},
    {"tag": "label", "text": "Last reward:", "cx": 209, "cy": 18},
    {"tag": "div", "text": "off screen", "cx": -1, "cy": 209},
]  # fmt: skip
TASK_AREA = [
    'input[type=text] "" focused @(80,110)',
    "input[type=checkbox] checked @(12,140)",
    "input[type=radio] unchecked @(12,160)",
    'label "kiwi" @(40,140)',
    'button "Submit" @(67,152)',
    'button "Close" @(150,55)',
    'textarea "hello world" @(60,190)',
]
MINIWOB = "\n".join(TASK_AREA)
PAGE = "\n".join(
    [
        'div "Enter into the field." @(80,25)',
        'span "kiwi" @(48,9)',
        *TASK_AREA,
        'label "Last reward:" @(209,18)',
    ]
)


class FakeTarget:
    """A sandbox that records what it was asked; its page is `elements` (a MiniWoB page or not)."""

    def __init__(self, elements: list[dict[str, Any]], *, miniwob: bool = True, a11y: str = "tree") -> None:
        self.elements = elements
        self.miniwob = miniwob
        self.tree = a11y
        self.calls: list[tuple[str, dict[str, Any]]] = []
        self.observed: list[bool] = []
        self.acted: list[Any] = []

    def observe(self, *, fmt: str = "png", a11y: bool = False, quality: int = 80) -> Observation:
        self.observed.append(a11y)
        info = {"url": "file:///opt/miniwob/miniwob/enter-text.html"}
        if self.miniwob:
            info["utterance"] = "Enter kiwi into the field."
        return Observation(
            screenshot=Screenshot(PNG_1X1, "png", 400, 300), a11y=self.tree if a11y else None, info=info
        )

    def act(self, action: Any) -> None:
        self.acted.append(action)

    def call(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        self.calls.append((method, dict(params)))
        return {"url": "x", "elements": self.elements, "total": len(self.elements)}


def test_element_list_has_one_line_per_element_with_text_or_a_use():
    assert element_list(ELEMENTS, screen=(400, 300)) == PAGE
    # Off-screen elements stay when the screen size is not known.
    assert element_list(ELEMENTS).endswith('\ndiv "off screen" @(-1,209)')


def test_element_list_leaves_out_skipped_boxes_and_what_lies_inside_them():
    assert element_list(ELEMENTS, skip=("query", "reward-display"), screen=(400, 300)) == MINIWOB


def test_element_line_skips_silent_elements_and_keeps_a_label_beside_text():
    assert element_line({"tag": "span", "cx": 1, "cy": 2}) is None
    assert element_line({"tag": "span", "text": "  ", "cx": 1, "cy": 2}) is None
    assert element_line({"tag": "a", "text": "More", "label": "Read more", "cx": 3, "cy": 4}) == (
        'a "More" label="Read more" @(3,4)'
    )
    assert element_line({"tag": "select", "value": "b", "cx": 5, "cy": 6}) == 'select "b" @(5,6)'
    assert element_line({"tag": "a", "text": "no box"}) is None
    long = element_line({"tag": "p", "text": "x" * 200, "cx": 0, "cy": 0})
    assert long is not None and len(long) < 100 and long.endswith('…" @(0,0)')


def test_element_list_is_capped():
    many = [{"tag": "span", "text": f"item {i}", "cx": i, "cy": i} for i in range(ELEMENT_LINES + 5)]
    lines = element_list(many).splitlines()
    assert len(lines) == ELEMENT_LINES + 1
    assert lines[0] == 'span "item 0" @(0,0)' and lines[-1] == "… 5 more elements"


def test_elements_mode_observes_and_acts_on_a_miniwob_page_without_its_chrome():
    target = FakeTarget(ELEMENTS)
    env = SandboxEnv(target, platform="browser", a11y="elements")  # type: ignore[arg-type]
    obs = env.observe()
    assert obs.a11y == MINIWOB and (obs.width, obs.height) == (400, 300)
    assert obs.info["utterance"] == "Enter kiwi into the field."
    after = env.act(Click(x=67, y=152))
    assert after.a11y == MINIWOB and target.acted == [Click(x=67, y=152)]
    # The aria snapshot is not asked for (the element list replaces it).
    assert target.observed == [False, False]
    assert target.calls == [("dom", {"selector": "body *", "max_elements": 400})] * 2


def test_elements_mode_keeps_everything_on_screen_off_miniwob():
    target = FakeTarget(ELEMENTS, miniwob=False)
    obs = SandboxEnv(target, platform="browser", a11y="elements").observe()  # type: ignore[arg-type]
    assert obs.a11y == PAGE


def test_elements_mode_off_the_browser_gives_the_accessibility_tree():
    target = FakeTarget(ELEMENTS, a11y="window 'Terminal'")
    obs = SandboxEnv(target, platform="desktop", a11y="elements").observe()  # type: ignore[arg-type]
    assert obs.a11y == "window 'Terminal'" and target.observed == [True] and target.calls == []


def test_other_modes_are_unchanged_and_a_bad_mode_is_refused():
    target = FakeTarget(ELEMENTS)
    assert SandboxEnv(target, platform="browser").observe().a11y is None  # type: ignore[arg-type]
    assert SandboxEnv(target, platform="browser", a11y=True).observe().a11y == "tree"  # type: ignore[arg-type]
    assert target.calls == []
    with pytest.raises(ValueError, match="elements"):
        SandboxEnv(target, platform="browser", a11y="dom")  # type: ignore[arg-type]


# --- a real browser sandbox ------------------------------------------------------------------------

needs_chromium = pytest.mark.skipif(
    not os.access("/usr/bin/chromium", os.X_OK), reason="needs Debian's /usr/bin/chromium (scripts/setup.sh)"
)


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from sandbox_workers.providers.browser import BrowserProvider

    root = reachable(tmp_path_factory.mktemp("elements")) / "sb"
    provider = BrowserProvider(
        sandbox_id="elements", profile=Profile(name="b", provider="browser"), root=root
    )
    provider.slot = worker_slot(67)
    provider.start()
    yield provider
    provider.stop()
    shutil.rmtree(root, ignore_errors=True)


@needs_chromium
@pytest.mark.slow
def test_a_text_model_can_click_the_button_from_the_element_list(browser):
    env = SandboxEnv(browser, platform="browser", a11y="elements")
    started = env.call("miniwob_start", task="click-button", seed=3)
    obs = env.observe()
    assert obs.a11y is not None
    lines = obs.a11y.splitlines()
    # The task area only (the instruction and the reward display are chrome), each with its centre.
    assert not any("reward" in line or "Click on" in line for line in lines), lines
    target = started["fields"]["target"]
    button = next(line for line in lines if line.startswith(f'button "{target}" @('))
    x, y = (int(v) for v in button.rsplit("@(", 1)[1].rstrip(")").split(","))
    assert 0 < x < obs.width and 0 < y < obs.height
    after = env.act(Click(x=x, y=y))
    reward = env.call("miniwob_reward")
    assert reward["done"] is True and reward["success"] == 1, (lines, reward)
    assert after.a11y is not None and after.a11y != ""
