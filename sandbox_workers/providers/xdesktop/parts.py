"""What runs in an X desktop sandbox and how it is tracked: the apps and the session's parts with
their environment, the record of each process (`_Proc`, which survives a host restart as JSON), and
the uid slots a desktop claims when the pool gave it none."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sandbox_workers.base import EnvError
from sandbox_workers.providers.confine.bwrap import SANDBOX_HOME
from sandbox_workers.providers.confine.spawning import (
    SandboxProcess,
    kill_pid,
    process_start_time,
    same_process,
)

STATE_VERSION = 2  # 2: x11vnc on a unix socket (no port), Xvfb open to the host and the sandbox only
STATE_FILE = "xdesktop-state.json"
# The session bus socket and XDG_RUNTIME_DIR, in the sandbox's own /tmp (host: root/tmp/.flywheel).
RUN_DIR = "/tmp/.flywheel"  # noqa: S108
CHROMIUM_FLAGS = (
    "--no-sandbox",  # Chromium's own sandbox cannot nest inside bwrap's namespaces
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--password-store=basic",
    "--force-renderer-accessibility",
    "--test-type",  # no "unsupported command-line flag: --no-sandbox" infobar over every page
    "--start-maximized",
    f"--user-data-dir={SANDBOX_HOME}/.config/chromium",
)
APPS: dict[str, tuple[tuple[str, ...], str]] = {
    # name → (argv, a substring of its windows' WM_CLASS)
    "xterm": (("xterm",), "xterm"),
    "mousepad": (("mousepad",), "mousepad"),
    "pcmanfm": (("pcmanfm",), "pcmanfm"),
    "chromium": (("chromium", *CHROMIUM_FLAGS), "chromium"),
    # OSWorld's applications (the office profile; `scripts/setup.sh office` installs them).
    "libreoffice": (("libreoffice", "--norestore", "--nologo"), "libreoffice"),
    "gimp": (("gimp",), "gimp"),
    "vlc": (("vlc",), "vlc"),
    "thunderbird": (("thunderbird",), "thunderbird"),
}
SESSION_ENV = {
    "DISPLAY": ":0",
    "DBUS_SESSION_BUS_ADDRESS": f"unix:path={RUN_DIR}/bus",
    "XDG_RUNTIME_DIR": f"{RUN_DIR}/runtime",
    "XDG_SESSION_TYPE": "x11",
    "GDK_BACKEND": "x11",
    "GTK_MODULES": "gail:atk-bridge",
    "ACCESSIBILITY_ENABLED": "1",  # Chromium exposes its tree to AT-SPI only when asked
    "GIO_USE_VFS": "local",  # no gvfs daemons per app
    "TERM": "xterm",
}


def session_env(options: Mapping[str, Any]) -> dict[str, str]:
    """SESSION_ENV, with the profile's `locale` option (e.g. en_US.UTF-8, OSWorld's) as LANG."""
    locale = options.get("locale")
    return {**SESSION_ENV, **({"LANG": str(locale), "LC_ALL": str(locale)} if locale else {})}


SESSION_PARTS = ("dbus", "openbox")
"""The session's own machinery, restarted in place when it dies (an agent can kill the window manager
from inside: xkill, its menu's Exit); the start-up apps are not: closing one is the agent's doing."""
MAX_RESTARTS = 10
"""Restarts of one part between resets (profile option max_restarts); past them, what runs in the
sandbox is breaking it on purpose."""
_SESSION_ARGV = {
    "dbus": ["dbus-daemon", "--session", "--nofork", "--nopidfile", f"--address=unix:path={RUN_DIR}/bus"],
    "openbox": ["openbox", "--sm-disable"],
}


@dataclass
class _Proc:
    """A process of the sandbox: our child (popen), or after adopt known by pid + start time."""

    name: str
    pid: int
    start: float | None
    popen: subprocess.Popen[bytes] | None = None
    init_pid: int | None = None
    """bwrap processes: host pid of their namespace's pid 1 (killing it kills them all)."""
    init_start: float | None = None

    @classmethod
    def of(cls, name: str, popen: subprocess.Popen[bytes]) -> _Proc:
        init = popen.init_pid() if isinstance(popen, SandboxProcess) else None
        init_start = process_start_time(init) if init else None
        return cls(name, popen.pid, process_start_time(popen.pid), popen, init, init_start)

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return same_process(self.pid, self.start)

    def why_dead(self) -> str:
        code = self.popen.returncode if self.popen is not None else None
        return f"{self.name} exited ({code})" if code is not None else f"{self.name} is gone"

    def kill(self) -> None:
        kill_pid(self.init_pid, self.init_start)
        if self.popen is not None:
            if self.popen.poll() is None:
                self.popen.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(2)
        else:
            kill_pid(self.pid, self.start)

    def to_state(self) -> list[Any]:
        return [self.name, self.pid, self.start, self.init_pid, self.init_start]

    @classmethod
    def from_state(cls, data: Sequence[Any]) -> _Proc:
        name, pid, start, init_pid, init_start = data
        return cls(str(name), int(pid), start, None, init_pid, init_start)


_SLOT_LOCK = threading.Lock()
AUTO_SLOT_BASE = 1000


def _slot_dir() -> Path:
    base = Path("/run/flywheel-slots") if os.access("/run", os.W_OK) else Path("/tmp/flywheel-slots")  # noqa: S108
    base.mkdir(mode=0o700, exist_ok=True)
    return base


def _claim_slot(root: Path) -> int:
    """A uid slot no other live sandbox of this machine holds: a claim dir naming the owner's root
    (a claim whose root is gone was left by a crash and is taken over)."""
    with _SLOT_LOCK:
        for slot in range(AUTO_SLOT_BASE, AUTO_SLOT_BASE + 50000):
            claim = _slot_dir() / str(slot)
            try:
                claim.mkdir()
            except FileExistsError:
                try:
                    owner = (claim / "root").read_text()
                except OSError:
                    continue  # being claimed by another process right now
                if owner != str(root) and Path(owner).exists():
                    continue
            (claim / "root").write_text(str(root))
            return slot
    raise EnvError("no free sandbox uid slot")


def _release_slot(slot: int, root: Path) -> None:
    claim = _slot_dir() / str(slot)
    with contextlib.suppress(OSError):
        if (claim / "root").read_text() == str(root):
            shutil.rmtree(claim, ignore_errors=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
