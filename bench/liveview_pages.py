"""Viewers for bench/liveview_bench.py that are real headless Chromium pages running the product's own
live view (the live page, the wall), instrumented to say when pixels landed.

The instrumentation wraps the canvas drawImage that noVNC (its flip) draws frames with and the
bitmaprenderer transfer the screencast hands each decoded frame to, and follows WebRTC <video> elements
frame by frame (requestVideoFrameCallback): each drawn frame counts, and the colour of a pixel near the
bottom-right corner (the root window, away from the xterm) is kept with the time it first appeared
(performance.timeOrigin + now: the wall clock, as Python's time.time() on the same machine). Per wall
tile (data-sandbox) the times of its frames are kept instead. Pages are all visible (headless windows
are never occluded) and run their animation frames at 60 Hz."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tests.procs import CHROMIUM
from tests.procs import CHROMIUM_ARGS as TEST_ARGS

# Many pages of one browser: none of them is throttled as a background tab.
CHROMIUM_ARGS = [
    *TEST_ARGS,
    "--disable-background-timer-throttling",
    "--disable-renderer-backgrounding",
    "--disable-backgrounding-occluded-windows",
]

INSTRUMENT = r"""
(() => {
  const B = window.__bench = { frames: 0, seen: [], last: "", tiles: {} };
  const now = () => performance.timeOrigin + performance.now();
  const probe = document.createElement("canvas");
  probe.width = probe.height = 1;
  const pctx = probe.getContext("2d", { willReadFrequently: true });
  function note(r, g, b) {
    const key = `${r},${g},${b}`;
    if (key !== B.last) { B.last = key; B.seen.push([r, g, b, now()]); }
  }
  function sample(src, w, h) {  // the colour near the bottom-right corner of a canvas, bitmap or video
    if (!w || !h) return;
    pctx.drawImage(src, w - 4, h - 4, 1, 1, 0, 0, 1, 1);
    const d = pctx.getImageData(0, 0, 1, 1).data;
    note(d[0], d[1], d[2]);
  }
  function drawn(c, bmp) {  // a frame put on canvas c (bmp: the whole frame, when it is one)
    if (c === probe || !c.closest || !c.closest(".live-box")) return;
    const tile = c.closest("[data-sandbox]");
    if (tile && tile.dataset.testid === "wall-tile") {
      (B.tiles[tile.dataset.sandbox] = B.tiles[tile.dataset.sandbox] || []).push(now());
    } else {
      B.frames += 1;
      // The screencast draws a whole decoded frame at 0,0: its corner is the canvas's, read from the
      // bitmap (reading the canvas would snapshot and copy it every frame: the bench's cost, not the
      // product's). noVNC draws parts of its back buffer: read the canvas.
      if (bmp) sample(bmp, bmp.width, bmp.height);
      else sample(c, c.width, c.height);
    }
  }
  const draw = CanvasRenderingContext2D.prototype.drawImage;
  CanvasRenderingContext2D.prototype.drawImage = function (...args) {
    const out = draw.apply(this, args);
    drawn(this.canvas, args[0] instanceof ImageBitmap && args.length === 3 ? args[0] : null);
    return out;
  };
  // The screencast hands each decoded frame to a bitmaprenderer canvas (read before it is taken).
  const transfer = ImageBitmapRenderingContext.prototype.transferFromImageBitmap;
  ImageBitmapRenderingContext.prototype.transferFromImageBitmap = function (bmp) {
    if (bmp) drawn(this.canvas, bmp);
    return transfer.call(this, bmp);
  };
  // The page's peer connections, for their receive statistics (Viewers.webrtc_stats).
  B.pcs = [];
  if (window.RTCPeerConnection) {
    const Native = window.RTCPeerConnection;
    window.RTCPeerConnection = function (...a) { const pc = new Native(...a); B.pcs.push(pc); return pc; };
    window.RTCPeerConnection.prototype = Native.prototype;
  }
  // A WebRTC <video>: frame by frame as it is presented (requestVideoFrameCallback). With several such
  // pages in ONE headless browser the callbacks came about once a second while the players counted 26
  // frames shown a second (getVideoPlaybackQuality): WebRTC viewers get a browser each (--browser-each).
  function follow(video) {
    if (video.__followed) return;
    video.__followed = true;
    const step = () => {
      B.frames += 1;
      sample(video, video.videoWidth, video.videoHeight);
      if (video.isConnected) video.requestVideoFrameCallback(step);
    };
    video.requestVideoFrameCallback(step);
  }
  new MutationObserver(() => document.querySelectorAll("video.live-screen").forEach(follow))
    .observe(document, { childList: true, subtree: true });
})();
"""


@dataclass
class PageStats:
    frames: int
    at: float  # the page's wall clock (s) when read
    seen: list[tuple[int, int, int, float]]  # colour, first drawn at (s)


class Viewers:
    """Headless Chromium pages of one browser, logged in with the bench's session cookie."""

    def __init__(
        self, playwright: Any, site_url: str, cookie_name: str, cookie_value: str, *, browser_each: bool
    ) -> None:
        self.playwright, self.browser_each = playwright, browser_each
        self.cookie = {"name": cookie_name, "value": cookie_value, "url": site_url}
        self.browser, self.context = self._launch()
        self.extra: list[Any] = []  # browser_each: one browser per page after the first
        self.pages: list[Any] = []

    def _launch(self) -> tuple[Any, Any]:
        browser = self.playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        context = browser.new_context(viewport={"width": 1280, "height": 900})
        context.add_cookies([self.cookie])
        context.add_init_script(INSTRUMENT)
        return browser, context

    def _new_page(self) -> Any:
        if not self.browser_each or not self.pages and not self.extra:
            return self.context.new_page()
        browser, context = self._launch()
        self.extra.append(browser)
        return context.new_page()

    def open(self, url: str, n: int, *, first_frame_s: float = 60.0) -> None:
        """Open `n` more pages of `url`; returns once every page has drawn a frame."""
        new = []
        for _ in range(n):
            page = self._new_page()
            page.goto(url, wait_until="domcontentloaded")
            new.append(page)
        deadline = time.monotonic() + first_frame_s
        for page in new:
            left = max(1.0, deadline - time.monotonic())
            page.wait_for_function("window.__bench && window.__bench.frames > 0", timeout=left * 1000)
        self.pages += new

    def stats(self) -> list[PageStats]:
        out = []
        for page in self.pages:
            r = page.evaluate("[__bench.frames, performance.timeOrigin + performance.now(), __bench.seen]")
            out.append(PageStats(int(r[0]), r[1] / 1000, [(a, b, c, t / 1000) for a, b, c, t in r[2]]))
        return out

    def counts(self) -> list[tuple[int, float]]:
        """Per page, the frames drawn so far and its clock (s) when read."""
        out = []
        for page in self.pages:
            frames, at = page.evaluate("[__bench.frames, performance.timeOrigin + performance.now()]")
            out.append((int(frames), at / 1000))
        return out

    def tiles(self) -> dict[str, list[float]]:
        """Per wall tile (sandbox pk), the times (s) of its frames (the first page's)."""
        raw = self.pages[0].evaluate("__bench.tiles")
        return {k: [t / 1000 for t in v] for k, v in raw.items()}

    def webrtc_stats(self) -> list[dict[str, Any]]:
        """Per page, the video receiver's statistics (inbound-rtp) of its newest peer connection."""
        out = []
        for page in self.pages:
            out.append(
                page.evaluate(
                    """async () => {
                      const pc = __bench.pcs[__bench.pcs.length - 1];
                      if (!pc) return {};
                      const v = document.querySelector("video.live-screen");
                      const q = v && v.getVideoPlaybackQuality ? v.getVideoPlaybackQuality() : {};
                      for (const s of (await pc.getStats()).values())
                        if (s.type === "inbound-rtp" && s.kind === "video")
                          return {...s, totalVideoFrames: q.totalVideoFrames, droppedVideoFrames:
                                  q.droppedVideoFrames, paused: v && v.paused};
                      return {};
                    }"""
                )
            )
        return out

    def clear(self) -> None:
        for page in self.pages:
            page.evaluate("__bench.seen = []; __bench.last = ''; __bench.tiles = {}")

    def close_pages(self) -> None:
        for page in self.pages:
            page.close()
        self.pages = []

    def close(self) -> None:
        self.close_pages()
        for browser in self.extra:
            browser.close()
        self.context.close()
        self.browser.close()
