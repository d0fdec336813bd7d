"""Live streams out of a host: the VNC byte stream, and JPEG screencast frames over WebSockets from one
capture per sandbox that every viewer shares (sandbox_workers.live.fanout)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import logging
import os
import time
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import WSCloseCode, WSMsgType, web
from PIL import Image

from sandbox_workers.base import OperationUnsupported, SandboxError
from sandbox_workers.live.fanout import Push, Source, StreamEnded, hubs_of_this_loop, shared_frames
from sandbox_workers.live.rfb import RfbViolation, ViewOnlyRfbFilter

if TYPE_CHECKING:
    from sandbox_workers.pool_upkeep import Managed

log = logging.getLogger(__name__)

# The open viewer sockets: a stopping host closes them first, or aiohttp would wait for each to end.
LIVE_SOCKETS = web.AppKey("live_sockets", weakref.WeakSet[web.WebSocketResponse])


def live_sockets_track(app: web.Application) -> None:
    """Keep `app`'s viewer sockets, and close them (1001, going away) when the app shuts down."""
    app[LIVE_SOCKETS] = weakref.WeakSet()
    app.on_shutdown.append(_close_live_sockets)


async def _close_live_sockets(app: web.Application) -> None:
    open_now = app[LIVE_SOCKETS]
    for ws in list(open_now):
        with contextlib.suppress(Exception):
            await ws.close(code=WSCloseCode.GOING_AWAY, message=b"the sandbox host is stopping")


async def _prepared(request: web.Request, ws: web.WebSocketResponse) -> web.WebSocketResponse:
    await ws.prepare(request)
    if LIVE_SOCKETS in request.app:
        request.app[LIVE_SOCKETS].add(ws)
    return ws


# The stream was opened before the sandbox changed hands (a lease granted or ended, a reset): reconnect.
CLOSE_SUPERSEDED = 4409


class InputGate(Protocol):
    """A live stream's right to send input (sandbox_workers.pool.LiveInput)."""

    revoked: asyncio.Event

    def allow_input(self, what: str = ...) -> bool: ...

    def close(self) -> None: ...


class RfbInputSeen:
    """Tells whether a chunk of a viewer's RFB stream carries input (keys, pointer, clipboard, a screen
    resize); the chunk itself is forwarded unchanged. A stream it cannot parse counts as input from
    then on (it fails closed, as the view-only filter it uses)."""

    def __init__(self) -> None:
        self._filter = ViewOnlyRfbFilter()
        self._opaque = False

    def __call__(self, chunk: bytes) -> bool:
        if self._opaque:
            return True
        before = sum(self._filter.dropped.values())
        try:
            self._filter.feed(chunk)
        except RfbViolation:
            self._opaque = True
            return True
        return sum(self._filter.dropped.values()) > before


async def open_unix(path: Path) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """A connection to the unix socket at `path`, through its folder's descriptor (/proc/self/fd/N/…):
    a sandbox under a deep folder has a socket path longer than a socket address holds."""
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        return await asyncio.open_unix_connection(f"/proc/self/fd/{folder}/{path.name}")
    finally:
        os.close(folder)


async def relay_vnc(request: web.Request, vnc_socket: Path, gate: InputGate) -> web.WebSocketResponse:
    """Pipe RFB bytes between a WebSocket client and the sandbox's VNC server (its unix socket).

    Input goes on only while `gate` allows it: the stream ends (4409) once the sandbox has changed
    hands since it opened, and input outside a lease marks the sandbox to be reset before its next one.
    The viewer's handshake passes as it is: the socket needs no password (only the host reaches it),
    so the VNC security type it offers the browser is None, behind the web app's ticket check."""
    try:
        reader, writer = await asyncio.wait_for(open_unix(vnc_socket), timeout=5)
    except (OSError, TimeoutError) as exc:
        gate.close()
        raise web.HTTPBadGateway(text=f"the sandbox's VNC server does not answer: {exc}") from None
    ws = await _prepared(request, web.WebSocketResponse(max_msg_size=16 * 1024 * 1024, heartbeat=30))
    carries_input = RfbInputSeen()

    async def vnc_to_ws() -> None:
        while data := await reader.read(256 * 1024):
            await ws.send_bytes(data)

    async def ws_to_vnc() -> None:
        async for msg in ws:
            if msg.type == WSMsgType.BINARY:
                if carries_input(msg.data) and not gate.allow_input("VNC input"):
                    return  # refused whole: nothing of it reaches the sandbox
                writer.write(msg.data)
                await writer.drain()
            elif msg.type == WSMsgType.ERROR:
                break

    tasks = [
        asyncio.create_task(vnc_to_ws()),
        asyncio.create_task(ws_to_vnc()),
        asyncio.create_task(gate.revoked.wait()),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        superseded = gate.revoked.is_set()
        gate.close()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
        if superseded and not ws.closed:
            await ws.close(code=CLOSE_SUPERSEDED, message=b"the sandbox changed hands: reconnect")
        await ws.close()
    return ws


def screencast_params(query: Mapping[str, str]) -> tuple[float, int | None]:
    """A screencast request's rate (?fps=, 5 by default) and thumbnail width (?width=, None: full size)."""
    try:
        fps = float(query.get("fps", "5"))
    except ValueError:
        fps = -1.0
    if not 0.2 <= fps <= 30:
        raise SandboxError("fps must be a number in [0.2, 30]")
    raw = query.get("width")
    if raw is not None and (not raw.isdigit() or not 64 <= int(raw) <= 4096):
        raise SandboxError("width must be a whole number of pixels in [64, 4096]")
    return fps, int(raw) if raw is not None else None


def live_streams() -> dict[str, dict[str, Any]]:
    """The live screens this host process serves, by sandbox (and @width for thumbnails): viewers, the
    shared capture's rate, how often it started, frames captured."""
    return {
        str(key[1]) + (f"@{key[2]}" if len(key) > 2 else ""): {
            "viewers": h.viewers, "fps": h.fps, "starts": h.source_starts, "frames": h.frames_in
        }
        for key, h in hubs_of_this_loop().items()
        if isinstance(key, tuple) and key[0] == "sandbox"
    }  # fmt: skip


def provider_source(m: Managed) -> Source:
    """The capture of one sandbox's screen as a hub source: the provider's own screencast where it has
    one (Chromium's, which sends a frame when the page changes), else JPEG captures at the rate."""

    async def source(fps: float, push: Push) -> None:
        loop = asyncio.get_running_loop()

        def on_frame(data: bytes) -> None:  # called on the provider's thread
            loop.call_soon_threadsafe(push, data)

        ended: asyncio.Future[None] = loop.create_future()

        def on_end(why: str) -> None:  # called on the provider's thread
            def end() -> None:
                if not ended.done():
                    ended.set_exception(StreamEnded(why))

            loop.call_soon_threadsafe(end)

        try:
            await m.call(lambda: m.provider.start_screencast(on_frame, max_fps=fps, on_end=on_end))
        except OperationUnsupported:
            while True:
                started = time.monotonic()
                obs = await m.call(lambda: m.provider.observe(fmt="jpeg", quality=60))
                push(obs.screenshot.data)
                await asyncio.sleep(max(0.0, 1 / fps - (time.monotonic() - started)))
        try:
            await ended  # frames come from the provider's thread until cancelled, or it ends by itself
        finally:
            with contextlib.suppress(Exception):
                await m.call(m.provider.stop_screencast)

    return source


def scaled_jpeg(data: bytes, width: int, quality: int = 70) -> bytes:
    """A JPEG frame scaled down to `width` pixels wide (aspect kept); decoded at a reduced DCT scale."""
    with Image.open(io.BytesIO(data)) as img:
        if img.width <= width:
            return data
        height = max(1, round(img.height * width / img.width))
        img.draft("RGB", (width, height))  # decode at 1/2, 1/4 or 1/8 size where that still covers it
        small = img.convert("RGB").resize((width, height), Image.Resampling.BILINEAR)
    out = io.BytesIO()
    small.save(out, "JPEG", quality=quality)
    return out.getvalue()


def thumbnail_source(m: Managed, width: int) -> Source:
    """The sandbox's frames scaled to `width`: one scaling per frame for every viewer of that size,
    taken from the full-size stream every viewer shares."""

    async def source(fps: float, push: Push) -> None:
        full = shared_frames(("sandbox", m.id), provider_source(m), fps, name=m.id)
        async with contextlib.aclosing(full):
            async for frame in full:
                push(await asyncio.to_thread(scaled_jpeg, frame, width))
        raise StreamEnded(f"the screen stream of {m.id} ended")

    return source


async def relay_screencast(
    request: web.Request, m: Managed, *, fps: float, width: int | None = None
) -> web.WebSocketResponse:
    """Send JPEG frames at up to `fps` from the one capture every viewer of the sandbox shares; with
    `width`, scaled to it (a thumbnail: one scaling per frame, shared by every viewer of that size)."""
    ws = await _prepared(request, web.WebSocketResponse(heartbeat=30))
    if width is None:
        frames = shared_frames(("sandbox", m.id), provider_source(m), fps, name=m.id)
    else:
        frames = shared_frames(
            ("sandbox", m.id, width), thumbnail_source(m, width), fps, name=f"{m.id}@{width}"
        )

    async def send() -> None:
        async with contextlib.aclosing(frames):
            async for frame in frames:
                await ws.send_bytes(frame)

    async def drain_client() -> None:
        async for _ in ws:
            pass

    tasks = [asyncio.create_task(send()), asyncio.create_task(drain_client())]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception():
                log.info("screencast of %s ended: %s", m.id, t.exception())
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await ws.close()
    return ws
