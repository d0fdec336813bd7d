"""A sandbox as the agent sees it (`agent_core.env.Env`): a leased remote one, or a provider in process.

Observation modes (`a11y`): False, the screenshot only; True, plus the provider's accessibility tree
(Playwright's aria snapshot on a browser: no coordinates); "elements", plus a compact list of the
page's visible elements with their screen centres (browser sandboxes, from the `dom` call), which a
text-only model can act on:

    label "kiwi" @(40,140)
    input[type=checkbox] checked @(12,140)
    input[type=text] "" focused @(80,110)
    button "Submit" @(67,152)

One line per visible element on screen that has text of its own or is interactive, in document
order, capped at ELEMENT_LINES. On a MiniWoB page the whole body is read (jQuery UI puts dialogs and
autocomplete menus outside the task's #wrap) but the page's chrome is left out: the instruction box
(the instruction is in the prompt already, and its highlighted words would come apart from it) and
the reward display beside the task. Other platforms fall back to the accessibility tree.
"""

from __future__ import annotations

import base64
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from agent_core.actions import Action
from agent_core.env import ExecOutput, Obs
from sandbox_workers.base import ImageFormat, Observation, Provider, SandboxPathError, perform
from sandbox_workers.client import LeasedSandbox
from sandbox_workers.devtools_routes import local_devtools
from sandbox_workers.fetch import FetchCache

# The task platform a sandbox provider serves (android sandboxes take the mobile action space).
PROVIDER_PLATFORMS = {"xdesktop": "desktop", "browser": "browser", "android": "android"}

A11yMode = bool | Literal["elements"]
ELEMENT_LINES = 60
"""Most element lines an observation carries (a small model's context is short)."""
ELEMENT_TEXT_CHARS = 80
INTERACTIVE_TAGS = frozenset({"input", "button", "a", "select", "textarea", "label"})
PAGE_SELECTOR = "body *"
MINIWOB_CHROME = ("query", "reward-display", "click-canvas")
"""Ids of a MiniWoB page's boxes left out of its element list, with everything centred inside them."""
_DOM_MAX_ELEMENTS = 400


def to_obs(observation: Observation) -> Obs:
    """The agent's view of a sandbox observation."""
    shot = observation.screenshot
    return Obs(
        screenshot=shot.data,
        width=shot.width,
        height=shot.height,
        mime=shot.content_type,
        a11y=observation.a11y or observation.dom,
        info=dict(observation.info),
    )


def _quoted(text: str) -> str:
    text = " ".join(text.split())
    if len(text) > ELEMENT_TEXT_CHARS:
        text = text[: ELEMENT_TEXT_CHARS - 1] + "…"
    return json.dumps(text, ensure_ascii=False)


def element_line(element: Mapping[str, Any]) -> str | None:
    """One element as `tag "text" [state] @(cx,cy)`; None for one with no text that does nothing."""
    tag = str(element.get("tag", "")).lower()
    text = str(element.get("text") or "").strip()
    label = str(element.get("label") or "").strip()
    if not tag or (not text and not label and tag not in INTERACTIVE_TAGS):
        return None
    kind = element.get("type")
    parts = [f"{tag}[type={kind}]" if tag == "input" and kind else tag]
    if tag in ("input", "textarea", "select") and kind not in ("checkbox", "radio"):
        # A field shows its value (what was typed so far), even when empty.
        parts.append(_quoted(str(element.get("value") or "")))
    elif text or label:
        parts.append(_quoted(text or label))
    if label and text and label != text:
        parts.append(f"label={_quoted(label)}")
    if kind in ("checkbox", "radio") and "checked" in element:
        parts.append("checked" if element["checked"] else "unchecked")
    if element.get("focused"):
        parts.append("focused")
    try:
        parts.append(f"@({int(element['cx'])},{int(element['cy'])})")
    except (KeyError, TypeError, ValueError):
        return None
    return " ".join(parts)


def _box(element: Mapping[str, Any]) -> tuple[float, float, float, float]:
    left, top = float(element.get("left", 0)), float(element.get("top", 0))
    return left, top, left + float(element.get("width", 0)), top + float(element.get("height", 0))


def _centre(element: Mapping[str, Any]) -> tuple[float, float] | None:
    try:
        return float(element["cx"]), float(element["cy"])
    except (KeyError, TypeError, ValueError):
        return None


def element_list(
    elements: Sequence[Mapping[str, Any]],
    *,
    limit: int = ELEMENT_LINES,
    skip: Sequence[str] = (),
    screen: tuple[int, int] | None = None,
) -> str:
    """The observation text of a `dom` result's elements: one line each, at most `limit` lines.

    Elements whose id is in `skip` are left out with everything centred inside their boxes; with
    `screen`, so is every element centred off the screen (it cannot be clicked)."""
    boxes = [_box(e) for e in elements if e.get("id") in skip]
    lines: list[str] = []
    for element in elements:
        centre = _centre(element)
        if centre is None or element.get("id") in skip:
            continue
        x, y = centre
        if any(x0 <= x <= x1 and y0 <= y <= y1 for x0, y0, x1, y1 in boxes):
            continue
        if screen is not None and not (0 <= x < screen[0] and 0 <= y < screen[1]):
            continue
        line = element_line(element)
        if line is not None:
            lines.append(line)
    if len(lines) > limit:
        lines = lines[:limit] + [f"… {len(lines) - limit} more elements"]
    return "\n".join(lines)


class SandboxEnv:
    """Adapts a `LeasedSandbox` (over HTTP) or an in-process `Provider` to `agent_core.env.Env`."""

    def __init__(
        self,
        target: LeasedSandbox | Provider,
        *,
        platform: str,
        fmt: ImageFormat = "png",
        a11y: A11yMode = False,
        quality: int = 80,
    ) -> None:
        if a11y not in (True, False, "elements"):
            raise ValueError(f"a11y must be true, false or 'elements', got {a11y!r}")
        self.target = target
        self.platform = platform
        self.fmt: ImageFormat = fmt
        self.a11y: A11yMode = a11y
        self.quality = quality

    @property
    def _elements(self) -> bool:
        return self.a11y == "elements" and self.platform == "browser"

    @property
    def _tree(self) -> bool:
        # The elements mode needs the `dom` call; elsewhere the accessibility tree stands in for it.
        return self.a11y is True or (self.a11y == "elements" and self.platform != "browser")

    def observe(self) -> Obs:
        """The screen now."""
        obs = to_obs(self.target.observe(fmt=self.fmt, a11y=self._tree, quality=self.quality))
        return self._with_elements(obs)

    def act(self, action: Action) -> Obs:
        """Perform `action` and return the screen after it (one round trip for a leased sandbox, plus
        one for the element list in the elements mode)."""
        if isinstance(self.target, LeasedSandbox):
            observation = self.target.act(action, fmt=self.fmt, a11y=self._tree, quality=self.quality)
            return self._with_elements(to_obs(observation))
        # In process, as the host does it: an SDK action's result rides along, a refusal is ActionFailed.
        result = perform(self.target, action)
        obs = self.observe()
        if result is not None:
            obs = replace(obs, info={**obs.info, "result": result})
        return obs

    def _with_elements(self, obs: Obs) -> Obs:
        if not self._elements:
            return obs
        result = self.call("dom", selector=PAGE_SELECTOR, max_elements=_DOM_MAX_ELEMENTS)
        found = result.get("elements") if isinstance(result, Mapping) else None
        elements = [e for e in found or () if isinstance(e, Mapping)]
        skip = MINIWOB_CHROME if "utterance" in obs.info else ()
        text = element_list(elements, skip=skip, screen=(obs.width, obs.height))
        return Obs(
            screenshot=obs.screenshot,
            width=obs.width,
            height=obs.height,
            mime=obs.mime,
            a11y=text,
            info=obs.info,
        )

    def exec(self, command: str, *, timeout: float = 30.0) -> ExecOutput:
        """Run a shell command inside the sandbox."""
        out = self.target.exec(command, timeout=timeout)
        return ExecOutput(
            exit_code=out.exit_code, stdout=out.stdout, stderr=out.stderr, timed_out=out.timed_out
        )

    def put_file(self, path: str, data: bytes) -> None:
        """Write a workspace file."""
        self.target.put_file(path, data)

    def get_file(self, path: str) -> bytes:
        """Read a workspace file; a file that cannot be read (missing, not regular) is FileNotFoundError."""
        try:
            return self.target.get_file(path)
        except SandboxPathError as exc:
            raise FileNotFoundError(str(exc)) from None

    def call(self, method: str, **params: Any) -> Any:
        """A provider-specific operation."""
        if isinstance(self.target, LeasedSandbox):
            return self.target.call(method, **params)
        if method == "fetch":
            return local_fetch(self.target, params)
        if method == "devtools":
            return local_devtools(self.target)
        result: Mapping[str, Any] | Any = self.target.call(method, params)
        return result


_LOCAL_FETCH: dict[tuple[str, ...], FetchCache] = {}


def local_fetch(provider: Provider, params: Mapping[str, Any]) -> dict[str, Any]:
    """`fetch` for a sandbox driven in this process (no sandbox host between): the same cache and
    mirror a host uses (FLYWHEEL_VAR_DIR/fetch-cache, SANDBOX_FETCH_MIRROR), fetched here, never in
    the sandbox."""
    var = os.environ.get("FLYWHEEL_VAR_DIR", "var")
    settings = ("SANDBOX_FETCH_MIRROR", "SANDBOX_FETCH_OFFLINE", "SANDBOX_FETCH_ALLOW_NETS")
    key = (var, *(os.environ.get(k, "") for k in settings))
    if key not in _LOCAL_FETCH:
        _LOCAL_FETCH[key] = FetchCache.from_env(Path(var) / "fetch-cache")
    url = str(params.get("url", ""))
    data, digest, source = _LOCAL_FETCH[key].get(url, timeout=float(params.get("timeout", 120)))
    result: dict[str, Any] = {"url": url, "size": len(data), "sha256": digest, "source": source}
    if params.get("path") is None:
        return {**result, "content_b64": base64.b64encode(data).decode("ascii")}
    provider.put_file(str(params["path"]), data)
    return {**result, "path": params["path"]}
