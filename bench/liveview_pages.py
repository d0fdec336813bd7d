"""Viewers for bench/liveview_bench.py that are real headless Chromium pages running the product's own
live view (the live page, the wall), instrumented to say when pixels landed.

The instrumentation wraps the canvas drawImage that the live view (screencast) and noVNC (its flip)
draw frames with, and follows WebRTC <video> elements frame by frame (requestVideoFrameCallback): each
drawn frame counts, and the colour of a pixel near the bottom-right corner (the root window, away from
the xterm) is kept with the time it first appeared (performance.timeOrigin + now: the wall clock, as
Python's time.time() on the same machine). Per wall tile (data-sandbox) the times of its frames are
kept instead.
"""

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
  function sampleCanvas(c) {
    if (!c.width || !c.height) return;
    pctx.drawImage(c, c.width - 4, c.height - 4, 1, 1, 0, 0, 1, 1);
    const d = pctx.getImageData(0, 0, 1, 1).data;
    note(d[0], d[1], d[2]);
  }
  const draw = CanvasRenderingContext2D.prototype.drawImage;
  CanvasRenderingContext2D.prototype.drawImage = function (...args) {
    const out = draw.apply(this, args);
    const c = this.canvas;
    if (c !== probe && c.closest && c.closest(".live-box")) {
      const tile = c.closest("[data-sandbox]");
      if (tile && tile.dataset.testid === "wall-tile") {
        (B.tiles[tile.dataset.sandbox] = B.tiles[tile.dataset.sandbox] || []).push(now());
      } else {
        B.frames += 1;
        sampleCanvas(c);
      }
    }
    return out;
  };
  function follow(video) {
    if (video.__followed) return;
    video.__followed = true;
    const step = () => {
      B.frames += 1;
      if (video.videoWidth) {
        pctx.drawImage(video, video.videoWidth - 4, video.videoHeight - 4, 1, 1, 0, 0, 1, 1);
        const d = pctx.getImageData(0, 0, 1, 1).data;
        note(d[0], d[1], d[2]);
      }
      video.requestVideoFrameCallback(step);
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

    def __init__(self, playwright: Any, site_url: str, cookie_name: str, cookie_value: str) -> None:
        self.browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        self.context = self.browser.new_context(viewport={"width": 1280, "height": 900})
        self.context.add_cookies([{"name": cookie_name, "value": cookie_value, "url": site_url}])
        self.context.add_init_script(INSTRUMENT)
        self.pages: list[Any] = []

    def open(self, url: str, n: int, *, first_frame_s: float = 60.0) -> None:
        """Open `n` more pages of `url`; returns once every page has drawn a frame."""
        new = []
        for _ in range(n):
            page = self.context.new_page()
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

    def tiles(self) -> dict[str, list[float]]:
        """Per wall tile (sandbox pk), the times (s) of its frames (the first page's)."""
        raw = self.pages[0].evaluate("__bench.tiles")
        return {k: [t / 1000 for t in v] for k, v in raw.items()}

    def clear(self) -> None:
        for page in self.pages:
            page.evaluate("__bench.seen = []; __bench.last = ''; __bench.tiles = {}")

    def close_pages(self) -> None:
        for page in self.pages:
            page.close()
        self.pages = []

    def close(self) -> None:
        self.close_pages()
        self.context.close()
        self.browser.close()
