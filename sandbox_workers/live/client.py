"""Client side of a host's live streams: the URLs of its VNC and screencast sockets, and frames."""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from urllib.parse import quote

import aiohttp

from sandbox_workers.live.fanout import Push, shared_frames

__all__ = [
    "LiveStreamError",
    "auth_headers",
    "host_frames",
    "host_screencast_url",
    "host_vnc_url",
    "shared_host_frames",
]


class LiveStreamError(Exception):
    """The host refused or dropped a live stream."""


def _ws_base(api_url: str) -> str:
    base = api_url.rstrip("/")
    if base.startswith("https://"):
        return "wss://" + base[len("https://") :]
    if base.startswith("http://"):
        return "ws://" + base[len("http://") :]
    return base


def host_vnc_url(api_url: str, sandbox_id: str) -> str:
    """The host's WebSocket URL carrying `sandbox_id`'s RFB stream."""
    return f"{_ws_base(api_url)}/v1/sandboxes/{quote(sandbox_id, safe='')}/vnc"


def host_screencast_url(api_url: str, sandbox_id: str, fps: float, width: int | None = None) -> str:
    """The host's WebSocket URL sending `sandbox_id`'s screen as JPEG frames at up to `fps` (scaled to
    `width` pixels wide where given)."""
    size = f"&width={width}" if width else ""
    return f"{_ws_base(api_url)}/v1/sandboxes/{quote(sandbox_id, safe='')}/screencast?fps={fps:g}{size}"


def auth_headers(token: str) -> dict[str, str]:
    """The bearer header every host call carries."""
    return {"Authorization": f"Bearer {token}"}


async def host_frames(
    api_url: str, token: str, sandbox_id: str, fps: float, width: int | None = None
) -> AsyncIterator[bytes]:
    """JPEG frames of a sandbox's screen from its host (at `width` where given), until it ends the stream."""
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=10)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        try:
            ws = await session.ws_connect(
                host_screencast_url(api_url, sandbox_id, fps, width),
                headers=auth_headers(token),
                heartbeat=30,
                max_msg_size=32 * 1024 * 1024,
            )
        except (aiohttp.ClientError, OSError) as exc:
            raise LiveStreamError(f"the host refused the screencast of {sandbox_id}: {exc}") from exc
        async with ws:
            async for msg in ws:
                if msg.type == aiohttp.WSMsgType.BINARY:
                    yield msg.data
                elif msg.type in (aiohttp.WSMsgType.ERROR, aiohttp.WSMsgType.CLOSE):
                    break


def shared_host_frames(
    api_url: str, token: str, sandbox_id: str, fps: float, width: int | None = None
) -> AsyncGenerator[bytes, None]:
    """As `host_frames`, from the one host socket every viewer of the sandbox (at that width) in this
    process shares (opened at the fastest viewer's rate; each viewer gets at most its own `fps`,
    newest frame first)."""

    async def source(rate: float, push: Push) -> None:
        async for frame in host_frames(api_url, token, sandbox_id, rate, width):
            push(frame)
        raise LiveStreamError(f"the host ended the screencast of {sandbox_id}")

    return shared_frames(("host", api_url, sandbox_id, width), source, fps, name=sandbox_id)
