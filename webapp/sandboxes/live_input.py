"""Where a live viewer's input goes: the VNC relay's raw RFB and the WebRTC data channel's events.

Every input that changes a sandbox during an episode is in that episode, so a control ticket is no
way around the recorder. On each use (control and leases change while a socket is open):
- the sandbox is in a live episode (its active lease is "episode:N", N running): the input is handed
  to that episode's recorder (annotation's RecordedInput, which webapp.routing injects: this floor
  names no app above it), which executes it and records it as steps of the ticket's user, who must
  hold the sandbox's control now; otherwise it is refused;
- the sandbox is idle (no lease anywhere, the host says idle): raw RFB may reach it for whoever may
  control it (the host marks a sandbox touched outside a lease dirty and resets it before its next
  lease); WebRTC input has no raw path and is refused there;
- anything else is refused: a lease that is no live episode (a catalog check, an episode still
  being set up, a lease the web app did not make), a sandbox starting, resetting or unhealthy.
Refused input reaches nothing, and the viewer is told why (`InputRouter.refuse`, at most once every
REPEAT_S per reason) without the stream breaking.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, Protocol

from channels.db import database_sync_to_async

from webapp.episodes.models import Episode
from webapp.sandboxes.models import Lease, Sandbox
from webapp.sandboxes.selectors import CONTROL, sandbox_access

log = logging.getLogger(__name__)

REPEAT_S = 2.0  # the same refusal is told again after this long, not for every key
QUEUE = 200  # batches of episode input waiting for the recorder before more is refused


class InputRefused(Exception):
    """Input that may not reach the sandbox now; `reason` is what the viewer is told."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class EpisodeInput(Protocol):
    """One socket's recorder of input into one episode (annotation.live_input.RecordedInput)."""

    async def feed(self, events: Any) -> None:
        """Execute and record a batch of raw events; InputRefused when it may not."""

    async def close(self) -> None:
        """Keep what was begun and stop."""


EpisodeInputFactory = Callable[..., EpisodeInput]
"""Called with episode_id, user and on_error (an async callable taking the message of a late failure)."""


@dataclass(frozen=True)
class InputTarget:
    """Where input into a sandbox goes now: its live episode's recorder, or (episode None) raw: idle."""

    episode_id: int | None


def input_target(*, sandbox_id: int, user: Any) -> InputTarget:
    """Where `user`'s input into the sandbox goes now; InputRefused naming why it goes nowhere."""
    sandbox = Sandbox.objects.filter(pk=sandbox_id).first()
    if sandbox is None:
        raise InputRefused("the sandbox is gone")
    if sandbox_access(user=user, sandbox=sandbox) != CONTROL:
        raise InputRefused("you may no longer control this sandbox")
    lease = Lease.objects.filter(sandbox_id=sandbox_id, state=Lease.State.ACTIVE).first()
    running = Episode.objects.filter(sandbox_id=sandbox_id, status=Episode.Status.RUNNING)
    if lease is not None:
        holder, number = lease.holder, lease.holder.removeprefix("episode:")
        episode = running.filter(pk=int(number)).first() if number != holder and number.isdigit() else None
        if episode is not None:
            return InputTarget(episode_id=episode.pk)
        raise InputRefused(
            f"the sandbox is leased ({holder}) outside a live episode: input would change that work "
            "without a record of it"
        )
    if running.exists():
        raise InputRefused("the sandbox's episode holds no lease on it any more")
    if sandbox.state != Sandbox.State.IDLE:
        raise InputRefused(f"the sandbox is {sandbox.state}: it takes no input now")
    return InputTarget(episode_id=None)


class InputRouter:
    """One live socket's input: resolves the target on each use, keeps one recorder for the episode it
    goes to (episode input runs in order behind the socket, so pictures keep flowing meanwhile), and
    tells the viewer what was refused."""

    def __init__(
        self,
        *,
        sandbox_id: int,
        user: Any,
        recorder: EpisodeInputFactory | None,
        tell: Callable[[str], Awaitable[None]],
    ) -> None:
        self.sandbox_id, self.user, self.recorder, self._tell = sandbox_id, user, recorder, tell
        self._told: dict[str, float] = {}
        self._episode: tuple[int, EpisodeInput] | None = None
        self._queue: asyncio.Queue[tuple[int, list[dict[str, Any]]]] = asyncio.Queue(QUEUE)
        self._worker: asyncio.Task[None] | None = None
        self.refused = 0  # input messages refused (kept for tests and logs)

    async def target(self) -> InputTarget | None:
        """Where input goes now, or None: refused (and the viewer told)."""
        try:
            return await database_sync_to_async(input_target)(sandbox_id=self.sandbox_id, user=self.user)
        except InputRefused as exc:
            await self.refuse(exc.reason)
            return None

    async def refuse(self, reason: str, count: int = 1) -> None:
        """Tell the viewer why their input reached nothing (once per REPEAT_S for the same reason)."""
        self.refused += count
        now = time.monotonic()
        if now - self._told.get(reason, -REPEAT_S) >= REPEAT_S:
            self._told[reason] = now
            log.info("sandbox %s: input from user %s refused: %s", self.sandbox_id, self.user.pk, reason)
            try:
                await self._tell(reason)
            except Exception as exc:  # the socket is closing: nobody is left to tell
                log.debug("sandbox %s: could not tell the viewer: %s", self.sandbox_id, exc)

    async def to_episode(self, episode_id: int, events: list[dict[str, Any]]) -> None:
        """Queue events for the episode's recorder (in order; refused when the queue is full)."""
        if not events:
            return
        if self.recorder is None:
            await self.refuse("this server process records no live input: nothing was sent")
            return
        if self._worker is None:
            self._worker = asyncio.create_task(self._work())
        try:
            self._queue.put_nowait((episode_id, events))
        except asyncio.QueueFull:
            await self.refuse("input arrives faster than the sandbox takes it: some was not sent")

    async def _work(self) -> None:
        while True:
            episode_id, events = await self._queue.get()
            try:
                recorder = await self._recorder_for(episode_id)
                await recorder.feed(events)
            except InputRefused as exc:
                await self.refuse(exc.reason)
            except Exception:
                log.exception("sandbox %s: live input into episode %s failed", self.sandbox_id, episode_id)
                await self.refuse("the input could not be applied (a server error): nothing was recorded")
            finally:
                self._queue.task_done()

    async def _recorder_for(self, episode_id: int) -> EpisodeInput:
        if self._episode is not None and self._episode[0] == episode_id:
            return self._episode[1]
        await self._close_recorder()
        assert self.recorder is not None
        recorder = self.recorder(episode_id=episode_id, user=self.user, on_error=self.refuse)
        self._episode = (episode_id, recorder)
        return recorder

    async def _close_recorder(self) -> None:
        if self._episode is not None:
            _, recorder = self._episode
            self._episode = None
            await recorder.close()

    async def drain(self) -> None:
        """Wait until the queued input has been applied (tests; a clean close)."""
        if self._worker is not None:
            await self._queue.join()

    async def close(self) -> None:
        """Apply what is queued (briefly), then keep what the recorder began and stop."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self.drain(), timeout=5)
        if self._worker is not None:
            self._worker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._worker
        await self._close_recorder()
