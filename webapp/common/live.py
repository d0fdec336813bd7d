"""One place that names Channels groups and publishes to them from sync code."""

from __future__ import annotations

import asyncio
import os
import threading
from typing import Any

from channels.layers import get_channel_layer

PUBLISH_TIMEOUT_S = 5.0


def episode_group(episode_id: int) -> str:
    """The group that receives an episode's live steps and status changes."""
    return f"episode.{episode_id}"


class _Publisher:
    """Runs group sends on one long-lived event loop per process.

    `async_to_sync` would start a fresh loop for every call, and channels_redis keeps its connection
    pool per loop, so each send paid for a new Redis connection (about half of a step's persist
    time). One loop in a daemon thread keeps one connection. The loop is made again after a fork
    (Celery's prefork workers), whose child does not inherit the thread.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._pid = 0

    def _ensure_loop(self) -> asyncio.AbstractEventLoop:
        with self._lock:
            if self._loop is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                threading.Thread(target=loop.run_forever, name="live-publisher", daemon=True).start()
                self._loop, self._pid = loop, os.getpid()
            return self._loop

    def send(self, group: str, message: dict[str, Any]) -> None:
        layer = get_channel_layer()
        if layer is None:
            raise RuntimeError("no channel layer is configured (CHANNEL_LAYERS)")
        future = asyncio.run_coroutine_threadsafe(layer.group_send(group, message), self._ensure_loop())
        future.result(timeout=PUBLISH_TIMEOUT_S)


_publisher = _Publisher()


def broadcast(group: str, event_type: str, payload: dict[str, Any]) -> None:
    """Send `payload` to every consumer in `group` (from sync code); `event_type` picks the handler."""
    _publisher.send(group, {"type": event_type, "payload": payload})
