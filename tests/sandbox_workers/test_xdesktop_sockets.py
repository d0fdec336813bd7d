"""The desktop's host-side checks of its sandbox's sockets, at paths longer than a socket address holds."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from tests.sandbox_workers.conftest import xdesktop_module


def test_a_socket_deeper_than_an_address_holds_is_still_reached(tmp_path: Path) -> None:
    # A sandbox's session bus under a deep var folder: the path is longer than sun_path's 107 bytes
    # (a test's basetemp made it so, and the desktop never started: "timed out waiting for the session
    # D-Bus").
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    path = deep / "bus"
    assert len(str(path).encode()) > 107
    accepts = xdesktop_module().lifecycle._accepts
    assert not accepts(path)  # nothing listens there yet
    folder = os.open(deep, os.O_RDONLY | os.O_DIRECTORY)
    server = socket.socket(socket.AF_UNIX)
    try:
        server.bind(f"/proc/self/fd/{folder}/bus")
        server.listen()
        assert path.exists()
        assert accepts(path)
    finally:
        server.close()
        os.close(folder)
    assert not accepts(deep / "nothing-here")
