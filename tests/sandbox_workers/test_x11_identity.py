"""An X server that died is not taken for the one that took its display number."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from sandbox_workers.x11 import server_alive, server_identity


def _listen(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.listen(1)
    return s


def test_a_new_server_on_a_freed_display_number_is_not_the_dead_one() -> None:
    number = 40000 + os.getpid() % 20000  # far above the numbers Xvfb picks
    display = f":{number}"
    path = Path(f"/tmp/.X11-unix/X{number}")  # noqa: S108
    path.parent.mkdir(mode=0o1777, exist_ok=True)
    path.unlink(missing_ok=True)
    first = _listen(path)
    try:
        ours = server_identity(display)
        assert ours is not None and server_alive(display, ours)
        first.close()
        path.unlink()
        assert not server_alive(display, ours) and server_identity(display) is None
        # Another sandbox's server takes the number (an X server takes far longer than the file
        # system's ~4 ms timestamp tick to start; tmpfs may hand it the same inode).
        time.sleep(0.02)
        second = _listen(path)
        try:
            assert server_alive(display)  # someone listens there...
            assert not server_alive(display, ours)  # ...but not the server we were talking to
        finally:
            second.close()
    finally:
        path.unlink(missing_ok=True)
