"""Chromium's DevTools, reachable by the host only: a pipe per browser, bridged to one client at a time.

A desktop's Chromium starts with `--remote-debugging-pipe`: it reads DevTools commands from its fd 3
and writes replies and events to its fd 4, NUL-terminated JSON. No port is opened, so nothing in the
sandbox's network (nor another sandbox, nor the agent's terminal) can connect to it; the other ends of
those pipes stay in the sandbox host. `DevToolsPipe` holds them: a reader thread splits what Chromium
writes into messages and hands them to the one connected client (`Client`), or drops them when none is.

What a client leaves behind is undone when it goes (`Client.close`): the sessions it attached are
detached, auto-attach with wait-for-debugger is switched off (else every tab the agent opens later would
hang, waiting for a debugger that left), downloads go back to Chromium's default. A client sees only the
replies to its own commands and the events of its own sessions (and the browser's): stale traffic of an
earlier client never reaches it.

The sandbox host serves a pipe as a DevTools endpoint (`/v1/devtools/<ticket>/…`, see host.py) for the
holder of the sandbox's lease, so OSWorld's own getters can `connect_over_cdp` to it unchanged.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import subprocess
import threading
from collections.abc import Callable
from typing import Any

log = logging.getLogger(__name__)

# The ids of the bridge's own clean-up commands: far above a client's (Playwright counts from 1).
OWN_IDS = (1 << 31) - (1 << 24)  # Chromium takes int32 ids only
MAX_MESSAGE = 256 << 20


class DevToolsBusy(Exception):
    """Another client is connected (a pipe carries one DevTools connection)."""


class DevToolsPipe:
    """Both ends of one Chromium's DevTools pipe, as the host keeps them."""

    def __init__(self) -> None:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        # The child's ends, above the descriptors a child is started with (its fds 3/4 are dup'ed from
        # these by the bash that starts Chromium: dash takes one-digit descriptors only; `child_argv`).
        self.child_fds: tuple[int, ...] = (
            fcntl.fcntl(to_chrome_r, fcntl.F_DUPFD_CLOEXEC, 10),
            fcntl.fcntl(from_chrome_w, fcntl.F_DUPFD_CLOEXEC, 10),
        )
        os.close(to_chrome_r)
        os.close(from_chrome_w)
        self._lock = threading.Lock()
        self._write_lock = threading.Lock()
        self._client: Client | None = None
        self._reader: threading.Thread | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self.closed = False

    def child_argv(self, argv: list[str]) -> list[str]:
        """`argv` (Chromium's, its program first) run with the pipe as its fds 3 and 4."""
        r, w = self.child_fds
        script = f'exec "$@" 3<&{r} 4>&{w} {r}<&- {w}>&-'
        return ["/bin/bash", "-c", script, "bash", argv[0], "--remote-debugging-pipe", *argv[1:]]

    def started(self, process: subprocess.Popen[bytes] | None = None) -> None:
        """The child (`process`, which runs as long as Chromium does) has its ends: close ours of them and
        start reading."""
        self._process = process
        self._close_child_fds()
        self._reader = threading.Thread(target=self._read, name="devtools-pipe", daemon=True)
        self._reader.start()

    @property
    def alive(self) -> bool:
        """Chromium still runs and has its end (a helper process it started may keep the pipe open after
        it died: its process is asked too)."""
        if self._process is not None and self._process.poll() is not None:
            return False
        return not self.closed and self._reader is not None and self._reader.is_alive()

    def _read(self) -> None:
        buf = bytearray()
        try:
            while True:
                chunk = os.read(self._from_chrome, 1 << 16)
                if not chunk:
                    break
                scan = len(buf)  # a message's end is in what just came (a page's HTML is megabytes)
                buf += chunk
                while (end := buf.find(b"\0", scan)) >= 0:
                    self._deliver(bytes(buf[:end]))
                    del buf[: end + 1]
                    scan = 0
                if len(buf) > MAX_MESSAGE:
                    log.warning("a DevTools message past %d bytes was dropped", MAX_MESSAGE)
                    buf.clear()
        except OSError:
            pass
        with contextlib.suppress(OSError):
            os.close(self._from_chrome)
        with self._lock:
            client = self._client
        if client is not None:
            client.ended()

    def _deliver(self, raw: bytes) -> None:
        try:
            message = json.loads(raw)
        except ValueError:
            return  # the tail of a message whose start an earlier client took
        with self._lock:
            client = self._client
        if client is not None and isinstance(message, dict):
            client.offer(message)

    def send(self, message: dict[str, Any]) -> None:
        data = json.dumps(message, separators=(",", ":")).encode() + b"\0"
        with self._write_lock:
            if self.closed:
                raise BrokenPipeError("this browser's DevTools pipe is closed")
            view = memoryview(data)
            while view:
                view = view[os.write(self._to_chrome, view) :]

    def connect(self, deliver: Callable[[dict[str, Any] | None], None]) -> Client:
        """The pipe's client from now on; `deliver(message)` is called from the reader thread (None when
        Chromium's end closed). DevToolsBusy while another is connected."""
        with self._lock:
            if self._client is not None:
                raise DevToolsBusy("another DevTools client is connected to this browser")
            if not self.alive:
                raise BrokenPipeError("this browser's DevTools pipe is closed")
            self._client = Client(self, deliver)
            return self._client

    def _release(self, client: Client) -> None:
        with self._lock:
            if self._client is client:
                self._client = None

    def _close_child_fds(self) -> None:
        # Once only: a descriptor number closed twice may by then be another's (a listening socket).
        fds, self.child_fds = self.child_fds, ()
        for fd in fds:
            with contextlib.suppress(OSError):
                os.close(fd)

    def close(self) -> None:
        """Close our ends (Chromium then sees end of file on its fd 3); safe twice."""
        if self.closed:
            return
        self._close_child_fds()
        with self._write_lock:  # not while a command is being written
            self.closed = True
            with contextlib.suppress(OSError):
                os.close(self._to_chrome)
        if self._reader is None:
            with contextlib.suppress(OSError):
                os.close(self._from_chrome)
        # A reader still reading closes its end itself, at the end of file that the end of Chromium's
        # processes gives it (closing a descriptor a thread still reads would free its number for reuse).


class Client:
    """One DevTools connection over a pipe: forwards the client's commands, filters what comes back."""

    def __init__(self, pipe: DevToolsPipe, deliver: Callable[[dict[str, Any] | None], None]) -> None:
        self.pipe = pipe
        self._deliver = deliver
        self._pending: dict[Any, str | None] = {}  # command id → the session it was sent on
        self.sessions: dict[str, str | None] = {}  # the client's sessions → the session they hang from
        self._lock = threading.Lock()
        self._closed = False
        self._own = OWN_IDS

    def command(self, message: dict[str, Any]) -> None:
        """A command from the client (its `id` awaits a reply)."""
        session = message.get("sessionId")
        with self._lock:
            self._pending[message.get("id")] = session if isinstance(session, str) else None
        self.pipe.send(message)

    def offer(self, message: dict[str, Any]) -> None:
        """A message from Chromium: the client's if it answers the client or belongs to its sessions."""
        session = message.get("sessionId")
        with self._lock:
            if self._closed:
                return
            if "id" in message:
                if message["id"] not in self._pending:
                    return
                sent_on = self._pending.pop(message["id"])
                result = message.get("result")
                if isinstance(result, dict) and isinstance(result.get("sessionId"), str):
                    self.sessions[result["sessionId"]] = sent_on  # Target.attachToTarget and its kin
            elif session is not None and session not in self.sessions:
                return
            if message.get("method") == "Target.attachedToTarget":
                attached = (message.get("params") or {}).get("sessionId")
                if isinstance(attached, str):
                    self.sessions[attached] = session if isinstance(session, str) else None
        self._deliver(message)

    def ended(self) -> None:
        self._deliver(None)

    def _depth(self, session: str) -> int:
        depth, parent = 0, self.sessions.get(session)
        while parent is not None and depth < 64:
            depth, parent = depth + 1, self.sessions.get(parent)
        return depth

    def close(self) -> None:
        """The client went: undo what it left switched on, then free the pipe for the next. Auto-attach
        is switched off on every session it may have been switched on in; the sessions are detached
        deepest first, each by the session it was attached from (flat sessions are detached there)."""
        with self._lock:
            self._closed = True
            sessions = dict(self.sessions)
        off = {"autoAttach": False, "waitForDebuggerOnStart": False, "flatten": True}
        cleanup: list[tuple[str | None, str, dict[str, Any]]] = [
            (s, "Target.setAutoAttach", off) for s in [None, *sessions]
        ]
        cleanup += [
            (None, "Target.setDiscoverTargets", {"discover": False}),
            (None, "Browser.setDownloadBehavior", {"behavior": "default"}),
        ]
        for s in sorted(sessions, key=self._depth, reverse=True):
            cleanup.append((sessions[s], "Target.detachFromTarget", {"sessionId": s}))
        if self.pipe.alive:
            for on, method, params in cleanup:
                self._own += 1
                message: dict[str, Any] = {"id": self._own, "method": method, "params": params}
                if on is not None:
                    message["sessionId"] = on
                with contextlib.suppress(OSError):
                    self.pipe.send(message)
        self.pipe._release(self)
