"""One socket's input into one episode: its LiveSession on a thread of its own, the events' clock, the ticks.

Every socket that carries a person's input into an episode holds one: the session socket
(consumers.SessionConsumer) and the live transports that carry input themselves (the VNC relay, the
WebRTC data channel: webapp.sandboxes.live_input, which gets `RecordedInput` injected by
webapp.routing so that floor names no app above it). Input is applied in order on the one thread,
each batch checked against the episode's state and its control token by LiveSession.input, and a
step whose merge window has passed (a click not followed by a second one) is committed by the ticker.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from django.db import close_old_connections

from agent_core.actions import ActionError
from agent_core.data.recording import MAX_T
from agent_core.env import EnvError
from sandbox_workers.base import SandboxError
from webapp.annotation.services import DemoError
from webapp.annotation.session import LiveSession
from webapp.sandboxes.control import ControlError
from webapp.sandboxes.live_input import InputRefused

log = logging.getLogger(__name__)

TICK_S = 0.1
KEEP_ALIVE_S = 30.0
MAX_EVENTS = 500  # one batch of input
# What a person's session can fail with: told to them, the socket goes on.
FAILURES = (DemoError, ControlError, EnvError, SandboxError, ActionError)


class LiveInput:
    """Runs one LiveSession's calls in order on a thread of its own; maps the events' clock onto ours."""

    def __init__(self, *, episode_id: int, user: Any, on_error: Callable[[str], Awaitable[None]]) -> None:
        self.episode_id, self.user, self.on_error = episode_id, user, on_error
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"session-{episode_id}")
        self.session: LiveSession | None = None
        self.offset: float | None = None
        self.last_event_at: float = 0.0
        self.last_received_at: float | None = None
        self.ticker = asyncio.create_task(self._tick_forever())

    async def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """Call `fn` on the session's thread (with fresh database connections around it)."""

        def call() -> Any:
            close_old_connections()
            try:
                return fn(*args, **kwargs)
            finally:
                close_old_connections()

        return await asyncio.get_running_loop().run_in_executor(self.pool, call)

    async def live_session(self) -> LiveSession:
        """The episode's LiveSession for this user, made on first use."""
        if self.session is None:
            self.session = await self.run(LiveSession, episode_id=self.episode_id, user=self.user)
        return self.session

    async def feed(self, events: Any) -> None:
        """Apply a batch of raw input events (`t` in the sender's clock); FAILURES when it is refused."""
        if not isinstance(events, list) or not events or len(events) > MAX_EVENTS:
            raise DemoError(f"input needs a list of 1 to {MAX_EVENTS} events")
        times = [e.get("t") for e in events if isinstance(e, dict)]
        # Only times an event may carry: one bad value must not skew the clock of every later event.
        latest = max(
            (t for t in times if isinstance(t, int | float) and not isinstance(t, bool) and 0 <= t <= MAX_T),
            default=None,
        )
        if latest is not None:
            # Map the sender's clock onto ours; the smallest offset seen is the least delayed.
            offset = time.monotonic() - float(latest)
            self.offset = offset if self.offset is None else min(self.offset, offset)
            self.last_event_at, self.last_received_at = float(latest) + self.offset, time.monotonic()
        session = await self.live_session()
        await self.run(session.input, events, offset=self.offset or 0.0)

    def clock_now(self) -> float:
        """Now, in the events' clock, as far as the merge windows are concerned.

        A window (a click's repeat, a typing run) has passed only when that long went by with no new
        input *arriving*: input delayed on its way (a loaded server, a busy data channel) must not cut a
        run of typing in two. So the time since the last event is counted from when it arrived.
        """
        if self.last_received_at is None:
            return time.monotonic()
        return self.last_event_at + (time.monotonic() - self.last_received_at)

    async def _tick_forever(self) -> None:
        last_alive = time.monotonic()
        while True:
            await asyncio.sleep(TICK_S)
            session = self.session
            if session is None:
                continue
            try:
                if session.busy:
                    await self.run(session.tick, self.clock_now())
                if time.monotonic() - last_alive >= KEEP_ALIVE_S:
                    last_alive = time.monotonic()
                    await self.run(session.keep_alive)
            except FAILURES as exc:
                await self.on_error(str(exc))
            except Exception:
                log.exception("session %s: tick failed", self.episode_id)

    async def close(self, *, then: Callable[[], None] | None = None) -> None:
        """Keep the step in progress, run `then` on the session's thread, and stop."""
        self.ticker.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.ticker
        if self.session is not None:
            with contextlib.suppress(Exception):
                await self.run(self.session.close)
        if then is not None:
            with contextlib.suppress(Exception):
                await self.run(then)
        self.pool.shutdown(wait=False)


class RecordedInput(LiveInput):
    """A live transport's input into the sandbox's episode (webapp.sandboxes.live_input.EpisodeInput):
    what the session refuses comes back as InputRefused, for the transport to tell its viewer."""

    async def feed(self, events: Any) -> None:
        try:
            await super().feed(events)
        except FAILURES as exc:
            raise InputRefused(str(exc)) from None
