"""The X desktop's plumbing: its state file, starting processes on the host and in the sandbox, the X
and capture connections (reconnected when something in the sandbox cuts them), and killing."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from sandbox_workers.base import (
    EnvError,
    ImageFormat,
    OperationUnsupported,
    Profile,
    Provider,
    SandboxBrokenByAgent,
    SandboxError,
    SandboxPathError,
    Screenshot,
)
from sandbox_workers.devtools import DevToolsPipe
from sandbox_workers.display.capture import Grabber
from sandbox_workers.display.x11 import Settle, XSession, server_alive
from sandbox_workers.display.xcast import XScreencast
from sandbox_workers.mcp.hub import McpHub
from sandbox_workers.providers.confine.bwrap import SANDBOX_HOME, Confinement
from sandbox_workers.providers.confine.cgroups import SandboxCgroup
from sandbox_workers.providers.confine.entering import enter
from sandbox_workers.providers.confine.spawning import SandboxProcess, collect_output
from sandbox_workers.providers.confine.workspace import chown_tree, workspace_read, workspace_write
from sandbox_workers.providers.xdesktop.machine import VLCRC, vlc_config
from sandbox_workers.providers.xdesktop.parts import (
    APPS,
    MAX_RESTARTS,
    RUN_DIR,
    SESSION_PARTS,
    STATE_FILE,
    STATE_VERSION,
    _Proc,
    _release_slot,
)

log = logging.getLogger(__name__)
T = TypeVar("T")


class DesktopPlumbing(Provider):
    """The state and helpers the desktop's lifecycle and operations share."""

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
            float(opts.get("settle_idle_ms", 3)),
            float(opts.get("settle_ready_ms", 5000)),
        )
        self.start_timeout = float(opts.get("start_timeout_s", 20))
        self.a11y_timeout = float(opts.get("a11y_timeout_s", 10))
        self.max_restarts = int(opts.get("max_restarts", MAX_RESTARTS))
        self._claimed_slot = False
        self.conf: Confinement | None = None
        self.cgroup: SandboxCgroup | None = None
        self.display: int | None = None
        self.xvfb: _Proc | None = None
        self.vnc: _Proc | None = None
        self.holder: _Proc | None = None
        self.session: list[_Proc] = []
        """dbus, openbox and the start-up apps: the health check watches them."""
        self.launched: list[_Proc] = []
        self.devtools_pipes: list[DevToolsPipe] = []
        """Apps started by `launch` and commands left running by exec: killed on reset."""
        self.x: XSession | None = None
        self.grabber: Grabber | None = None
        self.cast: XScreencast | None = None
        """The live screencast (display.xcast) while viewers watch: its own thread and X connections."""
        self._cast_args: tuple[Callable[[bytes], None], float, Callable[[str], None] | None] | None = None
        """What the screencast was started with: a reset that restarts the display starts it again."""
        self.mcp_hub: McpHub | None = None
        """The sandbox's MCP servers (sandbox_workers.mcp), made on first use; stopped with its processes."""
        self._stopped = False
        self._restarts: dict[str, int] = {}
        """Part → restarts since the last reset (see repair)."""
        self._resetting = False
        self._resets = 0
        """Counts resets begun: a health check that saw it change looked at a reset's kills."""
        """Set while reset kills and restarts the session: health() then reports no dead process."""

    @property
    def private_dir(self) -> Path:
        """The host's own folder of the sandbox (mode 0700): x11vnc's socket, Xvfb's cookie while it
        starts. No sandbox uid, nor any other user, can reach into it."""
        return self.root / "host"

    @property
    def vnc_socket(self) -> Path:
        """x11vnc's unix socket, the desktop's only VNC listener (no TCP port): only the host's user
        can connect, and the host's relay (ticket-checked by the web app) is the way in for people."""
        return self.private_dir / "vnc.sock"

    def _make_private_dir(self) -> None:
        self.private_dir.mkdir(parents=True, exist_ok=True)
        os.chown(self.private_dir, os.geteuid(), os.getegid())
        self.private_dir.chmod(0o700)  # also when it existed with another mode

    def _host_popen(
        self, name: str, argv: list[str], pass_fds: tuple[int, ...] = (), cwd: Path | None = None
    ) -> subprocess.Popen[bytes]:
        with open(self.root / f"{name}.log", "ab") as logf:
            try:
                return subprocess.Popen(
                    argv, stdin=subprocess.DEVNULL, stdout=logf, stderr=logf, pass_fds=pass_fds, cwd=cwd,
                    start_new_session=True,  # a restarted host adopts it; no signal of ours reaches it
                )  # fmt: skip
            except OSError as exc:
                raise EnvError(f"cannot start {argv[0]}: {exc}") from exc

    def _spawn(
        self, argv: Sequence[str], *, pipes: bool = False, pass_fds: tuple[int, ...] = ()
    ) -> SandboxProcess:
        """Start a process in the sandbox's session: inside its holder's namespaces (one process table,
        one mount table, as one machine), its cgroup, the desktop's environment."""
        assert self.conf is not None and self.holder is not None and self.holder.init_pid is not None
        with open(self.root / "session.log", "ab") as logf:
            return enter(
                self.conf, self.holder.init_pid, argv, cgroup=self.cgroup,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE if pipes else logf, stderr=subprocess.PIPE if pipes else logf,
                pass_fds=pass_fds,
            )  # fmt: skip

    def _spawn_app(self, app: str, args: Sequence[str]) -> SandboxProcess:
        """Start one of APPS; Chromium with its DevTools on a pipe whose other end the host keeps
        (sandbox_workers.devtools), so the host, and only the host, can read the browser's live state."""
        argv = self._app_argv(app, args)
        if app != "chromium":
            return self._spawn(argv)
        pipe = DevToolsPipe()
        try:
            proc = self._spawn(pipe.child_argv(argv), pass_fds=pipe.child_fds)
        except BaseException:
            pipe.close()
            raise
        pipe.started(proc)
        self.devtools_pipes = [p for p in self.devtools_pipes if p.alive] + [pipe]
        return proc

    def devtools(self) -> DevToolsPipe:
        """The DevTools pipe of the desktop's running Chromium (the last one started that still runs: a
        second `chromium URL` hands its URL to the first and exits, its pipe closing)."""
        for pipe in reversed(self.devtools_pipes):
            if pipe.alive:
                return pipe
        raise OperationUnsupported(
            "no Chromium that this sandbox host started is running (one started by the agent, or before a"
            " host restart, has no DevTools the host can reach)"
        )

    def _close_devtools(self) -> None:
        for pipe in self.devtools_pipes:
            pipe.close()
        self.devtools_pipes = []

    def x_socket(self) -> tuple[str, str, bool]:
        """The bind of our X server's socket into the sandbox: as display :0 there, except with the network
        profile. That sandbox shares the host's network namespace, where an X client tries the abstract
        socket of its display first (@/tmp/.X11-unix/X0: another sandbox's server), so there the display
        keeps its host number (and DISPLAY says it: `_with_display`)."""
        inside = self.display if self.profile.network else 0
        return (f"/tmp/.X11-unix/X{self.display}", f"/tmp/.X11-unix/X{inside}", True)  # noqa: S108

    def _with_display(self, conf: Confinement) -> Confinement:
        """`conf` with the DISPLAY `x_socket` binds (only the network profile's differs from :0)."""
        if not self.profile.network or self.display is None:
            return conf
        return replace(conf, env={**conf.env, "DISPLAY": f":{self.display}"})

    def _bus_path(self) -> Path:
        """The session bus socket on the host."""
        assert self.conf is not None and self.conf.tmp is not None
        return self.conf.tmp / Path(RUN_DIR).name / "bus"

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
        if app == "libreoffice":
            self._libreoffice_prefs()
        if app == "vlc":
            self._vlc_prefs()
        program = APPS[app][0][0]
        if shutil.which(program) is None:
            raise EnvError(
                f"{app} is not installed on this sandbox host (OSWorld's apps: scripts/setup.sh office)"
            )
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
            workspace_write(self.conf, ".config/chromium/Default/Preferences", json.dumps(prefs).encode())
        if not (ws / "Downloads").exists():
            (ws / "Downloads").mkdir()
            chown_tree(ws / "Downloads", self.conf.uid)

    def _libreoffice_prefs(self) -> None:
        """LibreOffice as OSWorld's image has it: no first-start wizard or tip of the day, and saving
        a .xlsx/.docx/.pptx keeps its format without asking (OSWorld's tasks save with ctrl+s)."""
        assert self.conf is not None
        path = ".config/libreoffice/4/user/registrymodifications.xcu"
        if (self.conf.workspace / path).exists():
            return
        items = [  # (path, property, type, value)
            ("/org.openoffice.Setup/Office", "ooSetupInstCompleted", "boolean", "true"),
            ("/org.openoffice.Office.Common/Misc", "FirstRun", "boolean", "false"),
            ("/org.openoffice.Office.Common/Misc", "ShowTipOfTheDay", "boolean", "false"),
            ("/org.openoffice.Office.Common/Save/Document", "WarnAlienFormat", "boolean", "false"),
            ("/org.openoffice.Office.Common/Save/Document", "AutoSave", "boolean", "false"),
            ("/org.openoffice.Office.Recovery/RecoveryInfo", "Enabled", "boolean", "false"),
        ]
        body = "".join(
            f'<item oor:path="{p}"><prop oor:name="{n}" oor:op="fuse"><value>{v}</value></prop></item>\n'
            for p, n, _, v in items
        )
        xml = (
            '<?xml version="1.0" encoding="UTF-8"?>\n'
            '<oor:items xmlns:oor="http://openoffice.org/2001/registry" '
            'xmlns:xs="http://www.w3.org/2001/XMLSchema" xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance">\n'
            f"{body}</oor:items>\n"
        )
        workspace_write(self.conf, path, xml.encode())

    def _vlc_prefs(self) -> None:
        """VLC as OSWorld's image has it (machine.VLC_SETTINGS): VLC writes its full default vlcrc in the
        sandbox, as its user (`--reset-config`), and the host sets those options in it."""
        assert self.conf is not None
        if (self.conf.workspace / VLCRC).exists() or shutil.which("vlc") is None:
            return
        proc = self._spawn(["vlc", "-I", "dummy", "--reset-config", "vlc://quit"], pipes=True)
        try:
            out = collect_output(proc, timeout=30, output_cap=4096, t0=time.monotonic())
        finally:
            if proc.poll() is None:
                proc.kill_tree()
            proc.wait()
        try:
            text = vlc_config(workspace_read(self.conf, VLCRC).decode("utf-8", "replace"))
        except (OSError, ValueError, SandboxPathError) as exc:
            raise EnvError(f"VLC did not write its configuration ({out.exit_code}): {exc}") from exc
        workspace_write(self.conf, VLCRC, text.encode())

    def _release_slot(self) -> None:
        if self._claimed_slot:
            _release_slot(self.slot, self.root)
            self._claimed_slot = False

    def _log_size(self, name: str) -> int:
        try:
            return (self.root / name).stat().st_size
        except OSError:
            return 0

    def _log_since(self, name: str, offset: int) -> bytes:
        """What a log got since it was `offset` bytes long (a process started then wrote it)."""
        try:
            with open(self.root / name, "rb") as f:
                f.seek(offset)
                return f.read(64 * 1024)
        except OSError:
            return b""

    def _log_tail(self, name: str, n: int = 600) -> str:
        try:
            data = (self.root / name).read_bytes()[-n:]
        except OSError:
            return "(no log)"
        return data.decode("utf-8", "replace").strip() or "(empty log)"

    def _require_infra(self) -> None:
        """EnvError now if Xvfb is dead (rather than hanging on it)."""
        if self._stopped or self.xvfb is None or self.vnc is None:
            raise EnvError("the sandbox is not running")
        if not self.xvfb.alive():
            raise EnvError(f"{self.xvfb.why_dead()}: the desktop is broken (reset restarts it)")

    def _dead_parts(self) -> list[str]:
        """The parts `repair` restarts that are dead now (cheap: a waitpid or /proc read each)."""
        dead = ["x11vnc"] if self.vnc is not None and not self.vnc.alive() else []
        return dead + [p.name for p in self.session if p.name in SESSION_PARTS and not p.alive()]

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

    def endpoints(self) -> dict[str, Any]:
        """The VNC server (a unix socket only the host's user reaches), the X display, the screen's size."""
        if self.vnc is None:
            return {}
        screen = {"width": self.profile.width, "height": self.profile.height}
        return {
            "vnc": {"socket": str(self.vnc_socket)},
            "display": f":{self.display}",
            "screen": screen,
        }

    def start_screencast(
        self,
        on_frame: Callable[[bytes], None],
        *,
        max_fps: float = 10.0,
        on_end: Callable[[str], None] | None = None,
    ) -> None:
        """JPEG frames (q60) when the screen changes (XDamage), at most `max_fps`, on a thread of their
        own; `on_end(reason)` if the display fails under it (see display.xcast)."""
        self._require_infra()
        self.stop_screencast()
        self.cast = XScreencast(
            f":{self.display}", on_frame, max_fps=max_fps, on_end=on_end, name=self.sandbox_id
        )
        self._cast_args = (on_frame, max_fps, on_end)

    def stop_screencast(self) -> None:
        """Stop the screencast; safe when none runs."""
        cast, self.cast, self._cast_args = self.cast, None, None
        if cast is not None:
            cast.stop()

    def _kill_sandbox(self) -> None:
        """Kill every process inside the sandbox (not Xvfb, x11vnc)."""
        if self.mcp_hub is not None:
            self.mcp_hub.close()  # its sessions end with their servers; the next use starts them again
        if self.cgroup is not None:
            self.cgroup.kill_all()
        for p in (*self.launched, *self.session, *([self.holder] if self.holder else [])):
            p.kill()
        self.holder, self.session, self.launched = None, [], []
        self._close_devtools()

    def _kill_infra(self) -> None:
        self.stop_screencast()
        for closeable in (self.x, self.grabber):
            if closeable is not None:
                closeable.close()
        xvfb = self.xvfb
        if xvfb is not None and xvfb.popen is not None and xvfb.popen.poll() is None:
            # Asked first: a terminated Xvfb removes its socket and lock file, a killed one leaves them.
            xvfb.popen.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                xvfb.popen.wait(0.5)
        for p in (self.vnc, self.xvfb):
            if p is not None:
                p.kill()
        self.x, self.grabber, self.vnc, self.xvfb = None, None, None, None

    # --- the state kept for a host restart ------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """JSON for `adopt` / `cleanup`: display, ports, uid slot, cgroup, and every process as
        [name, pid, start time, ns init pid, its start time] (start times guard against pid reuse)."""
        conf = self.conf
        return {
            "version": STATE_VERSION,
            "display": self.display,
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
