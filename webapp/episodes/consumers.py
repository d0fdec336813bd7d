"""Live steps of one episode over a WebSocket."""

from __future__ import annotations

from typing import Any

from channels.db import database_sync_to_async

from webapp.common.live import episode_group
from webapp.common.sockets import JsonSocketConsumer
from webapp.episodes.selectors import episode_visible_to

# Close codes: 4401 not logged in, 4403 may not see this episode (also for one that does not exist,
# so ids cannot be probed). The socket is accepted before it is closed: closing during the handshake
# becomes an HTTP 403 that a browser reports only as 1006, unable to tell "log in" from "not yours".
CLOSE_UNAUTHENTICATED = 4401
CLOSE_FORBIDDEN = 4403


class EpisodeStepsConsumer(JsonSocketConsumer):
    """Sends `step.created` and `episode.status` events of an episode the user may see."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.accept()
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        episode_id = int(self.scope["url_route"]["kwargs"]["episode_id"])
        episode = await database_sync_to_async(episode_visible_to)(user=user, episode_id=episode_id)
        if episode is None:
            await self.accept()
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.group = episode_group(episode_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()

    async def disconnect(self, code: int) -> None:
        group = getattr(self, "group", None)
        if group:
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        # Read-only stream: control arrives with the live-view work, through its own consumer.
        await self.send_json({"type": "error", "message": "this stream is read-only"})

    async def step_created(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "step.created", **event["payload"]})

    async def episode_status(self, event: dict[str, Any]) -> None:
        await self.send_json({"type": "episode.status", **event["payload"]})
