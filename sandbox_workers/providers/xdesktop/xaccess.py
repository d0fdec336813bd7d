"""Who may connect to a desktop's X server: the host's user and the sandbox's own uid, nobody else.

An Xvfb started without `-auth` lets every local user connect (its socket in /tmp/.X11-unix is
world-writable, and Linux's abstract socket is reachable from any process in the host's network
namespace, a network-profile sandbox included): any of them could watch or drive any desktop. So
each Xvfb starts with `-auth` and a random cookie nobody else ever sees; the host connects once with
that cookie and adds server-interpreted `localuser` entries for the uids that may connect (the X
server checks a unix socket's peer credentials), then forgets the cookie. From then on the host's
own connections (input, capture, x11vnc) and the sandbox's processes connect without a cookie, and
every other uid is refused. The cookie connection is spoken here by hand (a few dozen bytes of the
X protocol): python-xlib and libX11 read cookies only from $XAUTHORITY, which is one per process,
and several desktops start at once on different threads.
"""

from __future__ import annotations

import os
import secrets
import socket
import struct
from collections.abc import Iterable
from pathlib import Path

from sandbox_workers.base import EnvError

__all__ = ["COOKIE_PROTOCOL", "grant_local_users", "write_cookie_file"]

COOKIE_PROTOCOL = b"MIT-MAGIC-COOKIE-1"
FAMILY_WILD = 0xFFFF  # an Xauthority entry for any address (the server ignores address and number)
FAMILY_SERVER_INTERPRETED = 5
CHANGE_HOSTS, GET_INPUT_FOCUS = 109, 43
HOST_INSERT = 0


def _pad(data: bytes) -> bytes:
    return data + b"\0" * (-len(data) % 4)


def write_cookie_file(path: Path) -> bytes:
    """A fresh random cookie in an Xauthority file at `path` (mode 0600) for `Xvfb -auth`."""

    def field(data: bytes) -> bytes:
        return struct.pack(">H", len(data)) + data

    cookie = secrets.token_bytes(16)
    entry = struct.pack(">H", FAMILY_WILD) + field(b"") + field(b"") + field(COOKIE_PROTOCOL) + field(cookie)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(entry)
    return cookie


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EnvError("the X server closed the connection")
        data += chunk
    return data


def grant_local_users(display: int, cookie: bytes, uids: Iterable[int], *, timeout: float = 5.0) -> None:
    """Connect to `display` with `cookie` and let `uids` connect by their peer credentials alone;
    EnvError if the server refuses (it must run with -noreset, or the list goes with the last client)."""
    with socket.socket(socket.AF_UNIX) as s:
        s.settimeout(timeout)
        try:
            s.connect(f"/tmp/.X11-unix/X{display}")  # noqa: S108
            setup = struct.pack("<cxHHHHxx", b"l", 11, 0, len(COOKIE_PROTOCOL), len(cookie))
            s.sendall(setup + _pad(COOKIE_PROTOCOL) + _pad(cookie))
            head = _recv_exact(s, 8)
            (extra,) = struct.unpack_from("<H", head, 6)
            body = _recv_exact(s, extra * 4)
            if head[0] != 1:
                reason = body[: head[1]].decode("latin-1", "replace")
                raise EnvError(f"X display :{display} refused the host's cookie: {reason or head[0]}")
            requests = b""
            for uid in sorted(set(uids)):
                address = b"localuser\0#%d" % uid
                length = 2 + len(_pad(address)) // 4
                requests += struct.pack("<BBHBxH", CHANGE_HOSTS, HOST_INSERT, length,
                                        FAMILY_SERVER_INTERPRETED, len(address)) + _pad(address)  # fmt: skip
            # A round trip after them: an error for any of them arrives before its reply.
            s.sendall(requests + struct.pack("<BxH", GET_INPUT_FOCUS, 1))
            while True:
                packet = _recv_exact(s, 32)
                if packet[0] == 0:
                    raise EnvError(f"X display :{display} refused the access list (X error {packet[1]})")
                if packet[0] == 1:  # the GetInputFocus reply: every request before it succeeded
                    return
        except OSError as exc:
            raise EnvError(f"cannot set the access list of X display :{display}: {exc}") from exc
