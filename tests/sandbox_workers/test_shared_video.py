"""The shared VP8 encoding (sandbox_workers.live.shared_video) with a real libvpx encoder and real JPEG
frames: every viewer gets the same packets; keyframes asked for together come at most one per
KEYFRAME_MIN_S; a frame the encoder drops reaches no viewer (aiortc numbers every packet it is given,
and a browser that finds a picture id missing waits for a keyframe)."""

from __future__ import annotations

import asyncio
import io
import time
from collections.abc import AsyncIterator
from typing import Any

import av
from PIL import Image

from sandbox_workers.live import shared_video as sv


def jpeg(i: int) -> bytes:
    out = io.BytesIO()
    Image.new("RGB", (320, 180), ((i * 37) % 256, (i * 91) % 256, 128)).save(out, "JPEG", quality=80)
    return out.getvalue()


async def changing(fps: float) -> AsyncIterator[bytes]:
    i = 0
    while True:
        i += 1
        yield jpeg(i)
        await asyncio.sleep(1 / fps)


async def drain(track: sv.EncodedTrack, into: list[Any], seconds: float) -> None:
    end = time.monotonic() + seconds
    while (left := end - time.monotonic()) > 0:
        try:
            into.append(await asyncio.wait_for(track.recv(), timeout=left))
        except TimeoutError:
            return


def test_viewers_get_the_same_packets_and_keyframes_asked_together_come_once_a_second() -> None:
    async def scenario() -> tuple[list[list[Any]], sv.SharedVideo]:
        track = sv.shared_video("k", lambda: changing(30))
        video = track.video
        tracks = [track, *(sv.shared_video("k", lambda: changing(30)) for _ in range(2))]
        got: list[list[Any]] = [[] for _ in tracks]
        drains = [asyncio.create_task(drain(t, g, 2.5)) for t, g in zip(tracks, got, strict=True)]

        async def storm() -> None:  # three viewers asking for a keyframe on every frame (a PLI storm)
            for _ in range(60):
                video.request_keyframe()
                await asyncio.sleep(0.03)

        await asyncio.gather(storm(), *drains)
        for t in tracks:
            t.stop()
        return got, video

    got, video = asyncio.run(scenario())
    first = [bytes(p) for p in got[0]]
    assert len(first) >= 30, len(first)
    # One encoding: the others got the very same packets (a viewer may start a frame later).
    for other in got[1:]:
        theirs = [bytes(p) for p in other]
        assert theirs == first[len(first) - len(theirs) :] and len(theirs) >= len(first) - 2
    keyframes = sum(1 for p in got[0] if p.is_keyframe or _vp8_key(bytes(p)))
    # 2.5 s of a storm: the first frame (joins) and at most one per KEYFRAME_MIN_S after it.
    assert 2 <= keyframes <= 1 + 2.5 / sv.KEYFRAME_MIN_S, keyframes
    assert video.keyframes == keyframes and video.decoded >= 30


def _vp8_key(data: bytes) -> bool:
    return bool(data) and not data[0] & 1  # VP8 frame tag: bit 0 clear = key frame


def test_a_frame_the_encoder_drops_reaches_no_viewer(monkeypatch) -> None:
    real = sv.SharedVideo._encode
    calls = {"n": 0}

    def every_third_dropped(self: sv.SharedVideo, frame: av.VideoFrame, keyframe: bool) -> av.Packet[Any]:
        calls["n"] += 1
        packet = real(self, frame, keyframe)
        if calls["n"] % 3 == 0:  # as libvpx does when its rate control skips a frame
            empty = av.Packet(b"")
            empty.pts, empty.time_base = packet.pts, packet.time_base
            return empty
        return packet

    monkeypatch.setattr(sv.SharedVideo, "_encode", every_third_dropped)

    async def scenario() -> tuple[list[Any], sv.SharedVideo]:
        track = sv.shared_video("drops", lambda: changing(20))
        got: list[Any] = []
        await drain(track, got, 1.5)
        track.stop()
        return got, track.video

    got, video = asyncio.run(scenario())
    assert video.dropped >= 5 and calls["n"] >= 15
    assert got and all(p.size for p in got)
    # Every other frame reached the viewer (one more may have been encoding when it stopped).
    assert calls["n"] - video.dropped - len(got) in (0, 1), (calls, video.dropped, len(got))
