"""A browser sandbox's page and its lifecycle: launching, the shared Playwright loop, fresh pages and
contexts, captures that nudge a paused clock, downloads and popups, and the live screencast."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import shutil
import time
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from playwright.async_api import Browser, BrowserContext, CDPSession, Download, Page
from playwright.async_api import Error as PlaywrightError

from sandbox_workers import miniwob
from sandbox_workers.base import EnvError, Health, Profile, Provider
from sandbox_workers.display.cdp import LoopTimeout, PlaywrightLoop, Screencast, VirtualClock
from sandbox_workers.providers.browser.chromium import (
    LAUNCH_TIMEOUT_S,
    BrowserProcs,
    LaunchSpec,
    cleanup_state,
    prepare_launch,
)
from sandbox_workers.providers.browser.gamefiles import html_dir as games_html_dir
from sandbox_workers.providers.confine import disk

if TYPE_CHECKING:
    from sandbox_workers.providers.browser.gamefiles import GameRun

log = logging.getLogger(__name__)
T = TypeVar("T")

OP_TIMEOUT = 10.0  # seconds a worker waits for one operation (Playwright's own limit is below it)
PW_TIMEOUT_MS = 5000
NAV_TIMEOUT_MS = 15000
FRESH_PAGE_S = 8.0  # seconds Chromium gets to open a fresh page before the whole context is replaced
PAUSED_NUDGE_S = 0.25  # a capture or an action on paused virtual time waits this long before the clock runs
PAUSED_NUDGE_MS = 50.0  # then page time runs in budgets of this many ms, as many real ms apart


class BrowserSession(disk.DiskVolumes, Provider):
    """The page of one browser sandbox: what the provider's operations run on."""

    def __init__(self, *, sandbox_id: str, profile: Profile, root: Path) -> None:
        super().__init__(sandbox_id=sandbox_id, profile=profile, root=root)
        self.downloads = root / "downloads"
        self._loop: PlaywrightLoop | None = None
        self._browser: Browser | None = None
        self._context: BrowserContext | None = None
        self._page: Page | None = None
        self._cdp: CDPSession | None = None
        self._clock: VirtualClock | None = None
        self._closing: asyncio.Future[None] | None = None  # an old page closing in the background
        self._phase = ""  # what the current operation is doing, for a timeout's message
        self._spec: LaunchSpec | None = None
        self._procs: BrowserProcs | None = None
        self._cast: Screencast | None = None
        self._stopped = False
        self._episode_task: str | None = None  # the MiniWoB task miniwob_start last started here
        self._game: GameRun | None = None  # the game game_start started on this page, if any

    # --- plumbing ---------------------------------------------------------------------------------

    def _run(self, fn: Callable[[], Awaitable[T]], *, timeout: float = OP_TIMEOUT, what: str = "call") -> T:
        """Run a coroutine on the shared loop; failures of the browser become EnvError."""
        if self._loop is None or self._browser is None:
            raise EnvError(f"browser sandbox {self.sandbox_id} is not started")
        if not self._browser.is_connected():
            raise EnvError(f"browser {what} failed: the browser is gone{self._death_note()}")
        self._phase = ""
        try:
            return self._loop.run(fn, timeout=timeout)
        except TimeoutError as exc:
            limit = f" after {timeout:g} s" if isinstance(exc, LoopTimeout) else ""
            at = f" while {self._phase}" if self._phase else ""
            raise EnvError(f"browser {what} timed out{limit}{at}{self._death_note()}") from exc
        except PlaywrightError as exc:
            first = (exc.message or str(exc)).strip().splitlines()[0][:300]
            raise EnvError(f"browser {what} failed: {first}{self._death_note()}") from exc

    def _death_note(self) -> str:
        if self._procs is not None and not self._procs.chromium_alive():
            return " (the Chromium process has exited)"
        if self._browser is not None and not self._browser.is_connected():
            return " (the CDP connection is closed)"
        return ""

    @property
    def page(self) -> Page:
        """The sandbox's page (only to be used on the loop thread)."""
        if self._page is None:
            raise EnvError("the browser sandbox has no page")
        return self._page

    # --- lifecycle --------------------------------------------------------------------------------

    def start(self) -> None:
        """Launch Chromium (confined unless the profile says otherwise) and open a blank page."""
        t0 = time.perf_counter()
        self._stopped = False
        disk.attach(self.root, self.profile.disk_mb)  # the profile, downloads and all under the quota
        self.downloads.mkdir(exist_ok=True)
        self._loop = PlaywrightLoop.get()
        self._loop.on_shutdown(self.stop)
        self._launch()
        t1 = time.perf_counter()
        self._run(self._open_page, what="opening a page")
        log.info(
            "browser %s started in %.0f ms (launch %.0f ms, page %.0f ms, confined=%s, network=%s)",
            self.sandbox_id, (time.perf_counter() - t0) * 1000, (t1 - t0) * 1000,
            (time.perf_counter() - t1) * 1000, self._spec and self._spec.confined, self.profile.network,
        )  # fmt: skip

    def _launch(self) -> None:
        assert self._loop is not None
        confined = bool(self.profile.options.get("confine", True))
        if confined and shutil.which("bwrap") is None:
            log.warning("bwrap is not installed: browser %s runs unconfined", self.sandbox_id)
            confined = False

        html = miniwob.html_dir()
        spec = prepare_launch(
            self.profile, self.root, slot=self.slot, name=self.sandbox_id, html_dir=html, confined=confined,
            games_dir=games_html_dir(),
        )  # fmt: skip
        self._spec, pw = spec, self._loop.playwright

        async def go() -> Browser:
            return await pw.chromium.launch(
                executable_path=str(spec.wrapper),
                headless=True,
                args=spec.args,
                env=spec.env,
                downloads_path=str(spec.pw_downloads),
                timeout=LAUNCH_TIMEOUT_S * 1000,
            )

        try:
            self._browser = self._loop.run(go, timeout=LAUNCH_TIMEOUT_S + 5)
            self._procs = BrowserProcs.find(spec)
        except Exception as exc:
            with contextlib.suppress(EnvError):
                BrowserProcs.find(spec, timeout=0).kill()
            self._drop_cgroup()
            raise EnvError(f"launching Chromium failed: {str(exc).strip().splitlines()[0][:300]}") from exc

    def _drop_cgroup(self) -> None:
        if self._spec is not None and self._spec.cgroup is not None:
            cleanup_state({"cgroup": self._spec.cgroup.to_state()})

    async def _open_page(self, storage_state: Mapping[str, Any] | None = None) -> None:
        """A fresh context and page (replacing the current ones), with its CDP session and clock."""
        assert self._browser is not None
        old, clock = self._context, self._clock
        self._context = self._page = self._cdp = self._clock = None
        self._game = None  # reset and restore: a new page plays no game (a game's clock quantum ends)
        if clock is not None:
            await clock.close()
        if old is not None:
            try:
                await asyncio.wait_for(old.close(), 5)
            except (PlaywrightError, TimeoutError):
                log.debug("closing the old context of %s failed", self.sandbox_id, exc_info=True)
        w, h = self.profile.width, self.profile.height
        ctx = await self._browser.new_context(
            viewport={"width": w, "height": h},
            screen={"width": w, "height": h},
            device_scale_factor=1,
            accept_downloads=True,
            storage_state=dict(storage_state) if storage_state else None,  # type: ignore[arg-type]
        )
        ctx.set_default_timeout(PW_TIMEOUT_MS)
        ctx.set_default_navigation_timeout(NAV_TIMEOUT_MS)
        self._context = ctx
        await self._attach(await ctx.new_page())

    async def _attach(self, page: Page) -> None:
        """Make `page` the sandbox's page: CDP session, virtual clock, downloads, popups, screencast."""
        assert self._context is not None
        cdp = await self._context.new_cdp_session(page)
        clock = VirtualClock(lambda m, p: asyncio.wait_for(cdp.send(m, p), 8.0))
        cdp.on("Emulation.virtualTimeBudgetExpired", clock.on_budget_expired)
        page.on("download", self._on_download)
        page.on("popup", self._on_popup)
        self._page, self._cdp, self._clock = page, cdp, clock
        if self._cast is not None:
            try:  # keep the live view going on the new page
                await self._cast.attach(cdp, self._jpeg_now)
            except (PlaywrightError, TimeoutError):
                log.warning("restarting the screencast of %s failed", self.sandbox_id, exc_info=True)

    async def _fresh_page(self) -> None:
        """A new page in the same context: the only way back to true real time (see VirtualClock).

        If Chromium does not give one within FRESH_PAGE_S, a new context carrying the cookies and
        storage replaces the whole context (the navigation goes on instead of timing out).
        """
        assert self._context is not None
        old, clock = self._page, self._clock
        if clock is not None:
            self._phase = "stopping the virtual-time pacer"
            await clock.close()
        self._phase = "opening a fresh page"
        try:
            page = await asyncio.wait_for(self._context.new_page(), FRESH_PAGE_S)
        except (PlaywrightError, TimeoutError) as exc:
            log.warning("a fresh page for %s did not open (%s); opening a new context", self.sandbox_id, exc)
            self._phase = "reading the storage of the old context"
            state = None
            with contextlib.suppress(PlaywrightError, TimeoutError):
                state = await asyncio.wait_for(self._context.storage_state(), 3)
            self._phase = "opening a new context"
            await self._open_page(state)
            return
        self._phase = "attaching to the fresh page"
        await self._attach(page)
        if old is not None:
            # Closing the old page does not hold up the navigation that asked for a fresh one: under
            # load a close can take seconds, and the old page is nobody's any more.
            self._closing = asyncio.ensure_future(self._close_quietly(old))

    @staticmethod
    async def _close_quietly(page: Page) -> None:
        with contextlib.suppress(PlaywrightError, TimeoutError):
            await asyncio.wait_for(page.close(), 10)

    def health(self) -> Health:
        """Chromium alive and the CDP pipe up (no round trip: two /proc reads)."""
        if self._browser is None or self._procs is None:
            return Health(ok=False, detail="not started")
        alive, connected = self._procs.chromium_alive(), self._browser.is_connected()
        procs = {"chromium": alive, "cdp": connected}
        if not alive:
            return Health(ok=False, detail="the Chromium process has exited", processes=procs)
        if not connected:
            return Health(ok=False, detail="the CDP connection to Chromium is closed", processes=procs)
        if self._page is None or self._page.is_closed():
            return Health(ok=False, detail="the sandbox's page is closed", processes=procs)
        cgroup = self._spec.cgroup if self._spec else None
        detail = "" if cgroup is not None or not (self._spec and self._spec.confined) else "no cgroup limits"
        quota = disk.known_support()
        if self.profile.disk_mb and quota is not None and not quota.ok:
            detail = "; ".join(filter(None, [detail, f"no disk quota on this host: {quota.reason}"]))
        return Health(ok=True, detail=detail, processes=procs)

    def reset(self) -> None:
        """A fresh context on about:blank (no cookies, storage, downloads); relaunch a dead browser."""
        t0 = time.perf_counter()
        self._episode_task = None
        relaunched = False
        if self.downloads.is_dir():
            shutil.rmtree(self.downloads, ignore_errors=True)
        self.downloads.mkdir(parents=True, exist_ok=True)
        if not self.health().ok:
            self._teardown(close_timeout=1.0)
            self._launch()
            relaunched = True
        self._run(self._open_page, what="reset")
        ms = (time.perf_counter() - t0) * 1000
        log.info("browser %s reset in %.0f ms%s", self.sandbox_id, ms, " (relaunched)" if relaunched else "")

    def stop(self) -> None:
        """Close the browser, kill its process tree and cgroup, remove the root; idempotent."""
        if self._stopped:
            return
        t0 = time.perf_counter()
        self._stopped = True
        self.stop_screencast()
        self._teardown(close_timeout=3.0)
        if self._loop is not None:
            self._loop.remove_shutdown_hook(self.stop)
        disk.release(self.root)
        shutil.rmtree(self.root, ignore_errors=True)
        log.info("browser %s stopped in %.0f ms", self.sandbox_id, (time.perf_counter() - t0) * 1000)

    def _teardown(self, *, close_timeout: float) -> None:
        browser, clock = self._browser, self._clock
        self._browser = self._context = self._page = self._cdp = self._clock = None
        if browser is not None and self._loop is not None and browser.is_connected():

            async def close() -> None:
                if clock is not None:
                    await clock.close()
                await browser.close()

            try:
                self._loop.run(close, timeout=close_timeout)
            except Exception:
                log.debug("closing browser %s failed; killing it", self.sandbox_id, exc_info=True)
        if self._procs is not None:
            self._procs.kill()  # whatever browser.close() left, and the cgroup
            self._procs = None
        else:
            self._drop_cgroup()

    # --- capturing (on paused virtual time too) ----------------------------------------------------

    async def _capture(self, params: dict[str, Any]) -> Any:
        """Page.captureScreenshot, retried over the glitches of a page between two documents.

        Right after a failed load the error page is still committing ("Not attached to an active
        page", "Unable to capture screenshot"), and a capture that races a cross-process commit can
        be lost altogether (Chromium logs "Message 0 rejected by interface blink.mojom.Widget" and
        never answers): retry rather than call the browser broken.
        """
        assert self._cdp is not None
        cdp, deadline = self._cdp, time.monotonic() + 8.0
        while True:
            try:
                return await self._capture_once(cdp, params, 2.5)
            except (PlaywrightError, TimeoutError) as exc:
                lost = isinstance(exc, TimeoutError) or "Protocol error" in exc.message
                if self.page.is_closed() or not lost or time.monotonic() > deadline:
                    raise
                await asyncio.sleep(0.05)

    async def _capture_once(self, cdp: CDPSession, params: dict[str, Any], timeout: float) -> Any:
        """One Page.captureScreenshot, nudging a paused clock while it waits (see `_nudging`)."""
        try:
            return await self._nudging(cdp.send("Page.captureScreenshot", params), timeout)
        except TimeoutError:
            raise TimeoutError("Page.captureScreenshot did not answer") from None

    async def _nudging(self, aw: Awaitable[Any], timeout: float, *, pace: bool = False) -> Any:
        """Await `aw`; on paused virtual time, the clock is let run a little while it waits.

        A capture waits for a new compositor frame, and input that needs the renderer's answer (a
        wheel event, the moves of a drag) waits for the main frame to run; on a paused clock Chromium
        often holds either until the page's clock runs for a moment of real time. After
        PAUSED_NUDGE_S without an answer:
        - a capture gets PAUSED_NUDGE_MS budgets (policy advance) a real PAUSED_NUDGE_MS apart until
          the frame comes (typically 1-4 of them);
        - input (`pace`) gets the clock running at the wall-clock rate until it is answered: nudges
          leave a drag's moves waiting a second each, and a wheel event often for good.
        Either way page time moves on by about as long as the wait took, and the clock pauses again.
        """
        task = asyncio.ensure_future(aw)
        end, clock, running = time.monotonic() + timeout, self._clock, False
        try:
            wait = PAUSED_NUDGE_S
            while True:
                paused = clock is not None and clock.mode == "paused"
                left = end - time.monotonic()
                done, _ = await asyncio.wait({task}, timeout=min(left, wait) if paused else left)
                if done:
                    return task.result()
                if time.monotonic() >= end:
                    raise TimeoutError("no answer")
                if clock is not None and clock.mode == "paused":
                    if pace:
                        if not running:
                            await clock.hold_running()
                        running, wait = True, left
                    else:
                        await clock.nudge(PAUSED_NUDGE_MS)
                        running, wait = True, PAUSED_NUDGE_MS / 1000.0
        finally:
            if not task.done():
                task.cancel()
            if running and clock is not None:
                await clock.pause()

    # --- downloads and popups ---------------------------------------------------------------------

    async def _on_download(self, download: Download) -> None:
        try:
            name = Path(download.suggested_filename or "").name.lstrip(".").strip() or "download"
            dest, n = self.downloads / name, 1
            while dest.exists():
                stem, dot, ext = name.partition(".")
                dest, n = self.downloads / f"{stem} ({n}){dot}{ext}", n + 1
            await download.save_as(dest)
            await download.delete()
        except Exception:
            log.warning("saving a download of %s failed", self.sandbox_id, exc_info=True)

    async def _on_popup(self, popup: Page) -> None:
        # One tab per sandbox: what the page opens in a new window is shown in the sandbox's page instead.
        try:
            with contextlib.suppress(PlaywrightError):
                await popup.wait_for_load_state("domcontentloaded", timeout=5000)
            url = popup.url
            await popup.close()
            if self._page is not None and not self._page.is_closed():
                # The popup took the foreground; a hidden page renders no frames (screenshots hang).
                await self._page.bring_to_front()
                if url and url != "about:blank":
                    await self._page.goto(url)
        except Exception:
            log.debug("following a popup of %s failed", self.sandbox_id, exc_info=True)

    # --- screencast -------------------------------------------------------------------------------

    def start_screencast(
        self,
        on_frame: Callable[[bytes], None],
        *,
        max_fps: float = 10.0,
        on_end: Callable[[str], None] | None = None,
    ) -> None:
        """CDP Page.startScreencast (JPEG q60); `on_frame` runs on its own thread, at most `max_fps`.

        It follows the sandbox to a new page (reset, restore, navigation after virtual time), so it
        never ends by itself (`on_end` is not called).
        """
        self.stop_screencast()
        self._cast = Screencast(on_frame, max_fps, self.sandbox_id, (self.profile.width, self.profile.height))

        async def go() -> None:
            if self._cast is not None and self._cdp is not None:
                await self._cast.attach(self._cdp, self._jpeg_now)

        try:
            self._run(go, what="start_screencast")
        except EnvError:
            self.stop_screencast()
            raise

    async def _jpeg_now(self) -> bytes:
        return base64.b64decode((await self._capture({"format": "jpeg", "quality": 60}))["data"])

    def stop_screencast(self) -> None:
        """Stop the frames; safe when none is running or the browser is gone."""
        cast, self._cast = self._cast, None
        if cast is None:
            return
        cast.relay.stop()
        if self._loop is not None and self._browser is not None and self._browser.is_connected():
            with contextlib.suppress(Exception):
                self._loop.run(cast.detach, timeout=4)
