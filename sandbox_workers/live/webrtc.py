"""A WebRTC peer that shows a sandbox's screen: the shared VP8 track out (sandbox_workers.live.shared_video),
input from a data channel named "input". Transport-independent: whoever does the signalling calls
`answer(offer)`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from aiortc import RTCConfiguration, RTCIceServer, RTCPeerConnection, RTCRtpSender, RTCSessionDescription

if TYPE_CHECKING:
    from sandbox_workers.live.shared_video import EncodedTrack

__all__ = ["ScreenPeer"]

log = logging.getLogger(__name__)

InputHandler = Callable[[dict[str, Any]], Awaitable[None]]


class ScreenPeer:
    """One viewer's peer connection: the screen as video (its track from the sandbox's shared video,
    sandbox_workers.live.shared_video), "input" data-channel messages to `on_input`."""

    def __init__(
        self,
        track: EncodedTrack,
        *,
        on_input: InputHandler | None = None,
        ice_servers: list[dict[str, Any]] | None = None,
    ) -> None:
        self.track = track
        self.on_input = on_input
        # The deployment's STUN/TURN servers (settings.LIVE_ICE_SERVERS); none: host candidates only
        # (never aiortc's default, which would ask a public STUN server).
        servers = [
            RTCIceServer(urls=s["urls"], username=s.get("username"), credential=s.get("credential"))
            for s in ice_servers or []
        ]
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=servers))
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
            except (ValueError, RecursionError):
                event = None
            # A message that is no JSON object goes on as {} for the handler to refuse (and say so).
            if self.on_input is not None and not self._inputs.full():
                self._inputs.put_nowait(event if isinstance(event, dict) else {})

    async def answer(self, offer_sdp: str) -> str:
        """The SDP answer to a viewer's offer (ICE candidates included: no trickle)."""
        sender = self.pc.addTrack(self.track)
        # The shared track carries VP8 frames already encoded: the viewer must take VP8.
        vp8 = [
            c
            for c in RTCRtpSender.getCapabilities("video").codecs
            if c.mimeType in ("video/VP8", "video/rtx")
        ]
        for transceiver in self.pc.getTransceivers():
            if transceiver.sender is sender:
                transceiver.setCodecPreferences(vp8)
        self.track.attach(sender)
        await self.pc.setRemoteDescription(RTCSessionDescription(sdp=offer_sdp, type="offer"))
        await self.pc.setLocalDescription(await self.pc.createAnswer())
        self._tasks.append(asyncio.create_task(self._pump_inputs()))
        return str(self.pc.localDescription.sdp)

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
        self.track.stop()  # leaves the shared video (the last viewer out stops it)
        await self.pc.close()
