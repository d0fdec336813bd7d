"""Live screens of a sandbox over WebSockets: the VNC relay, the JPEG screencast, WebRTC signalling.

Each consumer checks its ticket in connect() (tickets.py says what a ticket binds), then pipes bytes
between the browser and the sandbox's host. Screencast and WebRTC viewers of one sandbox share one
host socket in this process (sandbox_workers.live.fanout); the host shares one capture among them.
No viewer's raw input reaches the host on its own say: the VNC relay parses the RFB stream
(sandbox_workers.live.rfb) and drops a view ticket's input; a control ticket's input, and a WebRTC
control peer's data channel, go where live_input.py decides on each use: into the sandbox's live
episode as recorded steps of the control holder, raw into an idle sandbox, or nowhere (the viewer
is told why in a text message; the stream goes on).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import time
from typing import Any
from urllib.parse import parse_qs

import aiohttp
from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer
from django.conf import settings

from sandbox_workers.live.client import LiveStreamError, auth_headers, host_vnc_url, shared_host_frames
from sandbox_workers.live.rfb import KeyMessage, PointerMessage, RfbClientFilter, RfbViolation
from sandbox_workers.live.rfb_input import RfbInputTranslator
from webapp.common.sockets import MessageError, message_decode
from webapp.sandboxes.live_input import EpisodeInputFactory, InputRouter
from webapp.sandboxes.models import Sandbox
from webapp.sandboxes.selectors import CONTROL
from webapp.sandboxes.tickets import TicketClaims, TicketError, ticket_check

log = logging.getLogger(__name__)

# Close codes: as the episode stream (accept, then close, so a browser can tell them apart).
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403
CLOSE_PROTOCOL = 4400  # the viewer sent what a view-only stream refuses
CLOSE_HOST_UNAVAILABLE = 4502  # the host refused or dropped the stream; the page reconnects

FPS_DEFAULT, FPS_MIN, FPS_MAX = 5.0, 0.2, 30.0
WIDTH_MIN, WIDTH_MAX = 64, 4096
ACK_WINDOW = 2  # screencast frames a pacing viewer may have unacknowledged (one drawing, one on its way)
VIEW_ONLY = "this is a view-only stream: your input is not sent (ask for a control ticket)"


def _query(scope: dict[str, Any]) -> dict[str, str]:
    return {k: v[-1] for k, v in parse_qs(scope.get("query_string", b"").decode()).items()}


def _width(raw: str | None) -> int | None:
    """A thumbnail's width in pixels (the screencast scaled down), or None for the full screen."""
    if not raw or not raw.isdigit():
        return None
    return min(WIDTH_MAX, max(WIDTH_MIN, int(raw)))


def _fps(raw: str | None) -> float:
    try:
        fps = float(raw) if raw else FPS_DEFAULT
    except ValueError:
        fps = FPS_DEFAULT
    return min(FPS_MAX, max(FPS_MIN, fps))


@database_sync_to_async
def _admit(scope: dict[str, Any], transport: str) -> tuple[TicketClaims, Sandbox]:
    session = scope.get("session")
    sandbox_id = int(scope["url_route"]["kwargs"]["pk"])
    claims = ticket_check(
        ticket=_query(scope).get("ticket", ""),
        user=scope.get("user"),
        session_key=getattr(session, "session_key", None),
        sandbox_id=sandbox_id,
        transport=transport,
    )
    return claims, Sandbox.objects.select_related("host").get(pk=sandbox_id)


class _LiveConsumer(AsyncWebsocketConsumer):  # type: ignore[misc]
    """Ticket check and tear-down shared by the live transports.

    `recorder` (given by the routing) records a control viewer's input into the sandbox's episode;
    without one, such input is refused."""

    transport = ""
    recorder: EpisodeInputFactory | None = None

    def __init__(self, *args: Any, recorder: EpisodeInputFactory | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.recorder = recorder
        self.router: InputRouter | None = None

    async def connect(self) -> None:
        self.tasks: list[asyncio.Task[None]] = []
        self.http: aiohttp.ClientSession | None = None
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self._refuse(CLOSE_UNAUTHENTICATED)
            return
        try:
            self.claims, self.sandbox = await _admit(self.scope, self.transport)
        except TicketError as exc:
            log.info("live %s of sandbox %s refused to user %s: %s", self.transport,
                     self.scope["url_route"]["kwargs"]["pk"], user.pk, exc.reason)  # fmt: skip
            await self._refuse(CLOSE_FORBIDDEN)
            return
        if not settings.SANDBOX_HOST_TOKEN:
            await self._refuse(CLOSE_HOST_UNAVAILABLE)
            return
        await self.start()

    async def start(self) -> None:
        raise NotImplementedError

    async def _refuse(self, code: int) -> None:
        await self.accept()
        await self.close(code=code)

    def spawn(self, coro: Any) -> None:
        """Run `coro` alongside the socket; when it ends the socket is closed for a reconnect."""

        async def guarded() -> None:
            try:
                await coro
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.info("live %s of sandbox %s ended: %s", self.transport, self.sandbox.pk, exc)
            await self.close(code=CLOSE_HOST_UNAVAILABLE)

        self.tasks.append(asyncio.create_task(guarded()))

    async def send_error(self, message: str) -> None:
        """Tell the viewer why a frame it sent was ignored (the stream goes on)."""
        await self.send(text_data=json.dumps({"type": "error", "error": message}))

    async def send_refusal(self, message: str) -> None:
        """Tell the viewer why their input reached nothing (the stream goes on)."""
        await self.send(text_data=json.dumps({"type": "input_refused", "error": message}))

    def input_router(self) -> InputRouter:
        """Where this socket's input goes (made once; it checks the target on each use)."""
        if self.router is None:
            self.router = InputRouter(
                sandbox_id=self.sandbox.pk, user=self.scope["user"], recorder=self.recorder,
                tell=self.send_refusal,
            )  # fmt: skip
        return self.router

    async def disconnect(self, code: int) -> None:
        if getattr(self, "router", None) is not None:
            await self.router.close()  # type: ignore[union-attr]
        for task in getattr(self, "tasks", []):
            task.cancel()
        await asyncio.gather(*getattr(self, "tasks", []), return_exceptions=True)
        if getattr(self, "http", None) is not None:
            await self.http.close()  # type: ignore[union-attr]


class VncRelayConsumer(_LiveConsumer):
    """RFB bytes between noVNC and the sandbox's VNC server. The viewer's stream is parsed: pictures
    pass; a view ticket's input is dropped; a control ticket's goes where live_input.py says (turned
    into the recorder's events for an episode, raw to an idle sandbox, else nowhere). Clipboard text
    and screen resizes never pass."""

    transport = "vnc"

    async def start(self) -> None:
        self.filter = RfbClientFilter()
        self.translator = RfbInputTranslator()
        self.idle = False  # the last input found the sandbox idle: hovering is then checked and sent too
        self.http = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        url = host_vnc_url(self.sandbox.host.api_url, self.sandbox.external_id)
        try:
            self.upstream = await self.http.ws_connect(
                url, headers=auth_headers(settings.SANDBOX_HOST_TOKEN), heartbeat=30, max_msg_size=0
            )
        except (aiohttp.ClientError, OSError) as exc:
            log.info("VNC of sandbox %s unavailable: %s", self.sandbox.pk, exc)
            await self._refuse(CLOSE_HOST_UNAVAILABLE)
            return
        # noVNC asks for the "binary" subprotocol on some versions; the relay always speaks binary.
        subprotocols = self.scope.get("subprotocols") or []
        await self.accept(subprotocol="binary" if "binary" in subprotocols else None)
        self.spawn(self._from_host())

    async def _from_host(self) -> None:
        async for msg in self.upstream:
            if msg.type == aiohttp.WSMsgType.BINARY:
                await self.send(bytes_data=msg.data)
            elif msg.type in (aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSE):
                break

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if bytes_data is None:
            await self.send_error("the VNC relay carries binary RFB frames only")
            return
        if not hasattr(self, "upstream"):
            return
        refused = self.filter.refused
        try:
            segments = self.filter.segments(bytes_data)
        except RfbViolation as exc:
            log.info("VNC of sandbox %s closed: %s", self.sandbox.pk, exc)
            await self.close(code=CLOSE_PROTOCOL)
            return
        if self.filter.refused > refused:
            await self.input_router().refuse("the clipboard and the screen size are not a viewer's to change")
        inputs = [s for s in segments if not isinstance(s, bytes)]
        if not inputs:
            out = b"".join(s for s in segments if isinstance(s, bytes))
        elif self.claims.mode != CONTROL:
            await self.input_router().refuse(VIEW_ONLY, len(inputs))
            out = b"".join(s for s in segments if isinstance(s, bytes))
        else:
            out = await self._route(segments, inputs)
        if out:
            await self.upstream.send_bytes(out)

    async def _route(self, segments: list[Any], inputs: list[KeyMessage | PointerMessage]) -> bytes:
        """A control viewer's input: the bytes to forward (raw input only into an idle sandbox)."""
        router = self.input_router()
        t = time.monotonic()
        events: list[dict[str, Any]] = []
        untranslated: list[str] = []
        for message in inputs:  # every message, so the translator keeps the buttons and modifiers held
            made, why = self.translator.translate(message, t)
            events += made
            untranslated += [why] if why else []
        passed = b"".join(s for s in segments if isinstance(s, bytes))
        if not events and not untranslated and not self.idle:
            return passed  # hovering over an episode's sandbox: nothing a step records, nothing sent
        target = await router.target()
        self.idle = target is not None and target.episode_id is None
        if target is None:
            return passed
        if target.episode_id is not None:
            for why in untranslated:
                await router.refuse(why)
            await router.to_episode(target.episode_id, events)
            return passed
        # Idle: no episode is there to record it; the host resets a sandbox touched outside a lease.
        return b"".join(s if isinstance(s, bytes) else s.raw for s in segments)


class _Pacing:
    """Frames sent and acknowledged by a pacing viewer: room for another while fewer than `window` are
    unacknowledged (an ack beyond the frames sent frees nothing)."""

    def __init__(self, window: int) -> None:
        self.window = window
        self.sent = self.acked = 0
        self._acked = asyncio.Event()

    async def room(self) -> None:
        while self.sent - self.acked >= self.window:
            self._acked.clear()
            await self._acked.wait()

    def ack(self) -> None:
        if self.acked < self.sent:
            self.acked += 1
            self._acked.set()


class ScreencastConsumer(_LiveConsumer):
    """JPEG frames of the sandbox's screen, one binary message each (view only).

    With `?ack=1` the viewer paces its own stream: it sends the text message "ack" for each frame it
    has drawn (or dropped), and at most ACK_WINDOW frames are unacknowledged at a time; the next one
    sent is the newest. A viewer whose browser cannot keep up (a busy machine, a slow link) then gets
    fewer, fresh frames instead of a queue of stale ones in the server's and the browser's buffers, and
    holds back no other viewer. Without it, frames go at the ticket's rate.
    """

    transport = "screencast"

    async def start(self) -> None:
        await self.accept()
        query = _query(self.scope)
        self.pacing = _Pacing(ACK_WINDOW) if query.get("ack") == "1" else None
        self.spawn(self._from_host(_fps(query.get("fps")), _width(query.get("width"))))

    async def _from_host(self, fps: float, width: int | None) -> None:
        frames = shared_host_frames(
            self.sandbox.host.api_url, settings.SANDBOX_HOST_TOKEN, self.sandbox.external_id, fps, width
        )
        # aclosing: a cancelled relay must close the host socket now, not when the generator is collected.
        async with contextlib.aclosing(frames):
            while True:
                if self.pacing is not None:
                    await self.pacing.room()  # before taking a frame: the one taken is the newest
                try:
                    frame = await anext(frames)
                except StopAsyncIteration:
                    return
                if self.pacing is not None:
                    self.pacing.sent += 1
                await self.send(bytes_data=frame)

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        if text_data == "ack" and self.pacing is not None:
            self.pacing.ack()
            return
        if text_data == "ack":
            await self.send_error('"ack" paces a screencast opened with ?ack=1; this one was not')
            return
        await self.send_error('the screencast takes only "ack" (with ?ack=1): it sends frames')


class WebRtcConsumer(_LiveConsumer):
    """Signalling for one aiortc peer in this process: offer in, answer out. A control peer's
    data-channel input goes into the sandbox's episode as recorded steps (live_input.py); a view
    peer's, or any input where no episode records it, is refused and the viewer told here."""

    transport = "webrtc"

    async def start(self) -> None:
        self.peer: Any = None
        self.fps = _fps(_query(self.scope).get("fps") or "15")
        await self.accept()

    async def receive(self, text_data: str | None = None, bytes_data: bytes | None = None) -> None:
        # aiortc (and its codecs) load only in a process that actually serves WebRTC.
        from sandbox_workers.live.shared_video import shared_video
        from sandbox_workers.live.webrtc import ScreenPeer

        try:
            message = message_decode(text_data, bytes_data)
        except MessageError as exc:
            await self.send_error(str(exc))
            return
        if (
            not isinstance(message, dict)
            or message.get("type") != "offer"
            or not isinstance(message.get("sdp"), str)
            or not message["sdp"]
        ):
            await self.send_error("send {type: offer, sdp} with the offer's SDP text")
            return
        if self.peer is not None:
            await self.peer.close()
        api_url, sandbox_id, fps = self.sandbox.host.api_url, self.sandbox.external_id, self.fps

        def frames() -> Any:
            return shared_host_frames(api_url, settings.SANDBOX_HOST_TOKEN, sandbox_id, fps)

        # Every WebRTC viewer of the sandbox in this process shares one decode and one VP8 encoding.
        track = shared_video(("webrtc", api_url, sandbox_id, fps), frames, name=sandbox_id)
        self.peer = ScreenPeer(
            track,
            on_input=self._input,  # a view ticket's input is refused there, and the viewer told
            ice_servers=settings.LIVE_ICE_SERVERS,
        )
        try:
            answer = await self.peer.answer(message["sdp"])
        except (LiveStreamError, ValueError) as exc:
            await self.peer.close()  # its track leaves the shared video
            self.peer = None
            await self.send_error(str(exc))
            return
        await self.send(text_data=json.dumps({"type": "answer", "sdp": answer}))

    async def _input(self, event: Any) -> None:
        """A control peer's data-channel message: {type: "input", events: [...]} as the session socket
        takes it, recorded into the sandbox's episode; refused (and the viewer told) anywhere else."""
        events = event.get("events") if isinstance(event, dict) else None
        router = self.input_router()
        if self.claims.mode != CONTROL:
            await router.refuse(VIEW_ONLY)
            return
        if not isinstance(events, list):
            await router.refuse('input on the data channel is {"type": "input", "events": [...]}')
            return
        target = await router.target()
        if target is None:
            return
        if target.episode_id is None:
            # No raw path: the data channel's events are executed by an episode's recorder only.
            await router.refuse(
                "this sandbox is in no episode: WebRTC input reaches episodes only (use noVNC)"
            )
            return
        await router.to_episode(target.episode_id, events)

    async def disconnect(self, code: int) -> None:
        if getattr(self, "peer", None) is not None:
            with contextlib.suppress(Exception):
                await self.peer.close()
        await super().disconnect(code)
