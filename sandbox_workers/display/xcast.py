"""A screencast of an X display: JPEG frames when the screen changes (XDamage), at most `max_fps`.

It runs on a thread of its own with its own X and capture connections, so it never waits for (or
holds up) the sandbox's worker thread that runs actions and observations. A still screen costs no
capture; the first frame comes at once. A change drawn while a frame is captured is captured again
(never lost); changes faster than `max_fps` are merged into the next frame.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable

from sandbox_workers.display.capture import Grabber
from sandbox_workers.display.x11 import XSession

__all__ = ["XScreencast"]

log = logging.getLogger(__name__)

POLL_S = 0.25  # how often a still screen's thread looks whether it was stopped


class XScreencast:
    """Frames of `display` to `on_frame` (on this object's thread) until `stop`; `on_end(reason)` if
    the display fails under it (Xvfb died, the connection was cut)."""

    def __init__(
        self,
        display: str,
        on_frame: Callable[[bytes], None],
        *,
        max_fps: float = 10.0,
        quality: int = 60,
        on_end: Callable[[str], None] | None = None,
        name: str = "",
    ) -> None:
        self.display = display
        self.on_frame = on_frame
        self.on_end = on_end
        self.interval = 1.0 / max(0.1, min(float(max_fps), 60.0))
        self.quality = quality
        self.frames = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"xcast-{name or display}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        x: XSession | None = None
        grabber: Grabber | None = None
        try:
            x = XSession(self.display)
            grabber = Grabber(self.display)
            self._loop(x, grabber)
        except Exception as exc:
            if not self._stopped.is_set():
                log.info("the screencast of %s ended: %s", self.display, exc)
                if self.on_end is not None:
                    self.on_end(f"the screencast of {self.display} ended: {exc}")
        finally:
            for part in (x, grabber):
                if part is not None:
                    part.close()

    def _loop(self, x: XSession, grabber: Grabber) -> None:
        changed, next_at = True, 0.0  # the first frame at once
        while not self._stopped.is_set():
            if not changed:
                changed = x.changed(POLL_S)
                continue
            wait = next_at - time.monotonic()
            if wait > 0 and self._stopped.wait(wait):  # out the rate; changes meanwhile merge
                return
            x.arm()  # what is drawn from now on makes another frame
            shot = grabber.screenshot("jpeg", self.quality)
            next_at = time.monotonic() + self.interval
            changed = False
            self.frames += 1
            try:
                self.on_frame(shot.data)
            except Exception:  # the consumer's failure must not end the stream silently
                log.exception("screencast consumer failed")

    @property
    def running(self) -> bool:
        return self._thread.is_alive() and not self._stopped.is_set()

    def stop(self) -> None:
        """Stop the frames (none is delivered after this returns, bar one being delivered now)."""
        self._stopped.set()
        if threading.current_thread() is not self._thread:
            with contextlib.suppress(RuntimeError):
                self._thread.join(timeout=2)
