"""The X desktop sandbox: Xvfb + openbox + desktop apps, confined by bubblewrap.

Xvfb and x11vnc (loopback only) run as the host user OUTSIDE the sandbox: they are infrastructure.
Inside it (see `sandbox_workers.confine`) run a namespace holder, a session D-Bus (AT-SPI needs it),
openbox and the profile's start-up apps, each its own bwrap process; all share the workspace
($HOME = /home/user, host `root/home`), /tmp (host `root/tmp`), the network namespace (a server one
starts is reachable from the others) and one cgroup. Input goes through one persistent Xlib
connection (XTEST) and waits for XDamage to settle; screenshots come from a persistent mss instance.
Not thread-safe: one worker thread per sandbox (as the pool guarantees).

Profile.options: apps (start-up apps, default ["xterm"]; known: xterm, mousepad, pcmanfm, chromium),
settle_first_ms / settle_quiet_ms / settle_max_ms (see x11.Settle), start_timeout_s (20),
a11y_timeout_s (10), glx (False: Xvfb without GLX saves ~55 MB), max_restarts (MAX_RESTARTS).

What an agent can kill from inside is restarted in place (`repair`, which the pool calls when
`health().repair` names something, and every operation before it runs): the window manager and the
session bus, x11vnc, and our own X and capture connections (XKillClient reaches them). A start-up
app that exits is left closed: that is the agent's doing. Past `max_restarts` of one part between
resets, the sandbox is broken by what runs in it (SandboxBrokenByAgent: the agent's failure).

The uid slot is `Provider.slot` as the pool sets it; a provider made without one (tests, scripts)
claims a free slot from AUTO_SLOT_BASE up with a claim directory in /run/flywheel-slots.

Snapshots are a tar.gz of the workspace only: process and window state are NOT captured; restore
resets the desktop (fresh start-up apps) with the workspace as it was.

Host restarts: every process starts in its own session, so the sandbox outlives its host process.
`state()` (also kept in root/xdesktop-state.json as processes start) lets `adopt` reattach or
`cleanup` kill what is left; `cleanup(root=..., state={})` works from that file alone (a host
killed mid-start). `detach()` drops the X connections without stopping anything.
Extensions (`call`): launch {app, args?, timeout?}, a11y, windows.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import select
import shutil
import socket
import subprocess
import tarfile
import threading
import time
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import psutil

from agent_core import actions as A
from sandbox_workers import confine
from sandbox_workers.base import (
    ActionUnsupported,
    EnvError,
    ExecResult,
    Health,
    ImageFormat,
    Observation,
    Profile,
    Provider,
    SandboxBrokenByAgent,
    SandboxError,
    Screenshot,
    register_provider,
)
from sandbox_workers.confine import SANDBOX_HOME, Confinement, SandboxCgroup, SandboxProcess
from sandbox_workers.x11 import Grabber, Settle, XSession, server_alive

log = logging.getLogger(__name__)
T = TypeVar("T")

STATE_VERSION = 1
STATE_FILE = "xdesktop-state.json"
A11Y_SCRIPT = Path(__file__).resolve().parent.parent / "a11y_dump.py"
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
_MOBILE = (A.LongPress, A.OpenApp, A.PressHome, A.PressBack, A.McpCall)
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
        init_start = confine.process_start_time(init) if init else None
        return cls(name, popen.pid, confine.process_start_time(popen.pid), popen, init, init_start)

    def alive(self) -> bool:
        if self.popen is not None:
            return self.popen.poll() is None
        return confine.same_process(self.pid, self.start)

    def why_dead(self) -> str:
        code = self.popen.returncode if self.popen is not None else None
        return f"{self.name} exited ({code})" if code is not None else f"{self.name} is gone"

    def kill(self) -> None:
        confine.kill_pid(self.init_pid, self.init_start)
        if self.popen is not None:
            if self.popen.poll() is None:
                self.popen.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.popen.wait(2)
        else:
            confine.kill_pid(self.pid, self.start)

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


@register_provider("xdesktop")
class XDesktopProvider(Provider):
    """One X desktop sandbox (see the module docstring)."""

    supports_snapshot = True
    extensions = frozenset({"launch", "a11y", "windows"})

    def __init__(self, *, sandbox_id: str, profile: Profile, root: Path) -> None:
        super().__init__(sandbox_id=sandbox_id, profile=profile, root=root)
        opts = profile.options
        self.apps: list[str] = list(opts.get("apps", ["xterm"]))
        unknown = [a for a in self.apps if a not in APPS]
        if unknown:
            raise SandboxError(f"unknown app(s) {unknown}; valid: {', '.join(sorted(APPS))}")
        self.settle_conf = Settle(
            float(opts.get("settle_first_ms", 25)),
            float(opts.get("settle_quiet_ms", 4)),
            float(opts.get("settle_max_ms", 120)),
        )
        self.start_timeout = float(opts.get("start_timeout_s", 20))
        self.a11y_timeout = float(opts.get("a11y_timeout_s", 10))
        self.max_restarts = int(opts.get("max_restarts", MAX_RESTARTS))
        self._claimed_slot = False
        self.conf: Confinement | None = None
        self.cgroup: SandboxCgroup | None = None
        self.display: int | None = None
        self.vnc_port: int | None = None
        self.xvfb: _Proc | None = None
        self.vnc: _Proc | None = None
        self.holder: _Proc | None = None
        self.session: list[_Proc] = []
        """dbus, openbox and the start-up apps: the health check watches them."""
        self.launched: list[_Proc] = []
        """Apps started by `launch` and commands left running by exec: killed on reset."""
        self.x: XSession | None = None
        self.grabber: Grabber | None = None
        self._stopped = False
        self._restarts: dict[str, int] = {}
        """Part → restarts since the last reset (see repair)."""
        self._resetting = False
        self._resets = 0
        """Counts resets begun: a health check that saw it change looked at a reset's kills."""
        """Set while reset kills and restarts the session: health() then reports no dead process."""

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Xvfb, x11vnc and the sandbox's session; EnvError (with all of it stopped) if it fails."""
        t0 = time.monotonic()
        try:
            # No slot from the pool (a test, a script), and a sandbox uid needs one: claim a free one.
            if "slot" not in self.__dict__ and os.geteuid() == 0:
                self.slot, self._claimed_slot = _claim_slot(self.root), True
            self.conf = confine.with_env(
                confine.confinement_for(self.profile, self.root, slot=self.slot, shared_tmp=True), SESSION_ENV
            )
            if SandboxCgroup.available():
                self.cgroup = SandboxCgroup.create(
                    SandboxCgroup.name_for(self.sandbox_id, self.root),
                    self.profile.memory_mb,
                    self.profile.max_pids,
                )
            self._save_state()
            t1 = time.monotonic()
            self._start_x()
            t2 = time.monotonic()
            self._start_session()
            t3 = time.monotonic()
            self._wait_vnc()
        except BaseException:
            self._teardown(remove_root=False)
            self._release_slot()
            raise
        log.info(
            "xdesktop %s started in %.0f ms (setup %.0f, Xvfb %.0f, session %.0f, vnc %.0f) on :%s, vnc %s",
            self.sandbox_id, (time.monotonic() - t0) * 1000, (t1 - t0) * 1000, (t2 - t1) * 1000,
            (t3 - t2) * 1000, (time.monotonic() - t3) * 1000, self.display, self.vnc_port,
        )  # fmt: skip

    def _start_x(self) -> None:
        """Xvfb (it picks a free display and tells us on -displayfd), x11vnc (not waited for), and
        our persistent X connection and grabber."""
        p = self.profile
        glx = [] if p.options.get("glx") else ["-extension", "GLX"]  # Mesa in Xvfb: ~55 MB RSS
        args = ["Xvfb", "-screen", "0", f"{p.width}x{p.height}x24", "-nolisten", "tcp", "-noreset", *glx]
        r, w = os.pipe()
        try:
            popen = self._host_popen("xvfb", [*args, "-displayfd", str(w)], pass_fds=(w,))
        finally:
            os.close(w)
        self.xvfb = _Proc("xvfb", popen.pid, confine.process_start_time(popen.pid), popen)
        self._save_state()
        data = b""
        deadline = time.monotonic() + self.start_timeout
        try:
            while not data.endswith(b"\n"):
                if time.monotonic() > deadline:
                    raise EnvError(f"Xvfb did not start in time: {self._log_tail('xvfb.log')}")
                if select.select([r], [], [], 0.2)[0]:
                    chunk = os.read(r, 64)
                    if not chunk:
                        raise EnvError(f"Xvfb exited: {self._log_tail('xvfb.log')}")
                    data += chunk
        finally:
            os.close(r)
        self.display = int(data)
        self._start_vnc(_free_port())
        self.x = XSession(f":{self.display}", self.settle_conf)
        self.grabber = Grabber(f":{self.display}")

    def _start_vnc(self, port: int) -> None:
        """x11vnc on `port` (not waited for: see _wait_vnc)."""
        self.vnc_port = port
        vnc = ["x11vnc", "-display", f":{self.display}", "-localhost", "-rfbport", str(port)]
        # -noshm: x11vnc's SysV segments outlive it when it is SIGKILLed (42 per instance, until the
        # host's segment table is full); polling with plain GetImage costs only while a viewer watches.
        flags = ["-shared", "-forever", "-nopw", "-norc", "-noipv6", "-noshm", "-quiet"]
        popen = self._host_popen("x11vnc", [*vnc, *flags])
        self.vnc = _Proc("x11vnc", popen.pid, confine.process_start_time(popen.pid), popen)
        self._save_state()

    def _host_popen(
        self, name: str, argv: list[str], pass_fds: tuple[int, ...] = ()
    ) -> subprocess.Popen[bytes]:
        with open(self.root / f"{name}.log", "ab") as logf:
            try:
                return subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, pass_fds=pass_fds,
                    start_new_session=True,  # a restarted host adopts it; no signal of ours reaches it
                )  # fmt: skip
            except OSError as exc:
                raise EnvError(f"cannot start {argv[0]}: {exc}") from exc

    def _wait_vnc(self) -> None:
        """Until x11vnc listens (seen on its sockets: connecting would start a VNC session)."""
        assert self.vnc is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            if not self.vnc.alive():
                raise EnvError(f"x11vnc died: {self._log_tail('x11vnc.log')}")
            with contextlib.suppress(psutil.Error):
                for c in psutil.Process(self.vnc.pid).net_connections(kind="tcp"):
                    if c.status == psutil.CONN_LISTEN and c.laddr.port == self.vnc_port:
                        return
            if time.monotonic() > deadline:
                raise EnvError(f"x11vnc did not listen on port {self.vnc_port} in time")
            time.sleep(0.005)

    def _spawn(self, argv: Sequence[str], *, pipes: bool = False) -> SandboxProcess:
        """Start a process in the sandbox's session (shared namespaces, cgroup, desktop env)."""
        assert self.conf is not None and self.holder is not None and self.holder.init_pid is not None
        x_socket = (f"/tmp/.X11-unix/X{self.display}", "/tmp/.X11-unix/X0", True)  # noqa: S108
        with open(self.root / "session.log", "ab") as logf:
            return confine.spawn(
                self.conf, argv, cgroup=self.cgroup, join=self.holder.init_pid, extra_binds=(x_socket,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if pipes else logf, stderr=subprocess.PIPE if pipes else logf,
            )  # fmt: skip

    def _start_session(self) -> None:
        """Namespace holder, D-Bus, openbox, then the start-up apps; wait for their windows."""
        assert self.conf is not None and self.conf.tmp is not None
        run = self.conf.tmp / Path(RUN_DIR).name
        (run / "runtime").mkdir(parents=True, exist_ok=True)
        (run / "runtime").chmod(0o700)
        confine.chown_tree(run, self.conf.uid)
        holder, _ = confine.start_netns_holder(self.conf, cgroup=self.cgroup, timeout=self.start_timeout)
        self.holder = _Proc.of("netns", holder)
        self._save_state()
        self.session = [_Proc.of(part, self._spawn(_SESSION_ARGV[part])) for part in SESSION_PARTS]
        self._save_state()
        deadline = time.monotonic() + self.start_timeout
        self._wait(lambda _x: _accepts(run / "bus"), deadline, "the session D-Bus", self.session)
        # Apps start once openbox manages the screen: a window mapped while openbox is still taking
        # over can be lost, and xterm, say, then waits for its map forever.
        self._wait(lambda x: x.wm_running(), deadline, "openbox", self.session)
        names = [p.name for p in self.session]
        for app in self.apps:
            name = app if app not in names else f"{app}#{names.count(app) + 1}"
            names.append(app)
            self.session.append(_Proc.of(name, self._spawn(self._app_argv(app, []))))
            self._save_state()
        wanted = [APPS[a][1] for a in self.apps]
        self._wait(lambda x: _have_windows(x, wanted), deadline, "the apps' windows", self.session)

    def _bus_path(self) -> Path:
        """The session bus socket on the host."""
        assert self.conf is not None and self.conf.tmp is not None
        return self.conf.tmp / Path(RUN_DIR).name / "bus"

    def repair(self) -> list[str]:
        """Restart what died of x11vnc, the session bus and the window manager; returns their names.

        EnvError if Xvfb or the session's namespace holder is gone (a reset restarts those) or a
        restart fails; SandboxBrokenByAgent past MAX_RESTARTS of a session part since the last reset."""
        self._require_infra()
        if self.holder is None or not self.holder.alive():
            raise EnvError("the sandbox's session is gone (reset restarts it)")
        dead = self._dead_parts()
        for name in dead:
            self._count_restart(name)
        t0 = time.monotonic()
        if "x11vnc" in dead:
            self._restart_vnc()
        for part in SESSION_PARTS:
            if part in dead:
                self._restart_session_part(part)
        if dead:
            log.warning("xdesktop %s restarted %s in %.0f ms", self.sandbox_id, ", ".join(dead),
                        (time.monotonic() - t0) * 1000)  # fmt: skip
        return dead

    def _dead_parts(self) -> list[str]:
        """The parts `repair` restarts that are dead now (cheap: a waitpid or /proc read each)."""
        dead = ["x11vnc"] if self.vnc is not None and not self.vnc.alive() else []
        return dead + [p.name for p in self.session if p.name in SESSION_PARTS and not p.alive()]

    def _restart_vnc(self) -> None:
        """x11vnc again, on its port if it is free (the live view's endpoint stays), else on another."""
        assert self.vnc is not None and self.vnc_port is not None
        self.vnc.kill()
        try:
            self._start_vnc(self.vnc_port)
            self._wait_vnc()
        except EnvError:
            self.vnc.kill()
            self._start_vnc(_free_port())
            self._wait_vnc()

    def _restart_session_part(self, part: str) -> None:
        """`part` again, until it stays up (killed again while it starts: one more restart counted)."""
        while True:
            old = next(p for p in self.session if p.name == part)
            old.kill()  # reaps it, and whatever its namespace still holds
            if part == "dbus":
                self._bus_path().unlink(missing_ok=True)
                # Apps find the AT-SPI bus through this root-window property: the dead bus's is stale.
                with contextlib.suppress(EnvError):
                    self._x("atspi", lambda x: (x.root.delete_property(x.atom("AT_SPI_BUS")), x.d.sync()))
            new = _Proc.of(part, self._spawn(_SESSION_ARGV[part]))
            self.session[self.session.index(old)] = new
            self._save_state()
            deadline = time.monotonic() + self.start_timeout
            try:
                if part == "dbus":
                    self._wait(lambda _x: _accepts(self._bus_path()), deadline, "the session D-Bus", [new])
                else:
                    self._wait(lambda x: x.wm_running(), deadline, part, [new])
                return
            except EnvError:
                if new.alive() or not self.xvfb or not self.xvfb.alive():
                    raise
            self._count_restart(part)

    def _wait(
        self, cond: Callable[[XSession], bool], deadline: float, what: str, watch: Sequence[_Proc]
    ) -> None:
        """Until `cond(x)` holds; EnvError if Xvfb or a process of `watch` dies first, or at `deadline`."""
        while True:
            self._require_infra()
            for p in watch:
                if not p.alive():
                    raise EnvError(
                        f"{p.why_dead()} while waiting for {what}: {self._log_tail('session.log')}"
                    )
            if self._x("wait", cond):
                return
            if time.monotonic() > deadline:
                raise EnvError(f"timed out waiting for {what}")
            time.sleep(0.005)

    def _app_argv(self, app: str, args: Sequence[str]) -> list[str]:
        if app == "chromium":
            self._chromium_prefs()
        return [*APPS[app][0], *args]

    def _chromium_prefs(self) -> None:
        """Downloads go to ~/Downloads without asking (written before Chromium's first start)."""
        assert self.conf is not None
        prefs = {
            "download": {"default_directory": f"{SANDBOX_HOME}/Downloads", "prompt_for_download": False},
            "browser": {"has_seen_welcome_page": True},
        }
        ws = self.conf.workspace
        if not (ws / ".config/chromium/Default/Preferences").exists():
            confine.workspace_write(
                self.conf, ".config/chromium/Default/Preferences", json.dumps(prefs).encode()
            )
        if not (ws / "Downloads").exists():
            (ws / "Downloads").mkdir()
            confine.chown_tree(ws / "Downloads", self.conf.uid)

    def _release_slot(self) -> None:
        if self._claimed_slot:
            _release_slot(self.slot, self.root)
            self._claimed_slot = False

    def _log_tail(self, name: str, n: int = 600) -> str:
        try:
            data = (self.root / name).read_bytes()[-n:]
        except OSError:
            return "(no log)"
        return data.decode("utf-8", "replace").strip() or "(empty log)"

    def health(self) -> Health:
        """Which of the sandbox's processes live (no X round trip: a few waitpid/proc reads).

        Broken (not ok) only when Xvfb or the namespace holder is gone; a dead x11vnc, session bus or
        window manager is named in `repair`, and a start-up app that exited (closed by the agent) is
        only noted."""
        resets = self._resets
        if self._resetting:
            # Its processes die and restart on purpose now (a restore under a lease, say); the reset
            # raises if it fails.
            return Health(ok=True, detail="resetting")
        health = self._health()
        if not health.ok and (self._resetting or self._resets != resets):
            # A reset began on another thread while we looked: what we saw dead, it killed.
            return Health(ok=True, detail="resetting")
        return health

    def _health(self) -> Health:
        procs = [p for p in (self.xvfb, self.vnc, self.holder) if p is not None] + self.session
        if not procs:
            return Health(ok=False, detail="not started")
        alive = {p.name: p.alive() for p in procs}
        fatal = [p.why_dead() for p in (self.xvfb, self.holder) if p is not None and not alive[p.name]]
        repair = tuple(self._dead_parts())
        closed = [p.why_dead() for p in self.session if p.name not in SESSION_PARTS and not alive[p.name]]
        notes = []
        if fatal:
            notes.append("died: " + "; ".join(fatal))
        if repair:
            notes.append("to restart: " + ", ".join(repair))
        if closed:
            notes.append("closed: " + "; ".join(closed))
        if self.cgroup is None:
            notes.append("no cgroup on this host: memory and pids limited by rlimits only")
        alive.update({f"launched:{p.name}": p.alive() for p in self.launched})
        return Health(ok=not fatal, detail="; ".join(notes), processes=alive, repair=repair)

    def _require_infra(self) -> None:
        """EnvError now if Xvfb is dead (rather than hanging on it)."""
        if self._stopped or self.xvfb is None or self.vnc is None:
            raise EnvError("the sandbox is not running")
        if not self.xvfb.alive():
            raise EnvError(f"{self.xvfb.why_dead()}: the desktop is broken (reset restarts it)")

    def _ready(self) -> None:
        """Before an operation: EnvError if Xvfb is dead; first restarts what `repair` restarts."""
        self._require_infra()
        if self._dead_parts():
            self.repair()

    def _x(self, what: str, fn: Callable[[XSession], T]) -> T:
        """`fn` on our X connection; once more on a new connection if the old one was cut (something
        in the sandbox can XKillClient it) while the server lives."""
        old = self.x
        if old is None:
            raise EnvError("no X connection")
        try:
            return old.call(what, lambda: fn(old))
        except EnvError:
            if not self._x_cut(old):
                raise
        self._count_restart("x-connection")
        log.warning("xdesktop %s: its X connection was cut; reconnecting", self.sandbox_id)
        old.close()
        new = self.x = XSession(f":{self.display}", self.settle_conf)
        return new.call(what, lambda: fn(new))

    def _x_cut(self, x: XSession) -> bool:
        """Whether `x` lost its connection while Xvfb still serves others."""
        if self.xvfb is None or not self.xvfb.alive() or not server_alive(f":{self.display}"):
            return False
        try:
            x.call("ping", x.d.get_input_focus)
        except EnvError:
            return True
        return False

    def _count_restart(self, part: str) -> None:
        count = self._restarts[part] = self._restarts.get(part, 0) + 1
        if count > self.max_restarts:
            why = f"{part} died {count} times since the sandbox was reset"
            if part == "x11vnc":  # outside the sandbox: it can die of its own
                raise EnvError(why)
            raise SandboxBrokenByAgent(f"{why}: what runs in the sandbox keeps killing it")

    def _grab(self, fmt: ImageFormat, quality: int) -> Screenshot:
        """A screenshot; once more on a new capture connection if the old one was cut."""
        assert self.grabber is not None
        try:
            return self.grabber.screenshot(fmt, quality)
        except Exception:
            if self.xvfb is None or not self.xvfb.alive() or not server_alive(f":{self.display}"):
                raise
        self._count_restart("capture-connection")
        log.warning("xdesktop %s: its capture connection was cut; reconnecting", self.sandbox_id)
        self.grabber.close()
        self.grabber = Grabber(f":{self.display}")
        return self.grabber.screenshot(fmt, quality)

    def _kill_sandbox(self) -> None:
        """Kill every process inside the sandbox (not Xvfb, x11vnc)."""
        if self.cgroup is not None:
            self.cgroup.kill_all()
        for p in (*self.launched, *self.session, *([self.holder] if self.holder else [])):
            p.kill()
        self.holder, self.session, self.launched = None, [], []

    def _kill_infra(self) -> None:
        for closeable in (self.x, self.grabber):
            if closeable is not None:
                closeable.close()
        for p in (self.vnc, self.xvfb):
            if p is not None:
                p.kill()
        self.x, self.grabber, self.vnc, self.xvfb = None, None, None, None

    def reset(self, _after_wipe: Callable[[], None] | None = None) -> None:
        """Kill the sandbox's processes, wipe the workspace and /tmp, restart openbox and the start-up
        apps. Xvfb and x11vnc keep running (restarted only if dead)."""
        if self.conf is None or self._stopped:
            raise EnvError("the sandbox is not started")
        self._resetting = True
        self._resets += 1
        try:
            self._reset(_after_wipe)
        finally:
            self._resetting = False

    def _reset(self, _after_wipe: Callable[[], None] | None) -> None:
        assert self.conf is not None
        t0 = time.monotonic()
        self._restarts.clear()
        infra_ok = self.xvfb is not None and self.xvfb.alive() and self.x is not None
        if infra_ok:
            with contextlib.suppress(EnvError):
                self._x("release", lambda x: x.release_all())
            # AT-SPI clients find their bus through this root-window property; the killed session's
            # bus is gone, and a stale address would leave every new app without accessibility.
            with contextlib.suppress(EnvError):
                self._x("atspi", lambda x: (x.root.delete_property(x.atom("AT_SPI_BUS")), x.d.sync()))
        self._kill_sandbox()
        t1 = time.monotonic()
        confine.wipe_dir(self.conf.workspace)
        if self.conf.tmp is not None:
            confine.wipe_dir(self.conf.tmp)
        if _after_wipe is not None:
            _after_wipe()
        t2 = time.monotonic()
        if not infra_ok:
            self._kill_infra()
            self._start_x()
        self._start_session()
        vnc_dead = self.vnc is not None and not self.vnc.alive()
        if not infra_ok:
            self._wait_vnc()
        elif vnc_dead:
            self._restart_vnc()
        log.info(
            "xdesktop %s reset in %.0f ms (kill %.0f, wipe %.0f, start %.0f)%s",
            self.sandbox_id, (time.monotonic() - t0) * 1000, (t1 - t0) * 1000, (t2 - t1) * 1000,
            (time.monotonic() - t2) * 1000,
            ", Xvfb and x11vnc restarted" if not infra_ok else ", x11vnc restarted" if vnc_dead else "",
        )  # fmt: skip

    def stop(self) -> None:
        """Kill everything, remove the cgroup and the sandbox root; safe twice and half-started."""
        if not self._stopped:
            self._stopped = True
            self._teardown(remove_root=True)

    def _teardown(self, *, remove_root: bool) -> None:
        t0 = time.monotonic()
        problems = []
        try:
            self._kill_sandbox()
        except EnvError as exc:
            problems.append(str(exc))
        self._kill_infra()
        if self.cgroup is not None:
            try:
                self.cgroup.remove()
            except EnvError as exc:
                problems.append(str(exc))
            self.cgroup = None
        if remove_root:
            shutil.rmtree(self.root, ignore_errors=True)
            self._release_slot()
        log.info(
            "xdesktop %s stopped in %.0f ms%s", self.sandbox_id, (time.monotonic() - t0) * 1000,
            f" (problems: {'; '.join(problems)})" if problems else "",
        )  # fmt: skip

    # --- stepping -------------------------------------------------------------------------------
    def observe(self, *, fmt: ImageFormat = "png", a11y: bool = False, quality: int = 80) -> Observation:
        """A screenshot now (and the AT-SPI tree as text when asked)."""
        self._ready()
        shot = self._grab(fmt, quality)
        return Observation(
            screenshot=shot, a11y=self._a11y_tree() if a11y else None, info={"display": f":{self.display}"}
        )

    def act(self, action: A.Action) -> None:
        """Perform one action (XTEST input) and return once the screen has settled."""
        if isinstance(action, A.Finished | A.CallUser):
            return
        if isinstance(action, _MOBILE):
            raise ActionUnsupported(f"{action.kind} is not an action of the X desktop")
        if isinstance(action, A.Terminal):
            self.exec(action.command, timeout=action.timeout)
            return
        if isinstance(action, A.FileRead):
            self.get_file(action.path)
            return
        if isinstance(action, A.FileWrite):
            self.put_file(action.path, action.content.encode())
            return
        self._ready()
        if isinstance(action, A.Wait):
            time.sleep(action.seconds)
            return

        def run(x: XSession) -> None:
            x.arm()
            _input(x, action)
            x.settle()

        self._x(action.kind, run)

    # --- shell and files ------------------------------------------------------------------------
    def exec(
        self, command: str | Sequence[str], *, timeout: float = 30.0, output_cap: int = 65536
    ) -> ExecResult:
        """Run a command in the sandbox (a string through bash) in /home/user, with the desktop's
        environment (DISPLAY=:0: it may open windows). Background children outlive it until reset."""
        self._ready()
        if self.holder is None or not self.holder.alive():
            raise EnvError("the sandbox's session is gone (reset restarts it)")
        t0 = time.monotonic()
        proc = self._spawn(["bash", "-c", command] if isinstance(command, str) else list(command), pipes=True)
        try:
            result = confine.collect_output(proc, timeout=timeout, output_cap=output_cap, t0=t0)
        finally:
            if proc.poll() is None:
                proc.kill_tree()
                proc.wait()
        init = proc.init_pid(timeout=0)
        if init is not None and confine.same_process(init, None):
            # Its pid namespace lives on (something went to the background): track it for reset.
            # Its start time guards the kill at reset: by then the pid may belong to another process.
            started = confine.process_start_time(init)
            self.launched.append(_Proc("exec", init, started, None, init, started))
            self._save_state()
        return result

    def put_file(self, path: str, data: bytes) -> None:
        """Write a file of the workspace (parents created), owned by the sandbox user."""
        if self.conf is None:
            raise EnvError("the sandbox is not started")
        confine.workspace_write(self.conf, path, data)

    def get_file(self, path: str) -> bytes:
        """Read a file of the workspace (never through a symlink)."""
        if self.conf is None:
            raise EnvError("the sandbox is not started")
        return confine.workspace_read(self.conf, path)

    # --- optional -------------------------------------------------------------------------------
    def snapshot(self) -> bytes:
        """A tar.gz of the workspace (process and window state are NOT captured)."""
        if self.conf is None:
            raise EnvError("the sandbox is not started")
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:
            for child in sorted(self.conf.workspace.iterdir()):
                tar.add(child, arcname=child.name)
        return buf.getvalue()

    def restore(self, blob: bytes) -> None:
        """Reset, with the workspace unpacked from a `snapshot` before the start-up apps start."""
        conf = self.conf
        if conf is None:
            raise EnvError("the sandbox is not started")
        try:
            # Read it through once before the reset wipes the workspace: a bad blob changes nothing.
            with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tar:
                tar.getmembers()
        except (tarfile.TarError, EOFError, OSError, zlib.error) as exc:
            raise SandboxError(f"not a snapshot of this sandbox (a tar.gz of its workspace): {exc}") from None

        def unpack() -> None:
            with tarfile.open(fileobj=io.BytesIO(blob), mode="r:*") as tar:
                # The "data" filter refuses absolute paths, "..", links out of the tree and devices.
                tar.extractall(conf.workspace, filter="data")
            confine.chown_tree(conf.workspace, conf.uid)

        self.reset(_after_wipe=unpack)

    def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """launch {app, args?, timeout?} → {app, pid, window}: start an app, wait for its window;
        a11y → {tree}; windows → {windows: [{id, class, title, x, y, width, height}]}."""
        if method == "launch":
            args = [str(a) for a in params.get("args", [])]
            return self._launch(
                str(params.get("app", "")), args, float(params.get("timeout", self.start_timeout))
            )
        if method == "a11y":
            self._ready()
            return {"tree": self._a11y_tree()}
        if method == "windows":
            self._ready()
            return {"windows": [w.to_dict() for w in self._x("windows", lambda x: x.windows())]}
        return super().call(method, params)

    def _launch(self, app: str, args: list[str], timeout: float) -> dict[str, Any]:
        if app not in APPS:
            raise SandboxError(f"unknown app {app!r}; valid: {', '.join(sorted(APPS))}")
        self._ready()
        before = {w.id for w in self._x("windows", lambda x: x.windows())}
        proc = _Proc.of(app, self._spawn(self._app_argv(app, args)))
        self.launched.append(proc)
        self._save_state()
        deadline = time.monotonic() + timeout
        while True:
            new = [w for w in self._x("windows", lambda x: x.windows()) if w.id not in before]
            mine = [w for w in new if APPS[app][1] in " ".join(w.wm_class).lower()]
            if mine or time.monotonic() > deadline:
                return {"app": app, "pid": proc.pid, "window": mine[-1].to_dict() if mine else None}
            self._require_infra()
            time.sleep(0.01)

    def _a11y_tree(self) -> str:
        """The AT-SPI tree as text, or "no accessibility tree available: <why>" (never raises)."""
        try:
            res = self.exec(
                ["/usr/bin/python3", "-c", A11Y_SCRIPT.read_text()],
                timeout=self.a11y_timeout,
                output_cap=4 << 20,
            )
        except EnvError as exc:
            return f"no accessibility tree available: {exc}"
        if res.timed_out:
            return f"no accessibility tree available: AT-SPI did not answer in {self.a11y_timeout:g} s"
        if res.exit_code == 0 and not res.stdout.strip():
            return "no accessibility tree available: no running application exposes one (xterm does not)"
        if res.exit_code != 0:
            reason = (res.stderr.strip().splitlines() or [f"exit {res.exit_code}"])[-1]
            return f"no accessibility tree available: {reason}"
        return res.stdout

    def pids(self) -> list[int]:
        """Host pids of Xvfb, x11vnc and every process of the sandbox."""
        out: set[int] = set(self.cgroup.pids()) if self.cgroup is not None else set()
        for p in (self.xvfb, self.vnc, self.holder, *self.session, *self.launched):
            if p is None:
                continue
            if p.alive():
                out.add(p.pid)
            if p.init_pid and confine.same_process(p.init_pid, p.init_start):
                out.add(p.init_pid)
                with contextlib.suppress(psutil.Error):
                    out.update(c.pid for c in psutil.Process(p.init_pid).children(recursive=True))
        return sorted(out)

    def endpoints(self) -> dict[str, Any]:
        """The VNC server (loopback only) and the X display."""
        if self.vnc_port is None:
            return {}
        return {"vnc": {"host": "127.0.0.1", "port": self.vnc_port}, "display": f":{self.display}"}

    # --- surviving a host restart ---------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """JSON for `adopt` / `cleanup`: display, ports, uid slot, cgroup, and every process as
        [name, pid, start time, ns init pid, its start time] (start times guard against pid reuse)."""
        conf = self.conf
        return {
            "version": STATE_VERSION,
            "display": self.display,
            "vnc_port": self.vnc_port,
            "slot": self.slot,
            "claimed_slot": self._claimed_slot,
            "uid": conf.uid if conf else None,
            "cgroup": self.cgroup.to_state() if self.cgroup else None,
            "xvfb": self.xvfb.to_state() if self.xvfb else None,
            "x11vnc": self.vnc.to_state() if self.vnc else None,
            "holder": self.holder.to_state() if self.holder else None,
            "session": [p.to_state() for p in self.session],
            "launched": [p.to_state() for p in self.launched],
        }

    def _save_state(self) -> None:
        """Keep `state()` in root/STATE_FILE as processes start: a host killed in the middle of a
        start or reset leaves no state of its own, and `cleanup(root, {})` then reads this file."""
        tmp = self.root / f"{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(self.state()))
        tmp.rename(self.root / STATE_FILE)

    def detach(self) -> None:
        """Close our X connections and forget the sandbox without stopping it (it stays adoptable)."""
        for closeable in (self.x, self.grabber):
            if closeable is not None:
                closeable.close()
        self.x, self.grabber = None, None
        self._stopped = True

    @classmethod
    def adopt(
        cls, *, sandbox_id: str, profile: Profile, root: Path, state: Mapping[str, Any]
    ) -> XDesktopProvider:
        """Reattach to a live sandbox from its `state()`; EnvError if any of its processes is gone."""
        if state.get("version") != STATE_VERSION:
            raise EnvError(f"unknown xdesktop state version {state.get('version')!r}")
        self = cls(sandbox_id=sandbox_id, profile=profile, root=root)
        try:
            self.slot, self._claimed_slot = int(state["slot"]), bool(state.get("claimed_slot"))
            self.display, self.vnc_port = int(state["display"]), int(state["vnc_port"])
            self.xvfb, self.vnc = _Proc.from_state(state["xvfb"]), _Proc.from_state(state["x11vnc"])
            self.holder = _Proc.from_state(state["holder"])
            self.session = [_Proc.from_state(d) for d in state["session"]]
            self.launched = [_Proc.from_state(d) for d in state["launched"]]
            self.cgroup = SandboxCgroup.from_state(state["cgroup"] or {})
            uid = state["uid"]
        except (KeyError, TypeError, ValueError) as exc:
            raise EnvError(f"bad xdesktop state: {exc!r}") from exc
        # What repair restarts (x11vnc, the session bus, openbox) may be dead: the first operation
        # restarts it. Xvfb or the namespace holder gone is a lost sandbox.
        gone = [p.name for p in (self.xvfb, self.holder) if not p.alive()]
        if not confine.same_process(self.holder.init_pid, self.holder.init_start):
            gone.append("netns")
        if gone:
            raise EnvError(f"sandbox {sandbox_id} cannot be adopted: gone: {', '.join(gone)}")
        conf = Confinement(
            root=root, workspace=root / "home", uid=uid, network=profile.network, memory_mb=profile.memory_mb,
            max_pids=profile.max_pids, tmp=root / "tmp", env=SESSION_ENV,
        )  # fmt: skip
        if uid is not None:
            etc = root / "etc"
            binds = ((str(etc / "passwd"), "/etc/passwd", False), (str(etc / "group"), "/etc/group", False))
            conf = replace(conf, binds=binds)
        self.conf = conf
        self.x = XSession(f":{self.display}", self.settle_conf)
        self.grabber = Grabber(f":{self.display}")
        log.info("xdesktop %s adopted (display :%s, vnc %s)", sandbox_id, self.display, self.vnc_port)
        return self

    @classmethod
    def cleanup(cls, *, root: Path, state: Mapping[str, Any]) -> None:
        """Kill what a lost sandbox left (pids checked against start times), drop its cgroup and root.

        With an empty `state` (a host killed while the sandbox was starting) the state the sandbox
        kept in its root is used."""
        # The host's record may predate the processes (it was written while the sandbox was still
        # starting), so the state the sandbox kept in its root is read too, and both are killed.
        states: list[Mapping[str, Any]] = [state]
        with contextlib.suppress(OSError, ValueError):
            states.append(json.loads((root / STATE_FILE).read_text()))
        procs: list[_Proc] = []
        for st in states:
            entries = [st.get(k) for k in ("xvfb", "x11vnc", "holder")]
            entries += [*(st.get("session") or []), *(st.get("launched") or [])]
            for entry in entries:
                with contextlib.suppress(TypeError, ValueError):
                    procs.append(_Proc.from_state(entry))  # type: ignore[arg-type]
        cgroup_state = next((st.get("cgroup") for st in states if st.get("cgroup")), None)
        cgroup = SandboxCgroup.from_state(cgroup_state or {})
        state = next((st for st in reversed(states) if st.get("slot") is not None), state)
        with contextlib.suppress(EnvError):
            if cgroup is not None:
                cgroup.kill_all()
        for p in procs:
            p.kill()
        with contextlib.suppress(EnvError):
            if cgroup is not None:
                cgroup.remove()
        shutil.rmtree(root, ignore_errors=True)
        if state.get("claimed_slot") and state.get("slot") is not None:
            _release_slot(int(state["slot"]), root)
        log.info("xdesktop sandbox in %s cleaned up (%d known processes)", root, len(procs))


def _input(x: XSession, action: A.Action) -> None:
    """Send the input events of one GUI action."""
    if isinstance(action, A.Click):
        x.click(action.x, action.y)
    elif isinstance(action, A.LeftDouble):
        x.click(action.x, action.y, count=2)
    elif isinstance(action, A.RightSingle):
        x.click(action.x, action.y, button="right")
    elif isinstance(action, A.Hover):
        x.move(action.x, action.y)
    elif isinstance(action, A.Drag):
        x.drag(action.x1, action.y1, action.x2, action.y2)
    elif isinstance(action, A.Scroll):
        x.scroll(action.x, action.y, action.direction, action.amount)
    elif isinstance(action, A.Hotkey):
        x.hotkey(action.keys)
    elif isinstance(action, A.Press):
        x.hotkey((action.key,))
    elif isinstance(action, A.KeyDown):
        x.key(action.key, True)
    elif isinstance(action, A.KeyUp):
        x.key(action.key, False)
    elif isinstance(action, A.Type):
        x.type_text(action.content)
    else:
        raise ActionUnsupported(f"{action.kind} is not an action of the X desktop")


def _have_windows(x: XSession, wanted: list[str]) -> bool:
    """Whether a window of each WM_CLASS substring in `wanted` is managed (one window per entry)."""
    classes = [" ".join(w.wm_class).lower() for w in x.windows()]
    for want in wanted:
        match = next((c for c in classes if want in c), None)
        if match is None:
            return False
        classes.remove(match)
    return True


def _accepts(path: Path) -> bool:
    """Whether a unix socket at `path` accepts connections (the file alone exists before listen)."""
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
        except OSError:
            return False
        return True
