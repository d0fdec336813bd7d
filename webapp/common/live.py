"""One place that names Channels groups and publishes to them from sync code."""

from __future__ import annotations

import asyncio
import atexit
import logging
import os
import threading
from typing import Any

from channels.layers import get_channel_layer

log = logging.getLogger(__name__)

DRAIN_AT_EXIT_S = 5.0


def episode_group(episode_id: int) -> str:
    """The group that receives an episode's live steps and status changes."""
    return f"episode.{episode_id}"


class _Publisher:
    """Sends group messages from sync code, in order, without making the caller wait for Redis.

    `async_to_sync` would start a fresh loop for every call, and channels_redis keeps its connection
    pool per loop, so each send paid for a new Redis connection. Here one loop in a daemon thread
    keeps one connection, and a queue drained in order by that loop means a step's writer does not
    wait for the round trip either. Live events are a view of rows already committed: a failed send
    is logged, never raised into the write that caused it. The loop is made again after a fork
    (Celery's prefork workers), and pending messages are drained at exit.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queue: asyncio.Queue[tuple[str, dict[str, Any]] | None] | None = None
        self._pid = 0

    def _start(self) -> tuple[asyncio.AbstractEventLoop, asyncio.Queue[Any]]:
        with self._lock:
            if self._loop is None or self._queue is None or self._pid != os.getpid():
                loop = asyncio.new_event_loop()
                queue: asyncio.Queue[Any] = asyncio.Queue()
                loop.create_task(self._drain(queue))
                threading.Thread(target=loop.run_forever, name="live-publisher", daemon=True).start()
                self._loop, self._queue, self._pid = loop, queue, os.getpid()
            return self._loop, self._queue

    @staticmethod
    async def _drain(queue: asyncio.Queue[Any]) -> None:
        layer = get_channel_layer()
        while True:
            item = await queue.get()
            try:
                if item is not None:
                    if layer is None:
                        raise RuntimeError("no channel layer is configured (CHANNEL_LAYERS)")
                    await layer.group_send(*item)
            except Exception:
                log.exception("live broadcast to %s failed", item[0] if item else "?")
            finally:
                queue.task_done()

    def send(self, group: str, message: dict[str, Any]) -> None:
        loop, queue = self._start()
        loop.call_soon_threadsafe(queue.put_nowait, (group, message))

    def flush(self, timeout: float = DRAIN_AT_EXIT_S) -> bool:
        """Wait until every queued message was sent (or failed); False if `timeout` ran out."""
        if self._loop is None or self._queue is None or self._pid != os.getpid():
            return True
        future = asyncio.run_coroutine_threadsafe(self._queue.join(), self._loop)
        try:
            future.result(timeout=timeout)
        except TimeoutError:
            return False
        return True


_publisher = _Publisher()
atexit.register(_publisher.flush)


def broadcast(group: str, event_type: str, payload: dict[str, Any]) -> None:
    """Queue `payload` for every consumer in `group`; `event_type` picks the consumer's handler."""
    _publisher.send(group, {"type": event_type, "payload": payload})


def broadcast_flush(timeout: float = DRAIN_AT_EXIT_S) -> bool:
    """Wait until queued broadcasts are sent; for tests and orderly shutdown."""
    return _publisher.flush(timeout)
