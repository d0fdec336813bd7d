"""VirtualClock's pacer never holds up what comes after it (CDP faked at its one boundary, `send`).

The real thing is tests/sandbox_workers/test_browser.py::test_virtual_time_pause_advance_accelerate,
where a navigation once waited 40 s "stopping the virtual-time pacer" on a loaded machine.
"""

from __future__ import annotations

import asyncio
import threading
import time

from sandbox_workers.display.cdp import VirtualClock

_KEPT: list[asyncio.AbstractEventLoop] = []


def test_stopping_the_pacer_returns_in_bounded_time_even_if_its_cdp_call_never_ends() -> None:
    calls: list[str] = []

    async def stubborn_send(method: str, params: dict) -> None:
        calls.append(params.get("policy", ""))
        if params.get("policy") == "pauseIfNetworkFetchesPending":
            while True:  # a call Chromium never answers, and that does not give way to a cancel
                try:
                    await asyncio.sleep(3600)
                except asyncio.CancelledError:
                    continue

    async def scenario() -> float:
        clock = VirtualClock(stubborn_send)
        clock.STOP_WAIT_S = 0.3
        await clock.accelerate(2.0)
        await asyncio.sleep(0.1)  # the pacer is inside its call now
        t0 = time.monotonic()
        await clock.close()
        return time.monotonic() - t0

    # In a thread of its own: a stop that waits on the call never returns, and must fail this test
    # rather than hang the suite.
    result: list[float] = []

    def run() -> None:
        loop = asyncio.new_event_loop()
        _KEPT.append(loop)  # the stubborn call stays pending there: keep it from being collected mid-run
        result.append(loop.run_until_complete(scenario()))

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(10)
    assert result, "stopping the pacer waited on its CDP call (still waiting after 10 s)"
    took = result[0]
    assert "pauseIfNetworkFetchesPending" in calls
    assert took < 1.0, took


def test_a_pacer_that_gives_way_is_waited_for() -> None:
    sent: list[str] = []

    async def send(method: str, params: dict) -> None:
        sent.append(params.get("policy", ""))
        await asyncio.sleep(0.01)

    async def scenario() -> None:
        clock = VirtualClock(send)
        await clock.accelerate(4.0)
        await asyncio.sleep(0.2)
        await clock.pause()
        n = len(sent)
        await asyncio.sleep(0.2)
        assert len(sent) == n, "the pacer went on after pause"
        assert clock.mode == "paused" and sent[-1] == "pause"

    asyncio.run(scenario())
