"""Networks for the live view's WebRTC tests: a Chromium whose network carries some of the host's TCP
ports and nothing else (no UDP at all), and a real TURN server (coturn).

Playwright launches `chromium_without_udp(tmp, ports, chromium)` as its executable. The wrapper starts
Chromium in a network namespace of its own (unshare: only a loopback, which it brings up; with `lan`, a
network of its own beside), where a forwarder listens on 127.0.0.1:`port` for each port and carries
each connection over a Unix socket to the real 127.0.0.1:`port` outside (`TcpBridge`). Playwright
drives Chromium over pipes (fds 3 and 4), which pass through. Nothing else leaves the namespace: with
the site's port only, WebRTC's ICE fails there as behind a firewall that drops UDP; with a TURN
server's port too, ICE can relay over TCP.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.procs import free_port

BOOT = r"""
import os, signal, socket, subprocess, sys, threading

sock_dir, ports, chromium = sys.argv[1], [int(p) for p in sys.argv[2].split(",")], sys.argv[3:]
subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
if os.environ.get("NETNS_LAN") == "1":  # a network besides loopback (WebRTC gathers on none without)
    for cmd in ("link add v0 type veth peer name v1", "addr add 10.99.0.1/24 dev v0",
                "addr add 10.99.0.2/24 dev v1", "link set v0 up", "link set v1 up"):
        subprocess.run(["ip", *cmd.split()], check=True)


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


def serve(listener, sock_path):
    while True:
        conn, _ = listener.accept()
        out = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        out.connect(sock_path)
        threading.Thread(target=pipe, args=(conn, out), daemon=True).start()
        threading.Thread(target=pipe, args=(out, conn), daemon=True).start()


for port in ports:
    listener = socket.create_server(("127.0.0.1", port))
    threading.Thread(target=serve, args=(listener, f"{sock_dir}/port-{port}.sock"), daemon=True).start()
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


class Bridges:
    """One TcpBridge per port; close() closes them all."""

    def __init__(self, bridges: list[TcpBridge], folder: Path) -> None:
        self.bridges, self.folder = bridges, folder

    def close(self) -> None:
        for bridge in self.bridges:
            bridge.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def chromium_without_udp(
    tmp: Path, ports: list[int], chromium: str, *, lan: bool = False
) -> tuple[str, Bridges]:
    """The executable for Playwright to launch (Chromium in its own network namespace) and the bridges
    that carry its TCP to 127.0.0.1:`port` outside, for each of `ports` (close them after). `lan`: the
    namespace also has a network of its own (a veth pair, 10.99.0.0/24, leading nowhere): Chromium's
    WebRTC gathers no candidate at all, not even a relayed one, on a machine with only a loopback."""
    boot = tmp / "netns_boot.py"
    boot.write_text(BOOT)
    socks = Path(tempfile.mkdtemp(prefix="netns-"))  # short: a Unix socket's path has at most 107 bytes
    bridges = Bridges([TcpBridge(socks / f"port-{port}.sock", port) for port in ports], socks)
    unshare = "unshare --net" if os.geteuid() == 0 else "unshare --user --map-root-user --net"
    wrapper = socks / "chromium-no-udp"
    command = f"{unshare} {sys.executable} {boot} {socks} {','.join(map(str, ports))} {chromium}"
    wrapper.write_text(f'#!/bin/sh\nNETNS_LAN={int(lan)} exec {command} "$@"\n')
    wrapper.chmod(0o755)
    return str(wrapper), bridges


@contextlib.contextmanager
def turn_server(tmp: Path) -> Iterator[dict[str, Any]]:
    """coturn on 127.0.0.1 (TCP and UDP) with one long-term user; yields its RTCIceServer entry.
    Loopback peers are allowed: the site's own peer and the relays are all on this machine."""
    port = free_port()
    secret = secrets.token_hex(8)
    log = tmp / "turnserver.log"
    args = [
        "turnserver", "-n", "--no-cli", "--no-tls", "--no-dtls", "--listening-ip=127.0.0.1",
        f"--listening-port={port}", "--relay-ip=127.0.0.1", "--allow-loopback-peers",
        "--lt-cred-mech", f"--user=flywheel:{secret}", "--realm=flywheel.test",
        "--min-port=40000", "--max-port=40999", f"--log-file={log}", "--simple-log", "--verbose",
        f"--pidfile={tmp / 'turnserver.pid'}", f"--userdb={tmp / 'turndb'}",  # not /var/lib/turn's
    ]  # fmt: skip
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 15
        while not _listening(port):
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"turnserver did not start: {log.read_text() if log.exists() else ''}")
            time.sleep(0.1)
        yield {
            "urls": [f"turn:127.0.0.1:{port}?transport=tcp", f"turn:127.0.0.1:{port}?transport=udp"],
            "username": "flywheel",
            "credential": secret,
        }
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _listening(port: int) -> bool:
    with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
        return True
    return False
