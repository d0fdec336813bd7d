"""An OSWorld-style controller, for comparison: an HTTP server beside the display.

Like OSWorld's desktop_env server it runs each action as a new Python process
(`python -c "import pyautogui; …"`) and answers /screenshot with a PNG taken in the server.
OSWorld also sleeps 2 s after each action (its `pause`); the bench reports the baseline without
that pause, which is the kindest comparison for the baseline.

    DISPLAY=:5 python bench/osworld_baseline.py 8765
"""

from __future__ import annotations

import io
import json
import subprocess
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import mss
from PIL import Image

PRELUDE = "import pyautogui; import time; pyautogui.FAILSAFE = False; "


class Handler(BaseHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        if self.path != "/execute":
            self.send_error(404)
            return
        payload = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        # OSWorld's server: subprocess.run([python, "-c", command]) for every action.
        result = subprocess.run(
            [sys.executable, "-c", PRELUDE + payload["command"]], capture_output=True, text=True, timeout=60
        )
        body = json.dumps({"returncode": result.returncode, "error": result.stderr[-500:]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:  # noqa: N802
        if self.path != "/screenshot":
            self.send_error(404)
            return
        with mss.MSS() as sct:
            shot = sct.grab(sct.monitors[1])
        buf = io.BytesIO()
        Image.frombytes("RGB", shot.size, shot.bgra, "raw", "BGRX").save(buf, format="PNG")
        body = buf.getvalue()
        self.send_response(200)
        self.send_header("Content-Type", "image/png")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
