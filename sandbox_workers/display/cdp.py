"""Playwright and Chromium plumbing shared by the browser sandboxes.

- `PlaywrightLoop`: one asyncio thread and one Playwright driver for all browser sandboxes. Provider
  methods run on their sandboxes' own worker threads; Playwright's async objects belong to the loop
  thread. `run(coro_fn, timeout=…)` submits a coroutine with `asyncio.run_coroutine_threadsafe` and
  waits for it, so CDP events (screencast frames, virtual-time budgets) keep flowing while a worker
  waits. It starts on first use and shuts down at interpreter exit, after the sandboxes registered
  with `on_shutdown` have stopped.
- `perform_action`, `Screencast`, `VirtualClock`: actions, live frames, virtual time (key names are
  `keys.playwright_key`; launching Chromium confined is the browser provider's `chromium`).
"""

from __future__ import annotations

import asyncio
import atexit
import base64
import concurrent.futures
import contextlib
import logging
import threading
import time
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

from playwright.async_api import CDPSession, Page, Playwright, async_playwright

from agent_core import actions as A

log = logging.getLogger(__name__)

T = TypeVar("T")


class LoopTimeout(TimeoutError):
    """A coroutine submitted to the loop did not finish within its timeout (it was cancelled)."""


class PlaywrightLoop:
    """A daemon thread running an asyncio loop with a started Playwright driver."""

    _instance: PlaywrightLoop | None = None
    _instance_lock = threading.Lock()

    def __init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._main, name="playwright-loop", daemon=True)
        self._playwright: Playwright | None = None
        self._shutdown_hooks: list[Callable[[], None]] = []
        self._closed = False
        self._thread.start()

    @classmethod
    def get(cls) -> PlaywrightLoop:
        """The process-wide loop, started (with its Playwright driver) on first use."""
        with cls._instance_lock:
            if cls._instance is None or cls._instance._closed:
                inst = cls()
                try:
                    inst._playwright = inst.run(lambda: async_playwright().start(), timeout=60)
                except BaseException:
                    inst._stop_loop()
                    raise
                cls._instance = inst
                atexit.register(inst.shutdown)
            return cls._instance

    @property
    def playwright(self) -> Playwright:
        """The started Playwright object (only to be used inside coroutines run on this loop)."""
        assert self._playwright is not None
        return self._playwright

    def _main(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()
        # Let cancelled tasks finish their cleanup before the loop is closed.
        pending = asyncio.all_tasks(self._loop)
        for task in pending:
            task.cancel()
        if pending:
            self._loop.run_until_complete(asyncio.gather(*pending, return_exceptions=True))
        self._loop.close()

    def in_loop_thread(self) -> bool:
        """Whether the caller is the loop thread itself (where `run` would deadlock)."""
        return threading.current_thread() is self._thread

    def run(self, coro_fn: Callable[[], Awaitable[T]], *, timeout: float) -> T:
        """Run `coro_fn()` on the loop and return its result; cancel it after `timeout` seconds.

        Raises LoopTimeout on timeout, and whatever the coroutine raised otherwise.
        """
        if self.in_loop_thread():
            raise RuntimeError("PlaywrightLoop.run called from the loop thread (would deadlock)")
        if self._closed:
            raise RuntimeError("the Playwright loop has been shut down")

        async def wrapper() -> T:
            return await coro_fn()

        fut = asyncio.run_coroutine_threadsafe(wrapper(), self._loop)
        try:
            return fut.result(timeout)
        except concurrent.futures.TimeoutError:
            fut.cancel()
            raise LoopTimeout(f"browser operation timed out after {timeout:g}s") from None

    def on_shutdown(self, hook: Callable[[], None]) -> None:
        """Call `hook()` (from the exiting thread, before the driver stops) at shutdown."""
        self._shutdown_hooks.append(hook)

    def remove_shutdown_hook(self, hook: Callable[[], None]) -> None:
        """Forget a hook added with `on_shutdown` (a stopped sandbox)."""
        with contextlib.suppress(ValueError):
            self._shutdown_hooks.remove(hook)

    def shutdown(self) -> None:
        """Close the registered sandboxes, stop the Playwright driver and the loop thread; idempotent."""
        if self._closed:
            return
        for hook in list(reversed(self._shutdown_hooks)):
            try:
                hook()
            except Exception:  # one sandbox failing to stop must not keep the others running
                log.exception("browser shutdown hook failed")
        self._shutdown_hooks.clear()
        if self._playwright is not None:
            pw = self._playwright
            try:
                self.run(pw.stop, timeout=10)
            except Exception:
                log.warning("stopping the Playwright driver failed", exc_info=True)
            self._playwright = None
        self._stop_loop()

    def _stop_loop(self) -> None:
        self._closed = True
        if not self._loop.is_closed():  # queued even before run_forever starts, so never lost
            self._loop.call_soon_threadsafe(self._loop.stop)
        if not self.in_loop_thread():
            self._thread.join(timeout=10)


DRAG_STEPS, DRAG_STEPS_PAUSED = 10, 4
"""Mouse moves between a drag's press and release (fewer on a paused clock, where each waits for a frame)."""
SCROLL_NOTCH_PX = 100
"""Pixels per scroll notch (Chromium's own wheel step)."""


async def perform_action(page: Page, a: A.Action, keys: list[str], clock: VirtualClock | None) -> None:
    """Do one GUI action with `page`'s mouse and keyboard; `keys` are the action's keys, already mapped."""
    mouse, kb = page.mouse, page.keyboard
    if isinstance(a, A.Click):
        await mouse.click(a.x, a.y)
    elif isinstance(a, A.LeftDouble):
        await mouse.dblclick(a.x, a.y)
    elif isinstance(a, A.RightSingle):
        await mouse.click(a.x, a.y, button="right")
    elif isinstance(a, A.MiddleSingle):
        await mouse.click(a.x, a.y, button="middle")
    elif isinstance(a, A.Hover):
        await mouse.move(a.x, a.y)
    elif isinstance(a, A.Drag):
        await mouse.move(a.x1, a.y1)
        await mouse.down()
        # Intermediate moves: drag handlers need them. On a paused clock each waits for a frame that
        # only a moment of running clock lets through (a few hundred ms), so it gets fewer.
        paused = clock is not None and clock.mode == "paused"
        await mouse.move(a.x2, a.y2, steps=DRAG_STEPS_PAUSED if paused else DRAG_STEPS)
        await mouse.up()
    elif isinstance(a, A.Scroll):
        px = SCROLL_NOTCH_PX * a.amount
        dx, dy = {"up": (0, -px), "down": (0, px), "left": (-px, 0), "right": (px, 0)}[a.direction]
        await mouse.move(a.x, a.y)
        await mouse.wheel(dx, dy)
    elif isinstance(a, A.Hotkey):
        # ctrl+C means ctrl+c (as in pyautogui): an uppercase letter would add Shift.
        keys = [k.lower() if len(k) == 1 and len(keys) > 1 else k for k in keys]
        for k in keys:
            await kb.down(k)
        for k in reversed(keys):
            await kb.up(k)
    elif isinstance(a, A.Press):
        await kb.press(keys[0])
    elif isinstance(a, A.KeyDown):
        await kb.down(keys[0])
    elif isinstance(a, A.KeyUp):
        await kb.up(keys[0])
    elif isinstance(a, A.Type):
        text = a.content[:-1] if a.submits else a.content
        if text:
            await kb.type(text)
        if a.submits:
            await kb.press("Enter")
    elif isinstance(a, A.Wait):
        if clock is not None and clock.mode == "paused":
            await clock.advance(float(a.seconds) * 1000.0)  # a frozen page waits in page time
        else:
            await asyncio.sleep(float(a.seconds))
    else:
        raise ValueError(f"not a browser GUI action: {a.kind}")


# --- screencast relay -----------------------------------------------------------------------------


class FrameRelay:
    """Hands frames to a consumer on its own thread, at most `max_fps`, newest frame wins.

    CDP frames arrive on the loop thread, which every browser sandbox shares, so the consumer's
    callback must never run there: a slow consumer would stall all sandboxes. A slow consumer here
    only loses intermediate frames.
    """

    def __init__(self, on_frame: Callable[[bytes], None], max_fps: float, name: str) -> None:
        self.on_frame = on_frame
        self.interval = 1.0 / max(0.1, min(float(max_fps), 60.0))
        self._cond = threading.Condition()
        self._latest: bytes | None = None
        self._stopped = False
        self.delivered = 0
        self._thread = threading.Thread(target=self._run, name=f"screencast-{name}", daemon=True)
        self._thread.start()

    def push(self, frame: bytes) -> None:
        """Offer a frame (any thread); it replaces one not yet delivered."""
        with self._cond:
            self._latest = frame
            self._cond.notify()

    def _run(self) -> None:
        next_at = 0.0
        while True:
            with self._cond:
                while True:
                    if self._stopped:
                        return
                    delay = next_at - time.monotonic()
                    if self._latest is not None and delay <= 0:
                        break
                    # Wait for a frame, or out the rate limit (a newer frame meanwhile replaces this one).
                    self._cond.wait(delay if self._latest is not None else None)
                frame, self._latest = self._latest, None
            next_at = time.monotonic() + self.interval
            try:
                self.on_frame(frame)
                self.delivered += 1
            except Exception:  # the consumer's failure must not end the relay silently mid-stream
                log.exception("screencast consumer failed")

    def stop(self) -> None:
        """Stop delivering (frames pushed later are dropped); waits briefly for the thread."""
        with self._cond:
            self._stopped = True
            self._cond.notify_all()
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout=2)


class Screencast:
    """CDP Page.startScreencast (JPEG) of the sandbox's current page, frames handed to a `FrameRelay`."""

    def __init__(self, on_frame: Callable[[bytes], None], max_fps: float, name: str, size: tuple[int, int]):
        self.relay = FrameRelay(on_frame, max_fps, name)
        self.size = size
        self._attached: tuple[CDPSession, Callable[[dict[str, Any]], None]] | None = None

    async def attach(self, cdp: CDPSession, first_frame: Callable[[], Awaitable[bytes]]) -> None:
        """Stream `cdp`'s page (a new page replaces the old one); `first_frame` gives the picture now."""
        await self.detach()
        relay = self.relay

        def on_frame(params: dict[str, Any]) -> None:
            # Ack at once so that Chromium keeps capturing; the relay drops what the consumer cannot take.
            ack = asyncio.ensure_future(
                cdp.send("Page.screencastFrameAck", {"sessionId": params["sessionId"]})
            )
            ack.add_done_callback(lambda f: f.cancelled() or f.exception())
            relay.push(base64.b64decode(params["data"]))

        cdp.on("Page.screencastFrame", on_frame)
        self._attached = (cdp, on_frame)
        w, h = self.size
        params = {"format": "jpeg", "quality": 60, "maxWidth": w, "maxHeight": h}
        await asyncio.wait_for(cdp.send("Page.startScreencast", params), 8)
        # A page that does not change sends no frame: give the consumer the current picture now.
        with contextlib.suppress(Exception):
            relay.push(await first_frame())

    async def detach(self) -> None:
        """Stop streaming the current page (errors of a closed page are ignored)."""
        attached, self._attached = self._attached, None
        if attached is not None:
            cdp, on_frame = attached
            cdp.remove_listener("Page.screencastFrame", on_frame)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(cdp.send("Page.stopScreencast"), 3)


# --- virtual time ---------------------------------------------------------------------------------

VirtualMode = Literal["realtime", "paused", "accelerate", "paced"]


class VirtualClock:
    """Virtual time of one page through CDP `Emulation.setVirtualTimePolicy` (coroutines: loop only).

    Chromium keeps a page's virtual-time policy across its same-process navigations and has no policy
    that returns to the wall clock, so once virtual time is on, the page stays on it: `realtime` then
    paces virtual time at the wall-clock rate, and only a fresh page runs on true real time
    (`dirty` tells the owner to open one before navigating, since a load never completes while paused).

    - pause (policy pause): the page's clock stops: setTimeout/setInterval do not fire, Date.now and
      performance.now stand still (a MiniWoB episode's time limit with them); rendering, input,
      screenshots and evaluate still work.
    - advance(ms): policy pauseIfNetworkFetchesPending with budget `ms`: the clock runs `ms` ahead as
      fast as the page can process its timers (pending fetches hold it), then pauses again; returns
      when Chromium reports virtualTimeBudgetExpired (False if that took over `timeout`).
    - accelerate(rate): a background pacer gives a budget of `rate × 50 ms` every 50 ms of wall
      clock, so page time runs about `rate` times faster (slower if the page cannot keep up).
    - realtime: nothing if virtual time was never used on this page, else the pacer at rate 1.
    """

    TICK_S = 0.05
    STOP_WAIT_S = 2.0

    def __init__(self, send: Callable[[str, dict[str, Any]], Awaitable[Any]]) -> None:
        self._send = send
        self.mode: VirtualMode = "realtime"
        self.rate = 1.0
        self.dirty = False
        """Whether virtual time was ever enabled on this page."""
        self._expired = asyncio.Event()
        self._pacer: asyncio.Task[None] | None = None

    def on_budget_expired(self, _params: Any = None) -> None:
        """The CDP event handler for Emulation.virtualTimeBudgetExpired."""
        self._expired.set()

    async def _stop_pacer(self) -> None:
        """Cancel the pacer and wait for it, at most STOP_WAIT_S: a CDP call that Chromium does not answer
        (a busy or dying page) must not hold up what comes next (a navigation waited 40 s here once)."""
        pacer, self._pacer = self._pacer, None
        if pacer is None or pacer.done():
            return
        pacer.cancel()
        done, _ = await asyncio.wait({pacer}, timeout=self.STOP_WAIT_S)
        if not done:  # it ends when its call returns or the page goes; nothing waits for it
            log.warning(
                "the virtual-time pacer did not stop within %.0f s; going on without it", self.STOP_WAIT_S
            )
            pacer.add_done_callback(lambda t: t.cancelled() or t.exception())

    async def _budget(self, ms: float, timeout: float) -> bool:
        self._expired.clear()
        self.dirty = True
        await self._send(
            "Emulation.setVirtualTimePolicy", {"policy": "pauseIfNetworkFetchesPending", "budget": ms}
        )
        try:
            await asyncio.wait_for(self._expired.wait(), timeout)
            return True
        except TimeoutError:
            return False

    async def pause(self) -> None:
        """Stop the page's clock."""
        await self._stop_pacer()
        self.dirty = True
        await self._send("Emulation.setVirtualTimePolicy", {"policy": "pause"})
        self.mode = "paused"

    async def advance(self, ms: float, *, timeout: float = 30.0) -> bool:
        """Run the clock `ms` ahead, then leave it paused; False if the budget did not expire in time."""
        await self._stop_pacer()
        done = await self._budget(ms, timeout)
        if not done:  # a fetch that never ends holds the clock; make sure it stays paused
            await self._send("Emulation.setVirtualTimePolicy", {"policy": "pause"})
        self.mode = "paused"
        return done

    async def nudge(self, ms: float) -> None:
        """Let the clock run up to `ms` ahead (policy advance with a budget) without waiting for it.

        A paused page can hold a compositor frame (and so a screenshot) until its clock runs for a
        moment of real time; the owner pauses again once the frame has come.
        """
        await self._stop_pacer()
        self.dirty = True
        await self._send("Emulation.setVirtualTimePolicy", {"policy": "advance", "budget": ms})

    async def hold_running(self) -> None:
        """Pace the clock at the wall-clock rate but keep `mode` "paused": the owner pauses it again soon.

        A paused page can hold a compositor frame (and so a screenshot), or the answer to input (wheel
        events, the moves of a drag), until its clock runs for a moment of real time.
        """
        await self._stop_pacer()
        self.dirty = True
        self._pacer = asyncio.ensure_future(self._pace(1.0))

    async def accelerate(self, rate: float) -> None:
        """Run the clock at `rate` × wall-clock speed until another mode is chosen."""
        await self._stop_pacer()
        self.rate = rate
        self.dirty = True
        self._pacer = asyncio.ensure_future(self._pace(rate))
        self.mode = "accelerate" if rate != 1.0 else "paced"

    async def realtime(self) -> None:
        """Back to the wall-clock rate (paced virtual time if it was ever enabled on this page)."""
        if not self.dirty:
            await self._stop_pacer()
            self.mode = "realtime"
            return
        await self.accelerate(1.0)

    async def close(self) -> None:
        """Stop the pacer (the page is going away)."""
        await self._stop_pacer()

    async def _pace(self, rate: float) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                t0 = loop.time()
                await self._budget(self.TICK_S * 1000.0 * rate, timeout=5.0)
                await asyncio.sleep(max(0.0, self.TICK_S - (loop.time() - t0)))
        except Exception as exc:  # the page closed or the browser died: the owner reports that
            log.debug("virtual-time pacer ended: %s", exc)
