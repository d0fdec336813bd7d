"""Browser sandboxes: Debian's Chromium, headless, driven by Playwright over CDP (pipe transport).

One Chromium process tree per sandbox, started through a wrapper script under the sandbox root that
records its pid and, confined, execs Chromium in bubblewrap as the sandbox's uid and cgroup (see
`chromium.prepare_launch`): Playwright's --remote-debugging-pipe fds 3/4 pass through sh and bwrap.
Chromium's own sandbox cannot nest inside bwrap, so it runs with --no-sandbox and bwrap is the
sandbox. The MiniWoB++ html/ folder is bound read-only at /opt/miniwob; the network is unshared
unless the profile has network. Profile option `confine: false` (or no bwrap) runs Chromium directly,
with a dead proxy instead of a network namespace: weaker, and file:// then sees the host.

Playwright objects live on the shared loop thread (`display.cdp.PlaywrightLoop`); each method submits a
coroutine and waits with a short timeout, and a closed pipe or a dead process is `EnvError` at once.

`call()` operations (JSON in and out; callers never supply JavaScript):

- goto {url} → {url, title, status, error}: about:blank, data:, file:// under the MiniWoB folder,
  http(s) only when the profile has network. A failed load is `error`, not an exception.
- miniwob_start {task, seed?, mode?="train", paused?=false} → {task, seed, utterance, fields,
  time_limit_ms, url, virtual_time}: loads the task page, seeds Math.seedrandom and starts the
  episode; `paused` pauses virtual time first, so the episode's time limit runs on page time.
- miniwob_reward {} → {done, reward, raw_reward, success, reason, episode, time_limit_ms}; reward and
  raw_reward are the package's (in [-1, 1]), success is 0/1 (done with raw_reward >= 1).
- virtual_time {mode: pause | advance (ms) | accelerate (rate, default 10) | realtime} →
  {mode, page_time_ms, completed}: see `display.cdp.VirtualClock` for what each mode does. While paused, a
  Wait action advances page time instead of sleeping; goto/miniwob_start/reset open a fresh page,
  which runs on real time again.
- dom {selector?, max_elements?=500, html?=false, max_chars?=200000} → {url, elements, total, html?}:
  visible elements with boxes in screen pixels (cx, cy: the centre to click).
- miniwob_tasks {} → {tasks: [names]}.
- game_start {game, seed?, paused?=true, step_ms?, rate?, replay?, stop_at?} → {game, seed, url, width,
  height, tick_ms, step_ms, paused, rate}; game_state {} → {game, seed, score, over, tick, view, inputs}
  (privileged); game_names {} → {games}; game_clock {paused, rate?}: the games suite, see `games` (a
  paused game is stepped: every action costs it step_ms of game time, a wait its seconds).

observe() gives the viewport (CDP Page.captureScreenshot) and info {url, title, and on MiniWoB pages
utterance, done, reward, raw_reward, success}; with a11y=True also Playwright's aria snapshot (text)
and the page's HTML (capped). There is no shell (exec raises OperationUnsupported); put_file and
get_file work on the downloads folder under the root, where the page's downloads land.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import shutil
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, ClassVar

from playwright.async_api import Error as PlaywrightError

from agent_core import actions as A
from sandbox_workers import miniwob
from sandbox_workers.base import (
    ActionUnsupported,
    EnvError,
    ExecResult,
    ImageFormat,
    Observation,
    OperationUnsupported,
    SandboxError,
    SandboxPathError,
    Screenshot,
    register_provider,
)
from sandbox_workers.display.cdp import perform_action
from sandbox_workers.display.keys import KeyNameError, playwright_key
from sandbox_workers.providers.browser.chromium import cleanup_state
from sandbox_workers.providers.browser.games import GameCalls, GameParamsError
from sandbox_workers.providers.browser.session import (
    NAV_TIMEOUT_MS,
    OP_TIMEOUT,
    PW_TIMEOUT_MS,
)
from sandbox_workers.providers.confine import disk

DOM_CAP = 200_000
DATA_URL_CAP = 2_000_000
_NOT_GUI = (A.Terminal, A.FileRead, A.FileWrite, A.McpCall)


class InvalidParams(SandboxError, ValueError):
    """A call() argument the browser sandbox rejects (bad URL, unknown task, …)."""


def _number(params: Mapping[str, Any], key: str, default: float, lo: float, hi: float) -> float:
    value = params.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int | float) or not lo < value <= hi:
        raise InvalidParams(f"{key} must be a number in ({lo:g}, {hi:g}]")
    return float(value)


@register_provider("browser")
class BrowserProvider(GameCalls):
    """A headless Chromium tab (one context, one page) in its own process tree."""

    supports_snapshot: ClassVar[bool] = True
    extensions: ClassVar[frozenset[str]] = frozenset(
        {"goto", "miniwob_start", "miniwob_reward", "virtual_time", "dom", "miniwob_tasks"}
        | {"game_start", "game_state", "game_names", "game_clock"}
    )

    # --- stepping ---------------------------------------------------------------------------------

    def observe(self, *, fmt: ImageFormat = "png", a11y: bool = False, quality: int = 80) -> Observation:
        """A viewport screenshot (CDP Page.captureScreenshot), page info, and a11y + DOM if asked."""
        if fmt not in ("png", "jpeg"):
            raise InvalidParams(f"fmt must be png or jpeg, got {fmt!r}")
        params: dict[str, Any] = {"format": fmt, "captureBeyondViewport": False}
        if fmt == "jpeg":
            params["quality"] = max(1, min(100, int(quality)))

        async def go() -> Observation:
            page = self.page
            # Info first: its evaluate waits for the current document's context, so the capture does
            # not race a cross-process commit (where Chromium can drop it, see _capture).
            info = await self._info()
            shot = await self._capture(params)
            tree = dom = None
            if a11y:
                try:
                    tree = await page.locator("body").aria_snapshot(timeout=PW_TIMEOUT_MS)
                except PlaywrightError as exc:
                    if page.is_closed():
                        raise
                    tree = f"(no accessibility snapshot: {exc.message.splitlines()[0]})"
                html = await page.content()
                cut = f"\n<!-- truncated {len(html) - DOM_CAP} chars -->" if len(html) > DOM_CAP else ""
                dom = html[:DOM_CAP] + cut
            w, h = self.profile.width, self.profile.height
            shot_ = Screenshot(base64.b64decode(shot["data"]), fmt, w, h)
            return Observation(screenshot=shot_, a11y=tree, dom=dom, info=info)

        return self._run(go, what="observe")

    async def _info(self) -> dict[str, Any]:
        page = self.page
        try:
            raw = await page.evaluate(miniwob.INFO_JS)
        except PlaywrightError:
            if page.is_closed():
                raise
            raw = {"url": page.url, "title": ""}  # mid-navigation: no execution context yet
        info: dict[str, Any] = {"url": raw.get("url", page.url), "title": raw.get("title", "")}
        if raw.get("miniwob"):
            info.update(raw["miniwob"])
            info["success"] = 1 if miniwob.success(raw["miniwob"]) else 0
        if self._clock is not None and self._clock.mode != "realtime":
            info["virtual_time"] = self._clock.mode
        return info

    def act(self, action: A.Action) -> None:
        """Perform one action with the page's mouse and keyboard (CSS pixels = screen pixels)."""
        if isinstance(action, A.Finished | A.CallUser):
            return
        if "browser" not in action.platforms or isinstance(action, _NOT_GUI):
            raise ActionUnsupported(f"a browser sandbox cannot perform {action.kind!r}")
        try:
            keys = [playwright_key(k) for k in _key_names(action)]
        except KeyNameError as exc:
            raise ActionUnsupported(str(exc)) from None
        timeout = OP_TIMEOUT
        if isinstance(action, A.Wait):
            timeout += float(action.seconds) + 30.0
        elif isinstance(action, A.Type):
            timeout += len(action.content) * 0.02
        elif isinstance(action, A.Drag):  # on a paused clock every move of it waits for the clock to run
            timeout += OP_TIMEOUT

        async def go() -> None:
            if isinstance(action, A.Wait) and self._game_stepped():  # game time only: its ticks, now
                await self._game_quantum(action)
            elif isinstance(action, A.Wait):  # a wait runs the clock itself
                await perform_action(self.page, action, keys, self._clock)
            else:
                await self._nudging(perform_action(self.page, action, keys, self._clock), timeout, pace=True)
                await self._game_quantum(action)
            try:  # an action that started a navigation: let the new document get going
                await self.page.wait_for_load_state("domcontentloaded", timeout=2000)
            except PlaywrightError:
                if self.page.is_closed():
                    raise

        self._run(go, timeout=timeout, what=f"action {action.kind}")

    # --- shell and files --------------------------------------------------------------------------

    def exec(
        self, command: str | Sequence[str], *, timeout: float = 30.0, output_cap: int = 65536
    ) -> ExecResult:
        """Browser sandboxes have no shell."""
        raise OperationUnsupported(
            "a browser sandbox has no shell: use call() (goto, dom, miniwob_start, …) for the page and "
            "put_file/get_file for its downloads folder"
        )

    def _file_path(self, path: str) -> Path:
        if not isinstance(path, str) or not path or "\x00" in path:
            raise SandboxPathError(f"bad path {path!r}")
        base = self.downloads.resolve()
        p = Path(path)
        target = (p if p.is_absolute() else base / p).resolve()
        if target == base or not target.is_relative_to(base):
            raise SandboxPathError(f"{path!r} is not a file path inside the browser's downloads folder")
        return target

    def put_file(self, path: str, data: bytes) -> None:
        """Write a file into the downloads folder (relative paths; absolute ones must lie inside it)."""
        target = self._file_path(path)
        if target.is_dir():
            raise SandboxPathError(f"{path!r} is a folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    def get_file(self, path: str) -> bytes:
        """Read a file of the downloads folder (the page's downloads land there under their names)."""
        target = self._file_path(path)
        if not target.is_file():
            raise SandboxPathError(f"{path!r} does not exist in the downloads folder")
        return target.read_bytes()

    # --- typed operations -------------------------------------------------------------------------

    def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """goto, miniwob_start, miniwob_reward, virtual_time, dom, miniwob_tasks (see the module doc)."""
        handlers: dict[str, Callable[[dict[str, Any]], Any]] = {
            "goto": self._call_goto,
            "miniwob_start": self._call_miniwob_start,
            "miniwob_reward": self._call_miniwob_reward,
            "virtual_time": self._call_virtual_time,
            "dom": self._call_dom,
            "miniwob_tasks": lambda _p: {"tasks": sorted(miniwob.tasks())},
            "game_start": self._call_game_start,
            "game_state": self._call_game_state,
            "game_names": self._call_game_names,
            "game_clock": self._call_game_clock,
        }
        handler = handlers.get(method)
        if handler is None:
            return super().call(method, params)
        try:
            return handler(dict(params or {}))
        except (miniwob.MiniWobError, GameParamsError) as exc:
            raise InvalidParams(str(exc)) from None

    def _check_url(self, url: Any) -> str:
        if not isinstance(url, str) or not url:
            raise InvalidParams("goto needs a url (a string)")
        scheme = url.split(":", 1)[0].lower() if ":" in url else ""
        if url == "about:blank" or (scheme == "data" and len(url) <= DATA_URL_CAP):
            return url
        if scheme in ("http", "https"):
            if not self.profile.network:
                raise InvalidParams(f"this sandbox has no network: cannot open {url}")
            return url
        if scheme == "file":
            return self._file_url(url)
        raise InvalidParams("goto accepts about:blank, data: (up to 2 MB), file:// (MiniWoB) and http(s)")

    def _file_url(self, url: str) -> str:
        """The canonical form of a file:// URL of the MiniWoB folder (what is opened: Chromium reads
        looser forms its own way), or InvalidParams."""
        assert self._spec is not None
        try:
            return miniwob.allowed_file_url(url, base=self._spec.html_base, host_dir=miniwob.html_dir())
        except miniwob.MiniWobError as exc:
            if self._spec.games_base and url.lower().startswith(f"file://{self._spec.games_base}/"):
                try:
                    return self._game_file_url(url)
                except GameParamsError as exc2:
                    raise InvalidParams(str(exc2)) from None
            raise InvalidParams(str(exc)) from None

    async def _navigate(self, url: str) -> dict[str, Any]:
        if self._clock is not None and self._clock.dirty:
            await self._fresh_page()  # a load never finishes on a paused clock; a new page runs in real time
        page, status, error = self.page, None, None
        self._phase = "loading the page"
        try:
            resp = await page.goto(url, wait_until="load")
            status = resp.status if resp is not None else None
        except PlaywrightError as exc:
            if page.is_closed() or self._browser is None or not self._browser.is_connected():
                raise
            error = exc.message.strip().splitlines()[0][:300]
            with contextlib.suppress(PlaywrightError):  # let the error page commit before the next observe
                await page.wait_for_load_state("load", timeout=2000)
        title = ""
        with contextlib.suppress(PlaywrightError, TimeoutError):
            title = await asyncio.wait_for(page.title(), 2)
        return {"url": page.url, "title": title, "status": status, "error": error}

    def _call_goto(self, params: dict[str, Any]) -> dict[str, Any]:
        url = self._check_url(params.get("url"))
        self._episode_task = None
        self._game_clear()
        # A page that used virtual time is replaced before the load: give that its own time.
        fresh = 20 if self._clock is not None and self._clock.dirty else 0

        async def go() -> dict[str, Any]:
            nav = await self._navigate(url)
            if nav["url"].lower().startswith("file:"):
                # Where Chromium itself ended up: a file outside the folder is never left on screen.
                try:
                    self._file_url(nav["url"])
                except InvalidParams:
                    await self._navigate("about:blank")
                    raise InvalidParams(f"goto {url} led outside the MiniWoB folder: {nav['url']}") from None
            return nav

        return self._run(go, timeout=NAV_TIMEOUT_MS / 1000 + 5 + fresh, what="goto")

    def _call_miniwob_start(self, params: dict[str, Any]) -> dict[str, Any]:
        task, seed, mode = params.get("task"), params.get("seed"), params.get("mode", "train")
        if not isinstance(task, str):
            raise InvalidParams("miniwob_start needs a task name (see call('miniwob_tasks'))")
        assert self._spec is not None
        url = miniwob.task_url(task, self._spec.html_base)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int | float | str)):
            raise InvalidParams("seed must be a number or a string")
        if not isinstance(mode, str) or not mode.isalpha() or len(mode) > 20:
            raise InvalidParams("mode must be a word such as train or test")

        async def pause() -> None:
            assert self._clock is not None
            await self._clock.pause()

        async def go() -> dict[str, Any]:
            nav = await self._navigate(url)
            if nav["error"]:
                raise EnvError(f"loading MiniWoB task {task} failed: {nav['error']}")
            before = pause if params.get("paused") else None
            out = await miniwob.start_episode(self.page, task=task, seed=seed, mode=mode, before_start=before)
            vt = self._clock.mode if self._clock else "realtime"
            self._episode_task = task
            return {**out, "url": self.page.url, "virtual_time": vt}

        self._episode_task = None
        self._game_clear()
        return self._run(go, timeout=NAV_TIMEOUT_MS / 1000 + 10, what="miniwob_start")

    def _call_miniwob_reward(self, params: dict[str, Any]) -> dict[str, Any]:
        """The task's verdict; a page the agent navigated away from (back, a link) is a failed episode."""

        async def go() -> dict[str, Any]:
            for _ in range(3):  # a navigation the agent started may still be under way
                try:
                    return await miniwob.read_reward(self.page)
                except PlaywrightError as exc:
                    if self.page.is_closed() or "context was destroyed" not in exc.message:
                        raise
                    with contextlib.suppress(PlaywrightError):
                        await self.page.wait_for_load_state("domcontentloaded", timeout=2000)
            return await miniwob.read_reward(self.page)

        try:
            return self._run(go, what="miniwob_reward")
        except miniwob.MiniWobError:
            if self._episode_task is None:  # no episode was started here: the caller's mistake
                raise
            left = {"done": False, "reward": 0.0, "raw_reward": 0.0, "success": 0, "episode": None}
            return {**left, "reason": f"the page left task {self._episode_task}: now at {self.page.url}"}

    def _call_virtual_time(self, params: dict[str, Any]) -> dict[str, Any]:
        mode = params.get("mode")
        if mode not in ("pause", "advance", "accelerate", "realtime"):
            raise InvalidParams("virtual_time mode must be pause, advance, accelerate or realtime")
        ms = _number(params, "ms", 0, 0, 3_600_000) if mode == "advance" else 0.0
        rate = _number(params, "rate", 10.0, 0, 1000) if mode == "accelerate" else 1.0

        async def go() -> dict[str, Any]:
            clock = self._clock
            assert clock is not None
            completed = True
            if mode == "pause":
                await clock.pause()
            elif mode == "advance":
                completed = await clock.advance(ms, timeout=30.0)
            elif mode == "accelerate":
                await clock.accelerate(rate)
            else:
                await clock.realtime()
            now = await self.page.evaluate("() => Date.now()")
            return {"mode": clock.mode, "page_time_ms": now, "completed": completed}

        return self._run(go, timeout=45.0, what="virtual_time")

    def _call_dom(self, params: dict[str, Any]) -> dict[str, Any]:
        selector = params.get("selector")
        if selector is not None and (not isinstance(selector, str) or len(selector) > 500):
            raise InvalidParams("selector must be a CSS selector string")
        max_elements = int(_number(params, "max_elements", 500, -1, 5000))
        max_chars = int(_number(params, "max_chars", DOM_CAP, -1, 5_000_000))

        async def go() -> dict[str, Any]:
            page = self.page
            arg = {"selector": selector, "maxElements": max_elements}
            try:
                res = await page.evaluate(miniwob.DOM_ELEMENTS_JS, arg)
            except PlaywrightError as exc:
                if selector and "querySelectorAll" in exc.message and not page.is_closed():
                    raise InvalidParams(f"invalid CSS selector {selector!r}") from None
                raise
            out: dict[str, Any] = {"url": page.url, **res}
            if params.get("html"):
                html = await page.content()
                out["html"], out["html_truncated"] = html[:max_chars], len(html) > max_chars
            return out

        return self._run(go, what="dom")

    # --- snapshots --------------------------------------------------------------------------------

    def snapshot(self) -> bytes:
        """JSON of the context's storage state (cookies, localStorage), the page's URL and its localStorage.

        Playwright's storage state skips file:// origins (the MiniWoB pages), so the current page's
        localStorage is saved too. Not captured: the page's JavaScript state (variables, a MiniWoB
        episode in progress, form contents), sessionStorage and IndexedDB; restore loads the URL again.
        """

        async def go() -> dict[str, Any]:
            assert self._context is not None
            page = self.page
            local = await page.evaluate(miniwob.LOCAL_STORAGE_JS)
            state = await self._context.storage_state()
            return {"version": 1, "url": page.url, "storage_state": state, "page_storage": local}

        return json.dumps(self._run(go, what="snapshot")).encode()

    def restore(self, blob: bytes) -> None:
        """A new context with the snapshot's storage state, on the snapshot's URL."""
        try:
            data = json.loads(blob)
            url, storage, local = data["url"], data["storage_state"], data.get("page_storage")
            if not isinstance(url, str) or not isinstance(storage, dict):
                raise TypeError
        except (ValueError, KeyError, TypeError):
            raise InvalidParams("not a browser snapshot") from None
        url = self._check_url(url)

        async def go() -> None:
            await self._open_page(storage)
            if url == "about:blank":
                return
            await self._navigate(url)
            # Put the page's localStorage back, then load again so that the page starts with it.
            has_items = isinstance(local, dict) and local.get("items")
            if has_items and await self.page.evaluate(miniwob.SET_LOCAL_STORAGE_JS, local):
                await self.page.reload()

        self._run(go, timeout=NAV_TIMEOUT_MS / 1000 + 10, what="restore")

    # --- processes --------------------------------------------------------------------------------

    def pids(self) -> list[int]:
        """Host pids of the browser's process tree (wrapper/bwrap, Chromium and its children)."""
        return self._procs.pids() if self._procs is not None else []

    def state(self) -> dict[str, Any]:
        """{"pids", "create_times", "cgroup"}: enough for `cleanup` (a pipe cannot be re-attached)."""
        return self._procs.state() if self._procs is not None else {}

    @classmethod
    def cleanup(cls, *, root: Path, state: Mapping[str, Any]) -> None:
        """Kill what a lost browser sandbox left (create times guard against pid reuse); remove root."""
        cleanup_state(state)
        disk.release(root)
        shutil.rmtree(root, ignore_errors=True)


def _key_names(action: A.Action) -> Sequence[str]:
    if isinstance(action, A.Hotkey):
        return action.keys
    if isinstance(action, A.Press | A.KeyDown | A.KeyUp):
        return [action.key]
    return []
