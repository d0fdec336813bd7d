"""A WebRTC peer that shows a sandbox's screen: JPEG frames in, a video track out, input from a data
channel named "input". Transport-independent: whoever does the signalling calls `answer(offer)`.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import io
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import av
from aiortc import MediaStreamTrack, RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.mediastreams import MediaStreamError
from PIL import Image

__all__ = ["NewestFrameTrack", "ScreenPeer", "decode_jpeg"]

log = logging.getLogger(__name__)

CLOCK_RATE = 90_000
TIME_BASE = fractions.Fraction(1, CLOCK_RATE)
# With a still screen the track repeats its frame this often, so a new decoder gets a picture.
IDLE_REPEAT_S = 1.0

InputHandler = Callable[[dict[str, Any]], Awaitable[None]]


def decode_jpeg(data: bytes) -> av.VideoFrame:
    """A JPEG as a yuv420p video frame (what the encoders want), cropped to even dimensions."""
    with Image.open(io.BytesIO(data)) as img:
        rgb = img.convert("RGB")
    w, h = rgb.size
    if w % 2 or h % 2:
        rgb = rgb.crop((0, 0, w - w % 2, h - h % 2))
    frame: av.VideoFrame = av.VideoFrame.from_image(rgb)  # type: ignore[no-untyped-call]
    return frame.reformat(format="yuv420p")


class NewestFrameTrack(MediaStreamTrack):
    """A video track that always serves the newest frame: a slow encoder skips frames, never lags."""

    kind = "video"

    def __init__(self) -> None:
        super().__init__()
        self._frame: av.VideoFrame | None = None
        self._fresh = asyncio.Event()
        self._start = time.monotonic()
        self._last_pts = -1

    def push(self, frame: av.VideoFrame) -> None:
        """Make `frame` the one the next `recv` returns."""
        self._frame = frame
        self._fresh.set()

    @property
    def size(self) -> tuple[int, int] | None:
        """The newest frame's (width, height), None before the first."""
        return None if self._frame is None else (self._frame.width, self._frame.height)

    async def recv(self) -> av.VideoFrame:
        if self.readyState != "live":
            raise MediaStreamError
        while self._frame is None:
            await self._fresh.wait()
            if self.readyState != "live":
                raise MediaStreamError
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._fresh.wait(), timeout=IDLE_REPEAT_S)
        if self.readyState != "live":
            raise MediaStreamError
        self._fresh.clear()
        frame = self._frame
        # Wall-clock timestamps: frames come when the screen changes, not at a fixed rate.
        pts = max(self._last_pts + 1, int((time.monotonic() - self._start) * CLOCK_RATE))
        self._last_pts = pts
        frame.pts = pts
        frame.time_base = TIME_BASE
        return frame

    def stop(self) -> None:
        super().stop()
        self._fresh.set()  # wake a waiting recv so it sees the track ended


class ScreenPeer:
    """One viewer's peer connection: the screen as video, "input" data-channel messages to `on_input`."""

    def __init__(self, frames: AsyncIterator[bytes], *, on_input: InputHandler | None = None) -> None:
        self.frames = frames
        self.on_input = on_input
        self.track = NewestFrameTrack()
        # No STUN servers: aiortc's default would ask a public one, and the viewer reaches this
        # process directly (host candidates; a TURN server belongs in front of it at scale).
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.frames_in = 0
        self._inputs: asyncio.Queue[dict[str, Any]] = asyncio.Queue(maxsize=1000)
        self._tasks: list[asyncio.Task[None]] = []
        self.pc.on("datachannel", self._on_datachannel)

    def _on_datachannel(self, channel: Any) -> None:
        if channel.label != "input":
            return

        @channel.on("message")  # type: ignore[untyped-decorator]
        def on_message(message: str | bytes) -> None:
            try:
                event = json.loads(message)
            except ValueError:
                return
            if isinstance(event, dict) and self.on_input is not None and not self._inputs.full():
                self._inputs.put_nowait(event)

    async def answer(self, offer_sdp: str) -> str:
        """The SDP answer to a viewer's offer (ICE candidates included: no trickle)."""
        self.pc.addTrack(self.track)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        self._tasks.append(asyncio.create_task(self._pump_frames()))
        self._tasks.append(asyncio.create_task(self._pump_inputs()))
        return str(self.pc.localDescription.sdp)

    async def _pump_frames(self) -> None:
        try:
            async for data in self.frames:
                try:
                    frame = await asyncio.to_thread(decode_jpeg, data)
                except (OSError, ValueError) as exc:
                    log.info("dropped an undecodable frame: %s", exc)
                    continue
                self.frames_in += 1
                self.track.push(frame)
        except Exception as exc:
            log.info("screen frames for WebRTC ended: %s", exc)
        finally:
            self.track.stop()

    async def _pump_inputs(self) -> None:
        while True:
            event = await self._inputs.get()
            if self.on_input is not None:
                try:
                    await self.on_input(event)
                except Exception:
                    log.exception("input handler failed")

    async def close(self) -> None:
        """Stop the frames, the input handler and the peer connection."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        aclose = getattr(self.frames, "aclose", None)
        if aclose is not None:
            with contextlib.suppress(Exception):
                await aclose()
        self.track.stop()
        await self.pc.close()
