"""One place that names Channels groups and publishes to them from sync code."""

from __future__ import annotations

from typing import Any

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer


def episode_group(episode_id: int) -> str:
    """The group that receives an episode's live steps and status changes."""
    return f"episode.{episode_id}"


def broadcast(group: str, event_type: str, payload: dict[str, Any]) -> None:
    """Send `payload` to every consumer in `group`; `event_type` picks the consumer's handler."""
    layer = get_channel_layer()
    if layer is None:
        raise RuntimeError("no channel layer is configured (CHANNEL_LAYERS)")
    async_to_sync(layer.group_send)(group, {"type": event_type, "payload": payload})
