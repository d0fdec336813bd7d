"""The live-view fan-out: one source per sandbox shared by every viewer, each at its own rate.

The source here is a fake at the one boundary (what captures the screen); the real captures behind
the hub are tested through the host (tests/sandbox_workers/test_host_service.py) and the web app
(tests/webapp/sandboxes/test_live_real.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import pytest

from sandbox_workers.live.fanout import FrameHub, Push, StreamEnded, hubs_of_this_loop, shared_frames


class Source:
    """A screen that changes `rate` times a second (frame i is b"<i>"), recording what happened."""

    def __init__(self, rate: float = 100.0, *, frames: int | None = None, fail_after: int | None = None):
        self.rate, self.frames, self.fail_after = rate, frames, fail_after
        self.events: list[tuple[str, float]] = []
        self.pushed = 0

    async def __call__(self, fps: float, push: Push) -> None:
        self.events.append(("start", fps))
        try:
            while self.frames is None or self.pushed < self.frames:
                if self.fail_after is not None and self.pushed >= self.fail_after:
                    raise OSError("the capture died")
                push(str(self.pushed).encode())
                self.pushed += 1
                await asyncio.sleep(1 / self.rate)
            await asyncio.Future()  # a still screen: no more frames
        finally:
            await asyncio.sleep(0.02)  # a clean-up that takes a while (a screencast stopped)
            self.events.append(("stop", fps))

    @property
    def starts(self) -> int:
        return sum(1 for e, _ in self.events if e == "start")


async def until(condition: Any, timeout: float = 2.0) -> bool:
    """Whether `condition()` became true within `timeout` seconds (checked every 10 ms)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def collect(frames: Any, seconds: float) -> list[bytes]:
    got: list[bytes] = []

    async def take() -> None:
        async for frame in frames:
            got.append(frame)

    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(take(), seconds)
    return got


def test_viewers_share_one_source_each_at_its_own_rate() -> None:
    async def scenario() -> None:
        source = Source(rate=100)
        hub = FrameHub(source, name="s1")
        fast, slow = await asyncio.gather(collect(hub.view(30), 1.0), collect(hub.view(4), 1.0))
        assert source.starts == 1 and source.events[0] == ("start", 30)
        assert 15 <= len(fast) <= 32, len(fast)
        assert 2 <= len(slow) <= 5, len(slow)
        # Newest frame wins: the slow viewer skips frames, it never falls behind the screen.
        numbers = [int(f) for f in slow]
        gaps = [b - a for a, b in zip(numbers, numbers[1:], strict=False)]
        assert all(g >= 10 for g in gaps), numbers  # at 100 frames/s a 4 fps viewer skips ~24 each time
        assert await until(lambda: source.events[-1] == ("stop", 30)), source.events
        assert hub.viewers == 0

    asyncio.run(scenario())


def test_a_viewer_that_stops_reading_holds_back_no_one() -> None:
    async def scenario() -> None:
        source = Source(rate=100)
        hub = FrameHub(source, name="s1")
        stuck = hub.view(30)
        first = await anext(stuck)  # takes one frame, then never reads again
        got = await collect(hub.view(30), 1.0)
        assert first == b"0" and len(got) >= 15
        await stuck.aclose()

    asyncio.run(scenario())


def test_a_viewer_joining_a_still_screen_gets_the_picture_at_once() -> None:
    async def scenario() -> None:
        source = Source(frames=1)
        hub = FrameHub(source, name="s1")
        first = hub.view(5)
        assert await asyncio.wait_for(anext(first), 2) == b"0"
        second = hub.view(5)
        assert await asyncio.wait_for(anext(second), 0.5) == b"0"
        assert source.starts == 1
        await first.aclose()
        await second.aclose()

    asyncio.run(scenario())


def test_a_faster_viewer_restarts_the_source_after_the_old_one_cleaned_up() -> None:
    async def scenario() -> None:
        source = Source(rate=100)
        hub = FrameHub(source, name="s1")
        thumb = hub.view(2)
        await anext(thumb)
        full = hub.view(20)
        assert await anext(full) == hub.latest  # the newest picture at once, then the faster source's
        await anext(full)
        assert [e for e in source.events] == [("start", 2), ("stop", 2), ("start", 20)]
        await full.aclose()
        # Back to the thumbnail's rate.
        assert await until(lambda: source.events[-2:] == [("stop", 20), ("start", 2)]), source.events
        await thumb.aclose()

    asyncio.run(scenario())


def test_a_failed_source_ends_every_viewer_and_the_next_starts_it_again() -> None:
    async def scenario() -> None:
        source = Source(rate=100, fail_after=5)
        frames = [shared_frames("k", source, 30), shared_frames("k", source, 10)]
        for f in frames:
            await anext(f)
        assert source.starts == 1 and len(hubs_of_this_loop()) == 1
        for f in frames:
            with pytest.raises(StreamEnded, match="the capture died"):
                while True:
                    await anext(f)
        assert hubs_of_this_loop() == {}
        source.fail_after = None
        again = shared_frames("k", source, 30)
        assert await anext(again)
        assert source.starts == 2
        await again.aclose()

    asyncio.run(scenario())


def test_a_viewer_that_comes_back_at_once_never_runs_a_second_source_beside_the_first() -> None:
    async def scenario() -> None:
        source = Source(rate=50)
        first = shared_frames("k", source, 10)
        await anext(first)
        await first.aclose()  # the page reconnects: its source is still cleaning up…
        second = shared_frames("k", source, 10)
        await anext(second)  # the newest picture at once…
        await anext(second)  # …then the source, started again once the first one stopped
        starts_and_stops = [e for e, _ in source.events]
        assert starts_and_stops == ["start", "stop", "start"], source.events
        await second.aclose()
        assert await until(lambda: hubs_of_this_loop() == {}), hubs_of_this_loop()

    asyncio.run(scenario())


def test_hubs_are_per_key() -> None:
    async def scenario() -> None:
        a, b = Source(), Source()
        fa, fb = shared_frames("a", a, 5), shared_frames("b", b, 5)
        await anext(fa)
        await anext(fb)
        assert a.starts == b.starts == 1 and set(hubs_of_this_loop()) == {"a", "b"}
        await fa.aclose()
        await fb.aclose()

    asyncio.run(scenario())
