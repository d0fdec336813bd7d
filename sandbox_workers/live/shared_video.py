"""One VP8 encoding of a sandbox's screen shared by every WebRTC viewer in this process.

A `SharedVideo` decodes each JPEG frame once and encodes it once (libvpx, configured as aiortc's own
VP8 encoder); every viewer's track (`EncodedTrack`) receives each encoded frame as an `av.Packet`, which
aiortc's sender only packetizes (its `pack` path), so N viewers cost one decode and one encode per
frame, not N. A VP8 frame depends on the one before, so every viewer gets every frame (RTP on the
way out does not block: a slow network loses packets and asks for a keyframe). The bitrate follows the
slowest viewer (the lowest REMB estimate among the senders, looked at every BITRATE_EVERY_S); a
keyframe is made when a viewer joins or asks for one (PLI/FIR), re-encoding the current picture if the
screen is still, at most one per KEYFRAME_MIN_S however many viewers ask.

`shared_video(key, frames_factory, fps)` is the registry: the viewers of one key share one.
"""

from __future__ import annotations

import asyncio
import contextlib
import fractions
import io
import logging
import multiprocessing
import time
import weakref
from collections.abc import AsyncIterator, Callable, Hashable
from typing import Any

import av
from aiortc import MediaStreamTrack, RTCRtpSender
from aiortc.codecs.vpx import DEFAULT_BITRATE, MAX_BITRATE, MIN_BITRATE, number_of_threads
from aiortc.mediastreams import MediaStreamError
from PIL import Image

log = logging.getLogger(__name__)

CLOCK_RATE = 90_000
TIME_BASE = fractions.Fraction(1, CLOCK_RATE)
IDLE_REPEAT_S = 1.0  # a still screen is re-sent this often (a viewer's decoder that lost a packet recovers)
KEYFRAME_MIN_S = 1.0  # keyframes asked for (viewers joining, PLI/FIR) are made at most this often
BITRATE_EVERY_S = 2.0  # the bitrate follows the viewers' estimates at most this often (a new encoder)
BACKLOG = 60  # encoded frames a viewer may have waiting before it is resynchronised with a keyframe


def decode_jpeg(data: bytes) -> av.VideoFrame:
    """A JPEG as a yuv420p video frame (what the encoder wants), cropped to even dimensions."""
    with Image.open(io.BytesIO(data)) as img:
        rgb = img.convert("RGB")
    w, h = rgb.size
    if w % 2 or h % 2:
        rgb = rgb.crop((0, 0, w - w % 2, h - h % 2))
    frame: av.VideoFrame = av.VideoFrame.from_image(rgb)  # type: ignore[no-untyped-call]
    return frame.reformat(format="yuv420p")


class EncodedTrack(MediaStreamTrack):
    """One viewer's video track: the shared encoder's packets, every one, in order."""

    kind = "video"

    def __init__(self, video: SharedVideo) -> None:
        super().__init__()
        self.video = video
        self.queue: asyncio.Queue[av.Packet[Any] | None] = asyncio.Queue()
        self.sender: RTCRtpSender | None = None
        self.delivered = 0

    def put(self, packet: av.Packet[Any]) -> None:
        if self.queue.qsize() >= BACKLOG:  # not read for a long while: start it again at a keyframe
            while not self.queue.empty():
                self.queue.get_nowait()
            self.video.request_keyframe()
        self.queue.put_nowait(packet)

    async def recv(self) -> av.Packet[Any]:
        if self.readyState != "live":
            raise MediaStreamError
        packet = await self.queue.get()
        if packet is None or self.readyState != "live":
            raise MediaStreamError
        self.delivered += 1
        return packet

    def attach(self, sender: RTCRtpSender) -> None:
        """Route the sender's keyframe requests (PLI/FIR) to the shared encoder."""
        self.sender = sender
        sender._send_keyframe = self.video.request_keyframe  # type: ignore[method-assign]

    @property
    def wanted_bitrate(self) -> int | None:
        """The bitrate the viewer's receiver estimates (REMB), as aiortc's sender keeps it."""
        encoder = getattr(self.sender, "_RTCRtpSender__encoder", None)  # aiortc 1.16 (pinned)
        return getattr(encoder, "target_bitrate", None)

    def stop(self) -> None:
        super().stop()
        self.queue.put_nowait(None)
        self.video.leave(self)


class SharedVideo:
    """One decode and one VP8 encoding of a JPEG frame stream for every viewer (see the module)."""

    def __init__(self, frames: AsyncIterator[bytes], *, name: str, on_idle: Callable[[SharedVideo], None]):
        self.name = name
        self.frames = frames
        self.on_idle = on_idle
        self.tracks: set[EncodedTrack] = set()
        self.codec: Any = None
        self.bitrate = DEFAULT_BITRATE
        self._keyframe = asyncio.Event()
        self._latest: av.VideoFrame | None = None
        self._start = time.monotonic()
        self._last_pts = -1
        self.encoded = self.decoded = self.keyframes = self.encoder_starts = self.dropped = 0
        self._last_key = self._bitrate_at = -1e9
        self._task = asyncio.create_task(self._run(), name=f"video-{name}")

    def join(self) -> EncodedTrack:
        track = EncodedTrack(self)
        self.tracks.add(track)
        self.request_keyframe()
        return track

    def leave(self, track: EncodedTrack) -> None:
        self.tracks.discard(track)
        if not self.tracks and not self._task.done():
            self._task.cancel()
            self.on_idle(self)

    def request_keyframe(self) -> None:
        self._keyframe.set()

    def _keyframe_wait(self) -> float:
        """Seconds until a keyframe asked for may be made (0: now); keyframes are at most one per
        KEYFRAME_MIN_S, so that viewers who lose a burst's packets together, and ask for one each, do not
        make every frame a keyframe (larger, so more lost: a storm)."""
        return max(0.0, self._last_key + KEYFRAME_MIN_S - time.monotonic())

    async def _run(self) -> None:
        frames = aiter(self.frames)
        next_frame: asyncio.Task[bytes] | None = None
        try:
            while True:
                if next_frame is None:
                    next_frame = asyncio.ensure_future(anext(frames))
                waits: set[asyncio.Future[Any]] = {next_frame}
                key: asyncio.Future[Any] | None = None
                if self._keyframe.is_set():  # one is asked for: wake when it may be made (now: at once)
                    timeout = self._keyframe_wait()
                else:
                    key = asyncio.ensure_future(self._keyframe.wait())
                    waits.add(key)
                    timeout = IDLE_REPEAT_S
                done, _ = await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
                if key is not None:
                    key.cancel()
                fresh = next_frame in done
                if fresh:
                    data, next_frame = next_frame.result(), None
                    try:
                        self._latest = await asyncio.to_thread(decode_jpeg, data)
                        self.decoded += 1
                    except (OSError, ValueError) as exc:
                        log.info("dropped an undecodable frame: %s", exc)
                        continue
                if self._latest is None:
                    continue
                keyframe = self._keyframe.is_set() and not self._keyframe_wait()
                if not (fresh or keyframe or not done):  # nothing new, no keyframe due, no idle repeat
                    continue
                if keyframe:
                    self._keyframe.clear()
                packet = await asyncio.to_thread(self._encode, self._latest, keyframe)
                if not packet.size:
                    # libvpx dropped the frame (rate control). No viewer may see it: aiortc's sender
                    # numbers every packet it is given (VP8 picture id), and browsers that find a
                    # number missing wait for a keyframe; the next frame refers to the last one made.
                    self.dropped += 1
                    if keyframe:
                        self._keyframe.set()
                    continue
                for track in list(self.tracks):
                    track.put(packet)
        except (StopAsyncIteration, Exception) as exc:
            if not isinstance(exc, asyncio.CancelledError):
                log.info("the shared video of %s ended: %s", self.name, exc)
        finally:
            log.info("the shared video of %s stopped: %d frames decoded, %d encoded (%d dropped by the "
                     "encoder), %d keyframes, %d encoder starts", self.name, self.decoded, self.encoded,
                     self.dropped, self.keyframes, self.encoder_starts)  # fmt: skip
            if next_frame is not None:
                next_frame.cancel()
            aclose = getattr(self.frames, "aclose", None)
            if aclose is not None:
                with contextlib.suppress(Exception):
                    await aclose()
            for track in list(self.tracks):
                track.queue.put_nowait(None)  # their senders stop; the pages reconnect
            self.on_idle(self)

    def _encode(self, frame: av.VideoFrame, keyframe: bool) -> av.Packet[Any]:
        """VP8 of `frame` (libvpx, aiortc's settings), at the slowest viewer's bitrate."""
        now = time.monotonic()
        bitrate = self.bitrate
        if now - self._bitrate_at >= BITRATE_EVERY_S:  # a new encoder (and keyframe) at most this often
            wanted = [b for b in (t.wanted_bitrate for t in list(self.tracks)) if b]
            bitrate = max(MIN_BITRATE, min(min(wanted, default=DEFAULT_BITRATE), MAX_BITRATE))
        if self.codec is not None and (
            frame.width != self.codec.width
            or frame.height != self.codec.height
            or abs(bitrate - self.codec.bit_rate) / self.codec.bit_rate > 0.1
        ):
            self.codec = None
        if self.codec is None:
            self.bitrate, self._bitrate_at = bitrate, now
            self.encoder_starts += 1
            self.codec = codec = av.CodecContext.create("libvpx", "w")
            codec.width, codec.height, codec.bit_rate, codec.pix_fmt = (
                frame.width,
                frame.height,
                bitrate,
                "yuv420p",
            )
            codec.gop_size, codec.qmin, codec.qmax = 3000, 2, 56
            codec.options = {
                "bufsize": str(bitrate), "cpu-used": "-6", "deadline": "realtime", "lag-in-frames": "0",
                "minrate": str(bitrate), "maxrate": str(bitrate), "noise-sensitivity": "4",
                "overshoot-pct": "15", "partitions": "0", "static-thresh": "1", "undershoot-pct": "100",
            }  # fmt: skip
            codec.thread_count = number_of_threads(frame.width * frame.height, multiprocessing.cpu_count())
            keyframe = True
        # Wall-clock timestamps: frames come when the screen changes, not at a fixed rate.
        pts = max(self._last_pts + 1, int((time.monotonic() - self._start) * CLOCK_RATE))
        self._last_pts = pts
        out = av.VideoFrame.from_ndarray(frame.to_ndarray(), format="yuv420p") if keyframe else frame
        out.pts, out.time_base = pts, TIME_BASE
        if keyframe:
            out.pict_type = av.video.frame.PictureType.I
        data = b"".join(bytes(p) for p in self.codec.encode(out))
        packet = av.Packet(data)
        packet.pts, packet.time_base = pts, TIME_BASE
        if data:
            self.encoded += 1
            if keyframe:
                self.keyframes += 1
                self._last_key = now
        return packet


_VIDEOS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[Hashable, SharedVideo]] = (
    weakref.WeakKeyDictionary()
)


def videos_of_this_loop() -> dict[Hashable, SharedVideo]:
    """The shared videos of this event loop, by key (for stats and tests)."""
    return _VIDEOS.setdefault(asyncio.get_running_loop(), {})


def shared_video(
    key: Hashable, frames: Callable[[], AsyncIterator[bytes]], *, name: str = ""
) -> EncodedTrack:
    """A new viewer's track of the video every viewer of `key` shares (started on `frames()`)."""
    videos = videos_of_this_loop()
    video = videos.get(key)
    if video is None:

        def forget(v: SharedVideo) -> None:
            if videos.get(key) is v:
                del videos[key]

        video = videos[key] = SharedVideo(frames(), name=name or str(key), on_idle=forget)
    return video.join()
