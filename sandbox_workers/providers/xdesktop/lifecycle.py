"""Starting, repairing, resetting and stopping an X desktop sandbox (see the provider's docstring)."""

from __future__ import annotations

import contextlib
import logging
import os
import select
import shutil
import socket
import time
from collections.abc import Callable
from pathlib import Path

from sandbox_workers.base import EnvError, Health
from sandbox_workers.display.capture import Grabber
from sandbox_workers.display.x11 import XSession
from sandbox_workers.providers.confine import disk
from sandbox_workers.providers.confine.bwrap import confinement_for, with_env
from sandbox_workers.providers.confine.cgroups import SandboxCgroup
from sandbox_workers.providers.confine.entering import start_holder
from sandbox_workers.providers.confine.spawning import process_start_time
from sandbox_workers.providers.confine.workspace import chown_tree, trim_logs, wipe_dir, workspace_write
from sandbox_workers.providers.xdesktop.machine import DCONF_USER_DB, dconf_user_db, write_machine_files
from sandbox_workers.providers.xdesktop.mcp import server_binds
from sandbox_workers.providers.xdesktop.parts import (
    _SESSION_ARGV,
    APPS,
    RUN_DIR,
    SESSION_PARTS,
    _claim_slot,
    _Proc,
    session_env,
)
from sandbox_workers.providers.xdesktop.plumbing import DesktopPlumbing
from sandbox_workers.providers.xdesktop.xaccess import grant_local_users, write_cookie_file

log = logging.getLogger(__name__)


class DesktopLifecycle(disk.DiskVolumes, DesktopPlumbing):
    """Xvfb, x11vnc and the session: started, kept alive, reset and stopped."""

    # --- lifecycle ------------------------------------------------------------------------------
    def start(self) -> None:
        """Xvfb, x11vnc and the sandbox's session; EnvError (with all of it stopped) if it fails."""
        t0 = time.monotonic()
        try:
            # No slot from the pool (a test, a script), and a sandbox uid needs one: claim a free one.
            if "slot" not in self.__dict__ and os.geteuid() == 0:
                self.slot, self._claimed_slot = _claim_slot(self.root), True
            disk.attach(self.root, self.profile.disk_mb)  # first: everything the sandbox keeps is on it
            self.conf = with_env(
                confinement_for(self.profile, self.root, slot=self.slot, shared_tmp=True),
                session_env(self.profile.options),
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
            "xdesktop %s started in %.0f ms (setup %.0f, Xvfb %.0f, session %.0f, vnc %.0f) on :%s",
            self.sandbox_id, (time.monotonic() - t0) * 1000, (t1 - t0) * 1000, (t2 - t1) * 1000,
            (t3 - t2) * 1000, (time.monotonic() - t3) * 1000, self.display,
        )  # fmt: skip

    def _start_x(self) -> None:
        """Xvfb (it picks a free display and tells us on -displayfd) open to the host's user and the
        sandbox's uid only (see xaccess), x11vnc (not waited for), and our persistent X connection and
        grabber."""
        p = self.profile
        glx = [] if p.options.get("glx") else ["-extension", "GLX"]  # Mesa in Xvfb: ~55 MB RSS
        # -noreset also keeps the access list: a server reset (its last client gone) would drop it.
        args = ["Xvfb", "-screen", "0", f"{p.width}x{p.height}x24", "-nolisten", "tcp", "-noreset", *glx]
        self._make_private_dir()
        auth = self.private_dir / "xvfb.auth"
        cookie = write_cookie_file(auth)
        log_start = self._log_size("xvfb.log")
        r, w = os.pipe()
        try:
            popen = self._host_popen("xvfb", [*args, "-auth", str(auth), "-displayfd", str(w)], pass_fds=(w,))
        finally:
            os.close(w)
        self.xvfb = _Proc("xvfb", popen.pid, process_start_time(popen.pid), popen)
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
        uids = {os.geteuid()} | (
            {self.conf.uid} if self.conf is not None and self.conf.uid is not None else set()
        )
        # Xvfb reads its cookie file at the first connection (this one) and again whenever the file
        # changes; a server that found none would let every local user in ("local host access"), so
        # the file stays (private) for the server's life, and one it could not read fails the start.
        grant_local_users(self.display, cookie, uids)
        if b"authorization file" in self._log_since("xvfb.log", log_start):
            raise EnvError(f"Xvfb could not read its cookie: {self._log_tail('xvfb.log')}")
        if self.conf is not None:
            self.conf = self._with_display(self.conf)
        self._start_vnc()
        self.x = XSession(f":{self.display}", self.settle_conf)
        self.grabber = Grabber(f":{self.display}")

    def _start_vnc(self) -> None:
        """x11vnc on its unix socket and no TCP port (not waited for: see _wait_vnc)."""
        self.vnc_socket.unlink(missing_ok=True)  # a killed x11vnc leaves it, and a bind would fail
        # The socket is named relative to x11vnc's working folder: a sandbox under a deep var folder
        # (or a test's) has a path longer than a socket address holds (107 bytes).
        vnc = ["x11vnc", "-display", f":{self.display}", "-unixsock", self.vnc_socket.name]
        no_tcp = ["-rfbport", "0", "-rfbportv6", "-1", "-no6", "-noipv6"]  # -rfbport 0 alone keeps [::]:5900
        # -noshm: x11vnc's SysV segments outlive it when it is SIGKILLed (42 per instance, until the
        # host's segment table is full); polling with plain GetImage costs only while a viewer watches.
        # -nopw: the socket's folder is the lock (only the host's user enters it).
        flags = ["-shared", "-forever", "-nopw", "-norc", "-noshm", "-quiet"]
        popen = self._host_popen("x11vnc", [*vnc, *no_tcp, *flags], cwd=self.private_dir)
        self.vnc = _Proc("x11vnc", popen.pid, process_start_time(popen.pid), popen)
        self._save_state()

    def _wait_vnc(self) -> None:
        """Until x11vnc listens on its socket (seen in /proc: connecting would start a VNC session)."""
        assert self.vnc is not None
        deadline = time.monotonic() + self.start_timeout
        while True:
            if not self.vnc.alive():
                raise EnvError(f"x11vnc died: {self._log_tail('x11vnc.log')}")
            if _unix_listening(self.vnc.pid):
                return
            if time.monotonic() > deadline:
                raise EnvError(f"x11vnc did not listen on {self.vnc_socket} in time")
            time.sleep(0.005)

    def _start_session(self) -> None:
        """Namespace holder, D-Bus, openbox, then the start-up apps; wait for their windows."""
        assert self.conf is not None and self.conf.tmp is not None
        run = self.conf.tmp / Path(RUN_DIR).name
        (run / "runtime").mkdir(parents=True, exist_ok=True)
        (run / "runtime").chmod(0o700)
        chown_tree(run, self.conf.uid)
        # The X socket is bound once, into the holder's mount namespace: every process entering it sees
        # it (a reset starts a new X server and a new holder); so are the machine's own programs.
        binds = (self.x_socket(), *write_machine_files(self.root / "machine"), *server_binds())
        settings = dconf_user_db(self.root / "machine")
        if settings is not None and not (self.conf.workspace / DCONF_USER_DB).exists():
            workspace_write(self.conf, DCONF_USER_DB, settings)
        holder, _ = start_holder(self.conf, cgroup=self.cgroup, extra_binds=binds, timeout=self.start_timeout)
        self.holder = _Proc.of("netns", holder)
        self._save_state()
        self.session = [_Proc.of(part, self._spawn(_SESSION_ARGV[part])) for part in SESSION_PARTS]
        self._save_state()
        deadline = time.monotonic() + self.start_timeout
        self._wait(lambda _x: _accepts(run / "bus"), deadline, "the session D-Bus", self.session)
        # Apps start once openbox manages the screen: a window mapped while openbox is still taking
        # over can be lost, and xterm, say, then waits for its map forever. Openbox claims the screen
        # (_NET_SUPPORTING_WM_CHECK) before it has loaded its theme and serves requests; an xterm
        # started in between waited out Xt's 5 s wmTimeout 8 times in 10 on a loaded machine. Its
        # _OB_THEME property, set last, says it is through.
        self._wait(_openbox_ready, deadline, "openbox", self.session)
        names = [p.name for p in self.session]
        for app in self.apps:
            name = app if app not in names else f"{app}#{names.count(app) + 1}"
            names.append(app)
            self.session.append(_Proc.of(name, self._spawn_app(app, [])))
            self._save_state()
        wanted = [APPS[a][1] for a in self.apps]
        self._wait(lambda x: _have_windows(x, wanted), deadline, "the apps' windows", self.session)

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

    def _restart_vnc(self) -> None:
        """x11vnc again, on the same socket (the live view's endpoint stays)."""
        assert self.vnc is not None
        self.vnc.kill()
        self._start_vnc()
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
        quota = disk.known_support()
        if self.profile.disk_mb and quota is not None and not quota.ok:
            notes.append(f"no disk quota on this host: {quota.reason}")
        alive.update({f"launched:{p.name}": p.alive() for p in self.launched})
        return Health(ok=not fatal, detail="; ".join(notes), processes=alive, repair=repair)

    def _ready(self) -> None:
        """Before an operation: EnvError if Xvfb is dead; first restarts what `repair` restarts."""
        self._require_infra()
        if self._dead_parts():
            self.repair()

    def reset(self, _after_wipe: Callable[[], None] | None = None) -> None:
        """As freshly started: kill the sandbox's processes, wipe the workspace and /tmp, start a new
        Xvfb and x11vnc, then openbox and the start-up apps.

        The X server is replaced because what a previous holder did to it outlives every client they
        ran: the root window's background and properties, the keyboard map and lock keys, retained
        (RetainPermanent) windows, its access list, x11vnc's clipboard, VNC viewers still connected. A
        restore (`_after_wipe`, the holder's own under their lease) keeps the display: Xvfb and x11vnc
        are restarted there only if dead."""
        if self.conf is None or self._stopped:
            raise EnvError("the sandbox is not started")
        self._resetting = True
        self._resets += 1
        try:
            self._reset(_after_wipe, keep_display=_after_wipe is not None)
        finally:
            self._resetting = False

    def _reset(self, _after_wipe: Callable[[], None] | None, *, keep_display: bool) -> None:
        assert self.conf is not None
        t0 = time.monotonic()
        self._restarts.clear()
        infra_ok = self.xvfb is not None and self.xvfb.alive() and self.x is not None
        fresh_x = not (keep_display and infra_ok)
        if not fresh_x:
            with contextlib.suppress(EnvError):
                self._x("release", lambda x: x.release_all())
            # AT-SPI clients find their bus through this root-window property; the killed session's
            # bus is gone, and a stale address would leave every new app without accessibility.
            with contextlib.suppress(EnvError):
                self._x("atspi", lambda x: (x.root.delete_property(x.atom("AT_SPI_BUS")), x.d.sync()))
            # The killed openbox's: the new one's readiness is seen by it (see _start_session).
            with contextlib.suppress(EnvError):
                self._x("wm", lambda x: (x.root.delete_property(x.atom("_OB_THEME")), x.d.sync()))
        self._kill_sandbox()
        cast = self._cast_args if self.cast is not None and self.cast.running else None
        if fresh_x:
            self._kill_infra()
        t1 = time.monotonic()
        wipe_dir(self.conf.workspace)
        if self.conf.tmp is not None:
            wipe_dir(self.conf.tmp)
        # What the sandbox's processes wrote to their output is on its disk too: a full one must not
        # reach the next lease.
        trim_logs(self.root)
        if _after_wipe is not None:
            _after_wipe()
        t2 = time.monotonic()
        if fresh_x:
            self._start_x()
            if cast is not None:  # its viewers go on watching the new display
                on_frame, max_fps, on_end = cast
                self.start_screencast(on_frame, max_fps=max_fps, on_end=on_end)
        self._start_session()
        vnc_dead = self.vnc is not None and not self.vnc.alive()
        if fresh_x:
            self._wait_vnc()
        elif vnc_dead:
            self._restart_vnc()
        log.info(
            "xdesktop %s reset in %.0f ms (kill %.0f, wipe %.0f, start %.0f)%s",
            self.sandbox_id, (time.monotonic() - t0) * 1000, (t1 - t0) * 1000, (t2 - t1) * 1000,
            (time.monotonic() - t2) * 1000,
            ", on a new X server" if fresh_x else ", x11vnc restarted" if vnc_dead else "",
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
            disk.release(self.root)
            shutil.rmtree(self.root, ignore_errors=True)
            self._release_slot()
        log.info(
            "xdesktop %s stopped in %.0f ms%s", self.sandbox_id, (time.monotonic() - t0) * 1000,
            f" (problems: {'; '.join(problems)})" if problems else "",
        )  # fmt: skip


def _openbox_ready(x: XSession) -> bool:
    """Whether openbox manages the screen and has finished starting (its _OB_THEME is set)."""
    return x.wm_running() and x.root.get_full_property(x.atom("_OB_THEME"), 0) is not None


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
    """Whether a unix socket at `path` accepts connections (the file alone exists before listen).

    It is reached through its folder's descriptor (/proc/self/fd/N/name): a socket's address holds 107
    bytes, and a sandbox's folder under a deep var folder (or a test's) is longer than that, where a
    connect to the path itself failed every time and the desktop never started."""
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return False
    try:
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(f"/proc/self/fd/{folder}/{path.name}")
            except OSError:
                return False
            return True
    finally:
        os.close(folder)


def _unix_listening(pid: int) -> bool:
    """Whether process `pid` has a listening unix socket (its descriptors' inodes in /proc/net/unix
    with __SO_ACCEPTCON set); False if it is gone."""
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        with open("/proc/net/unix") as table:
            next(table)  # the header
            for line in table:
                fields = line.split()
                if len(fields) >= 7 and int(fields[3], 16) & 0x10000 and fields[6] in inodes:
                    return True
    except OSError:
        return False
    return False
