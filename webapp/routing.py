"""WebSocket routes; each consumer authenticates in connect()."""

from django.urls import path

from webapp.annotation.consumers import SessionConsumer
from webapp.annotation.live_input import RecordedInput
from webapp.episodes.consumers import EpisodeStepsConsumer
from webapp.sandboxes.consumers import ScreencastConsumer, VncRelayConsumer, WebRtcConsumer

websocket_urlpatterns = [
    path("ws/episodes/<int:episode_id>/", EpisodeStepsConsumer.as_asgi()),
    # A control viewer's input into a sandbox's episode is recorded by annotation's recorder.
    path("ws/sandboxes/<int:pk>/vnc/", VncRelayConsumer.as_asgi(recorder=RecordedInput)),
    path("ws/sandboxes/<int:pk>/screencast/", ScreencastConsumer.as_asgi()),
    path("ws/sandboxes/<int:pk>/webrtc/", WebRtcConsumer.as_asgi(recorder=RecordedInput)),
    path("ws/episodes/<int:episode_id>/session/", SessionConsumer.as_asgi()),
]
