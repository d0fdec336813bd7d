"""A stand-in for the web app's heartbeat endpoint over real HTTP (stdlib server): records each heartbeat
and its token, answers with `reply` (the adapters to hold) and `status`."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WebApp:
    def __init__(self, adapters: list[dict[str, str]] | None = None) -> None:
        self.beats: list[dict[str, Any]] = []
        self.tokens: list[str] = []
        self.reply: dict[str, Any] = {"server_id": 1, "adapters": list(adapters or [])}
        self.status = 200
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802
                outer.beats.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
                outer.tokens.append(self.headers.get("Authorization", ""))
                data = json.dumps(outer.reply).encode()
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
