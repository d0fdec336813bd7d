"""The live session socket of an episode: input, think-aloud, proposals, control, submit.

The consumer authenticates, then hands each message to a LiveSession on one worker thread (so a
person's actions reach the sandbox in order) and relays the episode's live events back. Messages
in: input, thought, pause, resume, propose, accept, edit, submit, control (op request / release /
force), clock (a game's time: step, realtime, half), tools, tool_call (server, tool, arguments: an MCP tool
of the sandbox, recorded as a step). Out: hello, step.created, episode.status, control.changed, proposal,
paused, clock, tools, calling, tool_result, error.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from channels.db import database_sync_to_async
from django.db import close_old_connections

from agent_core.actions import ActionError
from agent_core.data.recording import MAX_T
from agent_core.env import EnvError
from sandbox_workers.base import SandboxError
from webapp.annotation.services import DemoError
from webapp.annotation.session import GAME_CLOCKS, LiveSession
from webapp.common.live import episode_group
from webapp.common.sockets import JsonSocketConsumer
from webapp.episodes.models import Episode
from webapp.episodes.selectors import episode_visible_to
from webapp.sandboxes.consumers import sandbox_input_group
from webapp.sandboxes.control import (
    ControlError,
    control_allowed,
    control_held_by,
    control_of,
    control_release,
    control_request,
    control_state,
)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
TICK_S = 0.1
KEEP_ALIVE_S = 30.0
log = logging.getLogger(__name__)

# What a session may do when its user is the episode's annotator, or may control its sandbox.
FAILURES = (DemoError, ControlError, EnvError, SandboxError, ActionError)
MAX_TEXT = 10_000  # a thought, an edited action or an answer


def _text(content: dict[str, Any], field: str) -> str:
    """The string `field` of a message (absent: ""); DemoError naming it if it is anything else."""
    value = content.get(field, "")
    if not isinstance(value, str):
        raise DemoError(f"{field} must be a string")
    if len(value) > MAX_TEXT:
        raise DemoError(f"{field} may be at most {MAX_TEXT} characters")
    if "\x00" in value:
        raise DemoError(f"{field} may not contain NUL characters")
    return value


def _may_control(user: Any, episode: Episode) -> bool:
    if episode.annotator_id == user.pk and user.has_perm("episodes.annotate"):
        return True
    return episode.sandbox is not None and control_allowed(
        user=user, sandbox=episode.sandbox, episode=episode
    )


def _hello(user: Any, episode_id: int) -> dict[str, Any] | None:
    episode = episode_visible_to(user=user, episode_id=episode_id)
    if episode is None:
        return None
    episode = Episode.objects.select_related("sandbox").get(pk=episode.pk)
    token = control_of(sandbox_id=episode.sandbox_id) if episode.sandbox_id else None
    return {
        "type": "hello",
        "episode": episode.pk,
        "status": episode.status,
        "sandbox": episode.sandbox_id,
        "may_control": _may_control(user, episode),
        "control": control_state(token),
        "me": user.pk,
    }


class SessionConsumer(JsonSocketConsumer):
    """One browser tab's session on an episode."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        self.episode_id = int(self.scope["url_route"]["kwargs"]["episode_id"])
        # Join the episode's group before reading its state: an event published in between (the
        # demonstration's sandbox getting ready) then waits in this channel, after the hello, instead of
        # being lost (the page waited for a 'running' it never got).
        self.groups_joined = [episode_group(self.episode_id)]
        await self.channel_layer.group_add(self.groups_joined[0], self.channel_name)
        hello = await database_sync_to_async(_hello)(user, self.episode_id)
        if hello is None:
            await self.channel_layer.group_discard(self.groups_joined.pop(), self.channel_name)
            await self.accept()
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.user = user
        self.may_control = bool(hello["may_control"])
        if hello["sandbox"]:
            self.groups_joined.append(sandbox_input_group(hello["sandbox"]))
            await self.channel_layer.group_add(self.groups_joined[-1], self.channel_name)
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"session-{self.episode_id}")
        self.session: LiveSession | None = None
        self.offset: float | None = None
        self.last_event_at: float = 0.0
        self.last_received_at: float | None = None
        self.ticker = asyncio.create_task(self._tick_forever())
        await self.accept()
        await self.send_json(hello)

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)
        ticker = getattr(self, "ticker", None)
        if ticker is not None:
            ticker.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await ticker
        if getattr(self, "session", None) is not None:
            with contextlib.suppress(Exception):
                await self._run(self.session.close)  # type: ignore[union-attr]
        if getattr(self, "may_control", False):
            # Someone who took over a rollout and left must not leave the agent waiting forever.
            with contextlib.suppress(Exception):
                await self._run(self._hand_back_rollout)
        pool = getattr(self, "pool", None)
        if pool is not None:
            pool.shutdown(wait=False)

    # --- running session code on the session's thread -------------------------------------------

    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        def call() -> Any:
            close_old_connections()
            try:
                return fn(*args, **kwargs)
            finally:
                close_old_connections()

        return await asyncio.get_running_loop().run_in_executor(self.pool, call)

    async def _session(self) -> LiveSession:
        if self.session is None:
            self.session = await self._run(LiveSession, episode_id=self.episode_id, user=self.user)
        return self.session

    def _event_clock_now(self) -> float:
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
                    await self._run(session.tick, self._event_clock_now())
                if time.monotonic() - last_alive >= KEEP_ALIVE_S:
                    last_alive = time.monotonic()
                    await self._run(session.keep_alive)
            except FAILURES as exc:
                await self.send_json({"type": "error", "message": str(exc)})
            except Exception:
                log.exception("session %s: tick failed", self.episode_id)

    # --- messages from the page -------------------------------------------------------------------

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        if not isinstance(content, dict) or not isinstance(content.get("type"), str):
            await self.send_json({"type": "error", "message": "messages are JSON objects with a 'type'"})
            return
        kind = content["type"]
        handler = getattr(self, f"on_{kind}", None) if kind.isidentifier() else None
        if handler is None:
            await self.send_json({"type": "error", "message": f"unknown message type {kind!r}"})
            return
        if not self.may_control and kind != "ping":
            await self.send_json({"type": "error", "message": "you may watch this episode, not act on it"})
            return
        try:
            await handler(content)
        except FAILURES as exc:
            await self.send_json({"type": "error", "message": str(exc), "for": kind})
        except Exception as exc:
            log.exception("session %s: %s failed", self.episode_id, kind)
            await self.send_json({"type": "error", "message": f"internal error: {exc!r}", "for": kind})

    async def on_ping(self, content: dict[str, Any]) -> None:
        await self.send_json({"type": "pong"})

    async def on_input(self, content: dict[str, Any]) -> None:
        events = content.get("events")
        if not isinstance(events, list) or not events or len(events) > 500:
            raise DemoError("input needs a list of 1 to 500 events")
        times = [e.get("t") for e in events if isinstance(e, dict)]
        # Only times an event may carry: one bad value must not skew the clock of every later event.
        latest = max(
            (t for t in times if isinstance(t, int | float) and not isinstance(t, bool) and 0 <= t <= MAX_T),
            default=None,
        )
        if latest is not None:
            # Map the browser's clock onto ours; the smallest offset seen is the least delayed.
            offset = time.monotonic() - float(latest)
            self.offset = offset if self.offset is None else min(self.offset, offset)
            self.last_event_at, self.last_received_at = float(latest) + self.offset, time.monotonic()
        session = await self._session()
        await self._run(session.input, events, offset=self.offset or 0.0)

    async def on_thought(self, content: dict[str, Any]) -> None:
        text = _text(content, "text")
        session = await self._session()
        await self._run(session.set_thought, text)

    async def on_pause(self, content: dict[str, Any]) -> None:
        session = await self._session()
        await self._run(session.pause)
        await self.send_json({"type": "paused", "paused": True})

    async def on_resume(self, content: dict[str, Any]) -> None:
        session = await self._session()
        await self._run(session.resume)
        await self.send_json({"type": "paused", "paused": False})

    async def on_propose(self, content: dict[str, Any]) -> None:
        session = await self._session()
        await self.send_json({"type": "proposing"})
        proposal = await self._run(session.propose)
        await self.send_json({"type": "proposal", **proposal})

    async def on_accept(self, content: dict[str, Any]) -> None:
        session = await self._session()
        await self._run(session.accept)

    async def on_edit(self, content: dict[str, Any]) -> None:
        text = _text(content, "text")
        session = await self._session()
        await self._run(session.edit, text)

    async def on_submit(self, content: dict[str, Any]) -> None:
        answer = _text(content, "answer")
        session = await self._session()
        await self.send_json({"type": "checking"})
        episode = await self._run(session.submit, answer)
        await self.send_json(
            {
                "type": "submitted",
                "reward": episode.reward,
                "status": episode.status,
                "error": episode.error,
            }
        )

    async def on_clock(self, content: dict[str, Any]) -> None:
        choice = _text(content, "clock")
        if choice not in GAME_CLOCKS:
            raise DemoError(f"clock is one of {', '.join(GAME_CLOCKS)}")
        session = await self._session()
        choice = await self._run(session.game_clock, choice)
        await self.send_json({"type": "clock", "clock": choice})

    async def on_tools(self, content: dict[str, Any]) -> None:
        session = await self._session()
        tools = await self._run(session.tools)
        await self.send_json({"type": "tools", "tools": tools})

    async def on_tool_call(self, content: dict[str, Any]) -> None:
        server, tool = _text(content, "server"), _text(content, "tool")
        if not server or not tool:
            raise DemoError("a tool call needs a server and a tool")
        session = await self._session()
        await self.send_json({"type": "calling", "server": server, "tool": tool})
        result = await self._run(session.tool_call, server, tool, content.get("arguments", {}))
        await self.send_json({"type": "tool_result", "server": server, "tool": tool, "result": result})

    async def on_control(self, content: dict[str, Any]) -> None:
        op = content.get("op")
        if op not in ("request", "release", "force"):
            raise DemoError("control op is request, release or force")
        await self._run(self._control, op)

    def _control(self, op: str) -> None:
        episode = Episode.objects.select_related("sandbox").get(pk=self.episode_id)
        if episode.sandbox is None or episode.is_done:
            raise DemoError("this episode has no live sandbox")
        if op == "release":
            if self.session is not None:
                self.session.flush()
            control_release(sandbox=episode.sandbox, user=self.user)
        else:
            control_request(sandbox=episode.sandbox, user=self.user, force=op == "force")

    def _hand_back_rollout(self) -> None:
        episode = Episode.objects.select_related("sandbox").get(pk=self.episode_id)
        if episode.sandbox is None or episode.is_done or episode.batch_id is None:
            return  # a demonstration (no batch): control stays for when its annotator comes back
        if control_held_by(sandbox_id=episode.sandbox.pk, user=self.user):
            control_release(sandbox=episode.sandbox, user=self.user)

    # --- events from the episode's group -----------------------------------------------------------

    async def step_created(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "step.created", **event["payload"]})

    async def episode_status(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "episode.status", **event["payload"]})

    async def control_changed(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "control.changed", **event["payload"]})

    async def sandbox_input(self, event: dict[str, Any]) -> None:
        """Input that came by a WebRTC data channel: this user's own only (control is checked on use)."""
        if event.get("user_id") != self.user.pk or not self.may_control:
            return
        try:
            await self.on_input({"events": event.get("events")})
        except FAILURES as exc:
            await self.send_json({"type": "error", "message": str(exc), "for": "input"})
