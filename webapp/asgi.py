"""ASGI entry point: HTTP through Django, WebSockets through Channels with session auth."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "webapp.settings")
django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from webapp.routing import websocket_urlpatterns  # noqa: E402

CLOSE_HANDSHAKE_TIMEOUT_S = 10
"""How long daphne waits for a client to answer the server's close frame before it aborts the TCP
connection. autobahn's default is 1 s, and its abort is a reset: a browser that had not yet read the close
frame (a busy machine, a slow link) loses it and reports 1006 instead of the refusal's code (4401 "log
in", 4403 "not yours"), which the pages act on. Seen in CI on a loaded 2-core machine."""


def _patch_daphne_close_timeout() -> None:
    """Give every daphne WebSocket factory the longer close-handshake timeout (daphne has no option)."""
    try:
        from daphne.ws_protocol import WebSocketFactory
    except ImportError:  # served by another ASGI server
        return
    if getattr(WebSocketFactory, "_flywheel_close_timeout", False):
        return
    original = WebSocketFactory.__init__

    def __init__(self, *args, **kwargs):  # type: ignore[no-untyped-def]
        original(self, *args, **kwargs)
        self.setProtocolOptions(closeHandshakeTimeout=CLOSE_HANDSHAKE_TIMEOUT_S)

    WebSocketFactory.__init__ = __init__  # type: ignore[method-assign]
    WebSocketFactory._flywheel_close_timeout = True  # type: ignore[attr-defined]


# daphne's command line imports the application before it builds its WebSocket factory.
_patch_daphne_close_timeout()

application = ProtocolTypeRouter(
    {
        "http": django_asgi_app,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
    }
)
