"""A Chromium whose network carries the site's TCP and nothing else (no UDP at all): WebRTC's ICE fails
there as behind a firewall that drops UDP with no TURN server.

Playwright launches `chromium_without_udp(tmp, port)` as its executable. The wrapper starts Chromium in
a network namespace of its own (unshare: only a loopback, which it brings up), where a forwarder
listens on 127.0.0.1:`port` and carries each connection over a Unix socket in `tmp` to the site's real
127.0.0.1:`port` outside (`TcpBridge`). Playwright drives Chromium over pipes (fds 3 and 4), which
pass through. Nothing else leaves the namespace.
"""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
from pathlib import Path

BOOT = r"""
import os, signal, socket, subprocess, sys, threading

sock_path, port, chromium = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)


def pipe(a, b):
    try:
        while data := a.recv(65536):
            b.sendall(data)
    except OSError:
        pass
    finally:
        for s in (a, b):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def serve(listener):
    while True:
        conn, _ = listener.accept()
        out = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        out.connect(sock_path)
        threading.Thread(target=pipe, args=(conn, out), daemon=True).start()
        threading.Thread(target=pipe, args=(out, conn), daemon=True).start()


listener = socket.create_server(("127.0.0.1", port))
threading.Thread(target=serve, args=(listener,), daemon=True).start()
proc = subprocess.Popen(chromium, pass_fds=(3, 4))
signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
sys.exit(proc.wait())
"""


class TcpBridge:
    """Accepts on a Unix socket and connects each connection to 127.0.0.1:`port`."""

    def __init__(self, path: Path, port: int) -> None:
        self.path, self.port = path, port
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen(64)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.listener.accept()
            except OSError:
                return
            out = socket.create_connection(("127.0.0.1", self.port))
            threading.Thread(target=_pipe, args=(conn, out), daemon=True).start()
            threading.Thread(target=_pipe, args=(out, conn), daemon=True).start()

    def close(self) -> None:
        self.listener.close()


def _pipe(a: socket.socket, b: socket.socket) -> None:
    with contextlib.suppress(OSError):
        while data := a.recv(65536):
            b.sendall(data)
    for s in (a, b):
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


def chromium_without_udp(tmp: Path, port: int, chromium: str) -> tuple[str, TcpBridge]:
    """The executable for Playwright to launch (Chromium in its own network namespace) and the bridge
    that carries its TCP to the site on 127.0.0.1:`port` (close it after)."""
    boot = tmp / "netns_boot.py"
    boot.write_text(BOOT)
    sock = tmp / "site.sock"
    bridge = TcpBridge(sock, port)
    unshare = "unshare --net" if os.geteuid() == 0 else "unshare --user --map-root-user --net"
    wrapper = tmp / "chromium-no-udp"
    wrapper.write_text(f'#!/bin/sh\nexec {unshare} {sys.executable} {boot} {sock} {port} {chromium} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper), bridge
