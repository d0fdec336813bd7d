"""WebSocket routes; each consumer authenticates in connect()."""

from django.urls import path

from webapp.episodes.consumers import EpisodeStepsConsumer

websocket_urlpatterns = [
    path("ws/episodes/<int:episode_id>/", EpisodeStepsConsumer.as_asgi()),
]
