"""An X server that died is not taken for the one that took its display number, nor for one still
answering: a socket that queues a connection but never answers a connection setup is a dying server."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from sandbox_workers.display.x11 import server_alive, server_identity


def _listen(path: Path, *, answer: bool = True) -> socket.socket:
    """A listening socket at `path`; with `answer`, a thread answers each connection setup as an X
    server refusing it would (one byte, 0), which is enough to count as alive."""
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(path))
    s.listen(4)

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = s.accept()
                with conn:
                    conn.recv(12)
                    conn.sendall(b"\x00")

    if answer:
        threading.Thread(target=serve, daemon=True).start()
    return s


@contextlib.contextmanager
def _display() -> Iterator[tuple[str, Path]]:
    number = 40000 + (os.getpid() + threading.get_ident()) % 20000  # far above the numbers Xvfb picks
    path = Path(f"/tmp/.X11-unix/X{number}")  # noqa: S108
    path.parent.mkdir(mode=0o1777, exist_ok=True)
    path.unlink(missing_ok=True)
    try:
        yield f":{number}", path
    finally:
        path.unlink(missing_ok=True)


def test_a_new_server_on_a_freed_display_number_is_not_the_dead_one() -> None:
    with _display() as (display, path):
        first = _listen(path)
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


def test_a_socket_that_queues_a_connection_but_never_answers_is_not_a_live_server() -> None:
    # What a client sees of an Xvfb killed mid-request for an instant: its connection broke, yet the
    # listening socket still queues a connect. Taking that for a live server let python-xlib's bare
    # AssertionError escape instead of EnvError (seen under parallel tests).
    with _display() as (display, path):
        silent = _listen(path, answer=False)
        try:
            t0 = time.monotonic()
            assert not server_alive(display, server_identity(display), timeout=0.5)
            assert time.monotonic() - t0 < 3
        finally:
            silent.close()
