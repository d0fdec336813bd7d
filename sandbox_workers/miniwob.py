"""MiniWoB++ tasks shipped in the `miniwob` pip package, and the page-side JavaScript of browser sandboxes.

The package keeps each task as a self-contained page under `miniwob/html/miniwob/<task>.html` that loads
`../core/core.js` (and `../common/…`), so the whole `html/` folder is what a browser sandbox needs
(bound read-only at `SANDBOX_HTML_DIR` when confined).

An episode starts the way the package's `SeleniumInstance.begin_task` does it: `core.endEpisode(0)`
(force-stop, a no-op before the first episode), `Math.seedrandom(seed)`, `core.setDataMode(mode)`,
`core.startEpisodeReal()`, then wait for `WOB_TASK_READY`. The seed is handed to `Math.seedrandom`
with its JSON type kept: seedrandom flattens the number 7 and the string "7" differently, and the
package passes Python's repr, so an int seed here gives the same problem as the package's int seed.

Rewards are the package's: `reward` (WOB_REWARD_GLOBAL) is in [-1, 1], a positive reward scaled down by
the time taken for most tasks; `raw_reward` (WOB_RAW_REWARD_GLOBAL) is the same without the time
penalty; both are 0 until `done`. `success` is our 0/1 view: done and raw_reward >= 1.0 (the package's
`get_binary_reward`/`get_thresholded_reward` with threshold 1).

The other scripts here are what the browser provider evaluates on any page (callers never send
JavaScript): page info (`INFO_JS`), the list of visible elements with their boxes (`DOM_ELEMENTS_JS`)
and the page's localStorage for snapshots.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import re
from collections.abc import Awaitable, Callable
from functools import cache
from pathlib import Path
from typing import Any

from playwright.async_api import Page

SANDBOX_HTML_DIR = "/opt/miniwob"
"""Where the package's html/ folder is bound inside a confined browser sandbox."""

_TASK_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")


class MiniWobError(ValueError):
    """An unknown task name, a page that is not a MiniWoB task, or an episode that did not start."""


@cache
def html_dir() -> Path:
    """The package's html/ folder (found without importing the package, which registers gym envs)."""
    spec = importlib.util.find_spec("miniwob")
    if spec is None or not spec.submodule_search_locations:
        raise MiniWobError("the miniwob package is not installed")
    path = Path(next(iter(spec.submodule_search_locations))) / "html"
    if not (path / "core" / "core.js").is_file():
        raise MiniWobError(f"the miniwob package has no html/core/core.js under {path}")
    return path


@cache
def tasks() -> dict[str, Path]:
    """Task name → host path of its page, for every page under html/miniwob (sorted by name)."""
    return {p.stem: p for p in sorted((html_dir() / "miniwob").glob("*.html"))}


def task_path(name: str) -> Path:
    """The host path of task `name`; raises MiniWobError for an unknown name."""
    if not isinstance(name, str) or not _TASK_NAME.match(name) or name not in tasks():
        raise MiniWobError(f"unknown MiniWoB task {name!r} ({len(tasks())} tasks, e.g. click-button)")
    return tasks()[name]


def task_url(name: str, base_dir: str) -> str:
    """The file:// URL of task `name` where the html/ folder is at `base_dir` (host or sandbox path)."""
    task_path(name)
    return f"file://{base_dir.rstrip('/')}/miniwob/{name}.html"


# A file:// URL a browser sandbox may open: exactly file://[localhost]/<plain segments>[?query][#fragment].
# Chromium reads a backslash as a slash, decodes %2e to a dot, drops tabs and newlines and folds the
# scheme's case before it resolves "..": a check of its own reading of anything looser can be fooled.
_FILE_URL = re.compile(r"(?i:file)://(?:(?i:localhost))?(/[^?#]*)(\?[^#]*)?(#.*)?", re.DOTALL)
_PLAIN_SEGMENT = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*")
_URL_UNSAFE = re.compile(r"[\x00-\x20\x7f\\]")


def allowed_file_url(url: str, *, base: str, host_dir: Path) -> str:
    """The canonical form of a file:// URL under the html/ folder (`base` as the browser sees it,
    `host_dir` on the host), to navigate to instead of `url`; MiniWobError for anything else.

    Only plain paths pass: no backslash, percent escape, control character or space anywhere, no
    "." or ".." segment, no host but localhost; and the file must not be a symlink out of the folder."""
    match = _FILE_URL.fullmatch(url) if not _URL_UNSAFE.search(url) else None
    path = match.group(1) if match else ""
    base_segments = base.strip("/").split("/")
    segments = path.split("/")[1:]
    inside = segments[len(base_segments) :]
    if (
        match is None
        or segments[: len(base_segments)] != base_segments
        or not inside
        or not all(_PLAIN_SEGMENT.fullmatch(seg) for seg in inside)
    ):
        raise MiniWobError(f"file:// URLs must be plain paths under the MiniWoB folder file://{base}/")
    root = host_dir.resolve()
    if not root.joinpath(*inside).resolve().is_relative_to(root):
        raise MiniWobError(f"{path} leads out of the MiniWoB folder (a symlink)")
    return f"file://{path}{match.group(2) or ''}{match.group(3) or ''}"


def extract_fields(name: str, utterance: str) -> dict[str, str]:
    """The task's key → value fields from its utterance with the package's extractor ({} if none)."""
    try:
        fields_mod = importlib.import_module("miniwob.fields")
        pairs = fields_mod.get_field_extractor(name)(utterance)
        return {str(k): str(v) for k, v in pairs}
    except Exception:  # a task without an extractor, or one whose regex does not match this utterance
        return {}


def success(state: dict[str, Any]) -> bool:
    """The 0/1 view of a reward state from `READ_JS`: done with a full raw reward."""
    return bool(state.get("done")) and float(state.get("raw_reward") or 0.0) >= 1.0


# --- JavaScript (run with Playwright's page.evaluate; the argument is passed as JSON) ------------------

IS_TASK_JS = """() => typeof window.core === 'object' && typeof window.genProblem === 'function'
  && typeof window.WOB_DONE_GLOBAL !== 'undefined'"""

START_JS = """({seed, mode}) => {
  if (typeof window.core !== 'object' || typeof window.genProblem !== 'function')
    throw new Error('not a MiniWoB task page');
  // window.onload runs core.startEpisode(), which builds the sync cover that startEpisodeReal hides;
  // no timers here: they would never fire while virtual time is paused.
  if (core.cover_div == null) core.startEpisode();
  core.endEpisode(0);
  if (seed !== null && seed !== undefined) Math.seedrandom(seed);
  core.setDataMode(mode);
  core.startEpisodeReal();
  return true;
}"""

READY_JS = "() => window.WOB_TASK_READY !== false"

UTTERANCE_JS = """() => {
  let u = core.getUtterance();
  if (u !== null && typeof u === 'object')
    return {utterance: String(u.utterance), fields: u.fields || null};
  return {utterance: String(u), fields: null};
}"""

READ_JS = """() => {
  if (typeof window.core !== 'object' || typeof window.WOB_DONE_GLOBAL === 'undefined') return null;
  return {
    done: !!WOB_DONE_GLOBAL,
    reward: Number(WOB_REWARD_GLOBAL) || 0,
    raw_reward: Number(WOB_RAW_REWARD_GLOBAL) || 0,
    reason: WOB_REWARD_REASON == null ? null : String(WOB_REWARD_REASON),
    episode: Number(WOB_EPISODE_ID) || 0,
    time_limit_ms: Number(core.EPISODE_MAX_TIME) || null,
  };
}"""

INFO_JS = """() => {
  const info = {url: location.href, title: document.title};
  if (typeof window.core === 'object' && typeof window.WOB_DONE_GLOBAL !== 'undefined') {
    let u = null;
    try {
      u = core.getUtterance();
      if (u !== null && typeof u === 'object') u = u.utterance;
    } catch (e) { u = null; }
    info.miniwob = {
      utterance: u == null ? null : String(u),
      done: !!WOB_DONE_GLOBAL,
      reward: Number(WOB_REWARD_GLOBAL) || 0,
      raw_reward: Number(WOB_RAW_REWARD_GLOBAL) || 0,
    };
  }
  return info;
}"""


# --- page-side JavaScript of every browser sandbox (not only MiniWoB pages) -------------------------

DOM_ELEMENTS_JS = """({selector, maxElements}) => {
  const nodes = document.querySelectorAll(selector || 'body *');
  const out = [];
  let total = 0;
  const r1 = (v) => Math.round(v * 10) / 10;
  for (const el of nodes) {
    const r = el.getBoundingClientRect();
    if (r.width <= 0 || r.height <= 0) continue;
    const st = getComputedStyle(el);
    if (st.visibility === 'hidden' || st.display === 'none') continue;
    total++;
    if (out.length >= maxElements) continue;
    let text = '';
    for (const c of el.childNodes) if (c.nodeType === 3) text += c.data;
    text = text.replace(/\\s+/g, ' ').trim().slice(0, 200);
    const e = {tag: el.tagName.toLowerCase(), left: r1(r.left), top: r1(r.top), width: r1(r.width),
               height: r1(r.height), cx: Math.round(r.left + r.width / 2),
               cy: Math.round(r.top + r.height / 2)};
    if (el.id) e.id = el.id;
    if (typeof el.className === 'string' && el.className) e.class = el.className;
    if (text) e.text = text;
    if (el instanceof HTMLInputElement || el instanceof HTMLTextAreaElement
        || el instanceof HTMLSelectElement) {
      e.value = String(el.value).slice(0, 200);
      if (el.type) e.type = el.type;
      if (el.type === 'checkbox' || el.type === 'radio') e.checked = el.checked;
    }
    const label = el.getAttribute('aria-label');
    if (label) e.label = label;
    if (document.activeElement === el) e.focused = true;
    out.push(e);
  }
  return {elements: out, total: total};
}"""

LOCAL_STORAGE_JS = """() => {
  try { return {origin: location.origin, items: Object.entries(localStorage)}; } catch (e) { return null; }
}"""
SET_LOCAL_STORAGE_JS = """({origin, items}) => {
  if (location.origin !== origin) return false;
  for (const [k, v] of items) localStorage.setItem(k, v);
  return true;
}"""


# --- episodes on a Playwright page (coroutines: run them on the Playwright loop) ---------------------


async def start_episode(
    page: Page,
    *,
    task: str,
    seed: Any,
    mode: str = "train",
    before_start: Callable[[], Awaitable[None]] | None = None,
) -> dict[str, Any]:
    """Start an episode of `task` on `page` (already showing the task's page), like the package does.

    `before_start` runs just before `core.startEpisodeReal()` (to pause virtual time, say, so that
    the episode's timer runs on page time). Returns {task, seed, utterance, fields, time_limit_ms}.
    """
    if not await page.evaluate(IS_TASK_JS):
        raise MiniWobError(f"{page.url} is not a MiniWoB task page")
    if before_start is not None:
        await before_start()
    await page.evaluate(START_JS, {"seed": seed, "mode": mode})
    for _ in range(40):  # flight tasks load an iframe first; the others are ready at once
        if await page.evaluate(READY_JS):
            break
        await asyncio.sleep(0.05)
    else:
        raise MiniWobError(f"MiniWoB task {task} did not become ready")
    utt = await page.evaluate(UTTERANCE_JS)
    state = await page.evaluate(READ_JS) or {}
    fields = utt.get("fields") or extract_fields(task, utt["utterance"])
    return {
        "task": task,
        "seed": seed,
        "utterance": utt["utterance"],
        "fields": fields,
        "time_limit_ms": state.get("time_limit_ms"),
    }


async def read_reward(page: Page) -> dict[str, Any]:
    """{done, reward, raw_reward, success, reason, episode, time_limit_ms} of the task on `page`."""
    state = await page.evaluate(READ_JS)
    if not state:
        raise MiniWobError("the page is not a MiniWoB task; call miniwob_start first")
    state["success"] = 1 if success(state) else 0
    return dict(state)
