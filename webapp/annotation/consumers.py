"""The live session socket of an episode: input, think-aloud, proposals, control, submit.

The consumer authenticates, then hands each message to a LiveSession on one worker thread (so a
person's actions reach the sandbox in order: live_input.LiveInput) and relays the episode's live
events back. All of the session page's input comes this way, whatever transport shows the screen
(the page opens its live view, WebRTC included, with a view ticket). Messages
in: input, thought, pause, resume, propose, accept, edit, submit, control (op request / release /
force), clock (a game's time: step, realtime, half), tools, tool_call (server, tool, arguments: an MCP tool
of the sandbox, recorded as a step). Out: hello, step.created, episode.status, control.changed, proposal,
paused, clock, tools, calling, tool_result, error.
"""

from __future__ import annotations

import logging
from typing import Any

from channels.db import database_sync_to_async

from webapp.annotation.live_input import FAILURES, LiveInput
from webapp.annotation.services import DemoError
from webapp.annotation.session import GAME_CLOCKS, LiveSession, ToolsUnavailable
from webapp.common.live import episode_group
from webapp.common.sockets import JsonSocketConsumer
from webapp.episodes.models import Episode
from webapp.episodes.selectors import episode_visible_to
from webapp.sandboxes.control import (
    control_allowed,
    control_held_by,
    control_of,
    control_release,
    control_request,
    control_state,
)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
log = logging.getLogger(__name__)

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
        # An episode that ended before the page's socket opened (a preparation that failed at once)
        # says why in the hello itself: no event about it is coming any more.
        "error": episode.error if episode.is_done else "",
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
        self.live = LiveInput(episode_id=self.episode_id, user=user, on_error=self._tell_error)
        await self.accept()
        await self.send_json(hello)

    async def disconnect(self, code: int) -> None:
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)
        if getattr(self, "live", None) is not None:
            # Someone who took over a rollout and left must not leave the agent waiting forever.
            await self.live.close(then=self._hand_back_rollout if self.may_control else None)

    # --- running session code on the session's thread -------------------------------------------

    @property
    def session(self) -> LiveSession | None:
        return self.live.session

    async def _run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        return await self.live.run(fn, *args, **kwargs)

    async def _session(self) -> LiveSession:
        return await self.live.live_session()

    async def _tell_error(self, message: str) -> None:
        await self.send_json({"type": "error", "message": message})

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
        await self.live.feed(content.get("events"))

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
        ended = await self._run(session.accept)  # a proposed finished() ends the episode
        if ended is not None:
            await self._submitted(ended)

    async def on_edit(self, content: dict[str, Any]) -> None:
        text = _text(content, "text")
        session = await self._session()
        ended = await self._run(session.edit, text)
        if ended is not None:
            await self._submitted(ended)

    async def on_submit(self, content: dict[str, Any]) -> None:
        answer = _text(content, "answer")
        session = await self._session()
        await self.send_json({"type": "checking"})
        await self._submitted(await self._run(session.submit, answer))

    async def _submitted(self, episode: Episode) -> None:
        await self.send_json(
            {"type": "submitted", "reward": episode.reward, "status": episode.status, "error": episode.error}
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
        try:
            tools = await self._run(session.tools)
        except ToolsUnavailable as exc:  # shown in the Tools panel; the sandbox and its screen go on
            await self.send_json({"type": "tools", "tools": [], "error": str(exc)})
            return
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
