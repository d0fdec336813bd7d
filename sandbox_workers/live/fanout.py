"""One stream of a sandbox's screen shared by every viewer (fan-out).

A `FrameHub` runs one source (a capture, or one upstream socket) at the rate of its fastest viewer and
hands each frame to every viewer. Each viewer gets at most its own rate, and always the newest frame:
a slow viewer (a thumbnail at 2 fps, a far browser) skips frames and never holds back the others or
the source. A viewer that joins gets the newest frame at once (a still screen sends no new one).
The hub ends when its last viewer leaves; a source that fails ends every viewer's stream (the page
reconnects and a new hub starts).

`shared_frames(key, source, fps)` is the registry around it: every viewer of one key in this event
loop shares one hub. The host shares one capture per sandbox (`sandbox_workers.host`); the web process
shares one host socket per sandbox among its screencast and WebRTC viewers (`shared_host_frames`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import weakref
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Hashable

__all__ = ["FrameHub", "Push", "Source", "StreamEnded", "hubs_of_this_loop", "shared_frames"]

log = logging.getLogger(__name__)

Push = Callable[[bytes], None]
# A source runs until cancelled, calling push(frame) on the event loop's thread at up to `fps`.
Source = Callable[[float, Push], Awaitable[None]]


class StreamEnded(Exception):
    """The shared stream's source ended or failed; its viewers' streams end with it."""


class _Viewer:
    def __init__(self, fps: float) -> None:
        self.fps = fps
        self.interval = 1.0 / fps
        self.frame: bytes | None = None
        self.ended: BaseException | None = None
        self.fresh = asyncio.Event()
        self.delivered = 0

    def offer(self, frame: bytes) -> None:
        self.frame = frame  # replaces one not yet taken: newest wins
        self.fresh.set()

    def end(self, why: BaseException) -> None:
        self.ended = why
        self.fresh.set()

    async def frames(self) -> AsyncIterator[bytes]:
        next_at = 0.0
        while True:
            await self.fresh.wait()
            wait = next_at - time.monotonic()
            if wait > 0 and self.ended is None:
                await asyncio.sleep(wait)  # out this viewer's rate; newer frames replace meanwhile
            if self.ended is not None:
                raise StreamEnded(str(self.ended)) from self.ended
            self.fresh.clear()
            frame, self.frame = self.frame, None
            if frame is None:
                continue
            next_at = time.monotonic() + self.interval
            self.delivered += 1
            yield frame


class FrameHub:
    """One source, many viewers (see the module)."""

    def __init__(self, source: Source, *, name: str, on_idle: Callable[[FrameHub], None] | None = None):
        self.name = name
        self._source = source
        self._on_idle = on_idle
        self._viewers: set[_Viewer] = set()
        self._task: asyncio.Task[None] | None = None  # the source, or the wait for its end once idle
        self._source_task: asyncio.Task[None] | None = None
        self.fps = 0.0
        self.latest: bytes | None = None
        self.frames_in = 0
        self.source_starts = 0

    @property
    def viewers(self) -> int:
        return len(self._viewers)

    def _push(self, frame: bytes) -> None:
        self.latest = frame
        self.frames_in += 1
        for viewer in self._viewers:
            viewer.offer(frame)

    def _retune(self) -> None:
        """Run the source at the fastest viewer's rate (restarted when that changes); none: stop it."""
        want = max((v.fps for v in self._viewers), default=0.0)
        running = self._task is not None and not self._task.done()
        if want == self.fps and (running or not want):
            return
        previous, self._task, self.fps = self._task, None, want
        if previous is not None:
            previous.cancel()
        previous = self._source_task  # the last source started (maybe still cleaning up)
        if want:
            self._task = self._source_task = asyncio.create_task(
                self._run(want, previous), name=f"frames-{self.name}"
            )
        elif previous is not None and not previous.done():
            # Forgotten only once the source has cleaned up: a viewer that comes back meanwhile (a
            # page reconnecting) restarts this hub after it, never a second source beside it.
            self._task = asyncio.create_task(self._idle_after(previous), name=f"frames-{self.name}-end")
        elif self._on_idle is not None:
            self._on_idle(self)

    async def _idle_after(self, previous: asyncio.Task[None]) -> None:
        await asyncio.wait([previous])
        if not self._viewers and self._on_idle is not None:
            self._on_idle(self)

    async def _run(self, fps: float, previous: asyncio.Task[None] | None) -> None:
        if previous is not None:
            await asyncio.wait([previous])  # its clean-up (a screencast stopped) before this start
        self.source_starts += 1
        try:
            await self._source(fps, self._push)
            why: BaseException = StreamEnded(f"the screen stream of {self.name} ended")
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.info("the screen stream of %s failed: %s", self.name, exc)
            why = exc
        # Every viewer's stream ends; the next viewer starts the source again.
        for viewer in self._viewers:
            viewer.end(why)
        self._viewers.clear()
        self._task, self.fps = None, 0.0
        if self._on_idle is not None:
            self._on_idle(self)

    async def view(self, fps: float) -> AsyncGenerator[bytes, None]:
        """Frames for one viewer at up to `fps`, until the source ends (StreamEnded) or the caller stops."""
        viewer = _Viewer(fps)
        self._viewers.add(viewer)
        if self.latest is not None:
            viewer.offer(self.latest)
        self._retune()
        try:
            async for frame in viewer.frames():
                yield frame
        finally:
            self._viewers.discard(viewer)
            self._retune()

    async def close(self) -> None:
        """Stop the source now and end every viewer's stream."""
        for viewer in self._viewers:
            viewer.end(StreamEnded(f"the screen stream of {self.name} was closed"))
        self._viewers.clear()
        task, self._task, self.fps = self._task, None, 0.0
        if task is not None:
            task.cancel()
        tasks = {t for t in (task, self._source_task) if t is not None}
        if tasks:
            await asyncio.wait(tasks)


_HUBS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, FrameHub]] = (
    weakref.WeakKeyDictionary()
)


def hubs_of_this_loop() -> dict[Hashable, FrameHub]:
    """The hubs viewers of this event loop share, by key (for stats and tests)."""
    return _HUBS.setdefault(asyncio.get_running_loop(), {})


async def shared_frames(
    key: Hashable, source: Source, fps: float, *, name: str = ""
) -> AsyncGenerator[bytes, None]:
    """Frames at up to `fps` from the hub every viewer of `key` shares (started with `source` by the
    first viewer); StreamEnded when the source ends."""
    hubs = hubs_of_this_loop()
    hub = hubs.get(key)
    if hub is None:

        def forget(h: FrameHub) -> None:
            if hubs.get(key) is h:
                del hubs[key]

        hub = hubs[key] = FrameHub(source, name=name or str(key), on_idle=forget)
    frames = hub.view(fps)
    async with contextlib.aclosing(frames):
        async for frame in frames:
            yield frame
