"""The X desktop sandbox: Xvfb + openbox + desktop apps, confined by bubblewrap.

Xvfb and x11vnc run as the host user OUTSIDE the sandbox: infrastructure only the host reaches (xaccess).
Inside it (see `sandbox_workers.providers.confine`) run a holder (bwrap: the sandbox's namespaces, its
init as pid 1), then, entering the holder's namespaces, a session D-Bus (AT-SPI needs it), openbox, the
profile's start-up apps, every exec'd command and the MCP servers: one machine (one process table and
mount table: `ps`, `pkill` act on its processes only), one workspace ($HOME = /home/user, host
`root/home`), one /tmp (host `root/tmp`), one network namespace and one cgroup. What OSWorld's Ubuntu has
by name (gnome-terminal, Ctrl+Alt+T, VLC's settings) is in `machine`. Input goes through one persistent Xlib
connection (XTEST), sent once the app it goes to can take it, and a step returns once the screen shows
its effect (display.settle: damage and the app's own main thread); screenshots come from a persistent
mss instance.
Not thread-safe: one worker thread per sandbox (as the pool guarantees).

Profile.options: apps (start-up apps, default ["xterm"]; known: xterm, mousepad, pcmanfm, chromium,
and OSWorld's libreoffice, gimp, vlc, thunderbird where scripts/office-apps.sh installed them),
settle_first_ms / settle_quiet_ms / settle_max_ms / settle_idle_ms / settle_ready_ms (display.settle.Settle:
how a step waits for the app to take its input and for its effect), start_timeout_s (20),
a11y_timeout_s (10), glx (False: Xvfb without GLX saves ~55 MB), max_restarts (MAX_RESTARTS),
locale (LANG of the session, e.g. en_US.UTF-8 as in OSWorld's image; default the host's C locale).

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
Extensions (`call`): launch {app, args?, timeout?}, a11y, windows, mcp_tools (sandbox_workers.mcp).
"""

from __future__ import annotations

import contextlib
import functools
import io
import json
import logging
import re
import shutil
import tarfile
import time
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import psutil

from agent_core import actions as A
from sandbox_workers.base import (
    ActionUnsupported,
    EnvError,
    ExecResult,
    ImageFormat,
    Observation,
    Profile,
    SandboxError,
    register_provider,
)
from sandbox_workers.display.capture import Grabber
from sandbox_workers.display.settle import SettleResult
from sandbox_workers.display.x11 import XSession
from sandbox_workers.mcp.hub import McpHub
from sandbox_workers.providers.confine import disk
from sandbox_workers.providers.confine.bwrap import Confinement
from sandbox_workers.providers.confine.cgroups import SandboxCgroup
from sandbox_workers.providers.confine.entering import members
from sandbox_workers.providers.confine.spawning import collect_output, same_process
from sandbox_workers.providers.confine.workspace import chown_tree, workspace_read, workspace_write
from sandbox_workers.providers.xdesktop import gui_input
from sandbox_workers.providers.xdesktop.lifecycle import DesktopLifecycle
from sandbox_workers.providers.xdesktop.mcp import desktop_hub
from sandbox_workers.providers.xdesktop.parts import (
    APPS,
    STATE_FILE,
    STATE_VERSION,
    _Proc,
    _release_slot,
    session_env,
)

log = logging.getLogger(__name__)

# Apps whose window shows before they take input: the quiet time (s) after which they are ready.
SLOW_TO_READY = {"libreoffice": 0.5, "gimp": 0.5, "thunderbird": 0.5}
A11Y_SCRIPT = Path(__file__).resolve().parent.parent.parent / "a11y_dump.py"
A11Y_XML_SCRIPT = A11Y_SCRIPT.with_name("a11y_xml.py")


def _pointer(x: XSession) -> tuple[int, int]:
    return x.pointer()


_MOBILE = (A.LongPress, A.OpenApp, A.PressHome, A.PressBack, A.McpCall)


@register_provider("xdesktop")
class XDesktopProvider(DesktopLifecycle):
    """One X desktop sandbox (see the module docstring)."""

    supports_snapshot = True
    extensions = frozenset({"launch", "a11y", "windows", "window", "pkill", "mcp_tools"})
    _settled: SettleResult | None = None
    """How the last GUI action's wait ended, for the observation that follows it."""

    # --- stepping -------------------------------------------------------------------------------
    def observe(self, *, fmt: ImageFormat = "png", a11y: bool = False, quality: int = 80) -> Observation:
        """A screenshot now (and the AT-SPI tree as text when asked); right after a GUI action, its
        info says how the wait for the action's effect ended (`settle`: settle.SettleResult). Its
        `pointer` is where the mouse pointer is ([x, y]), for actions a model means "where it is"."""
        self._ready()
        shot = self._grab(fmt, quality)
        info: dict[str, Any] = {"display": f":{self.display}", "pointer": list(self._x("pointer", _pointer))}
        settled, self._settled = self._settled, None
        if settled is not None:
            info["settle"] = settled.to_dict()
        return Observation(screenshot=shot, a11y=self._a11y_tree() if a11y else None, info=info)

    def act(self, action: A.Action) -> None:
        """Perform one action (XTEST input) once the application it goes to can take it, and return
        once the screen shows its effect (display.settle); InputNotDelivered when the application
        could not take it (nothing was sent)."""
        self._settled = None
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

        def run(x: XSession) -> SettleResult:
            target = x.waits.ready(x.waits.target(gui_input.point(action)), typing=isinstance(action, A.Type))
            x.waits.arm(target)
            try:
                gui_input.send(x, action)
                return x.settle(target, self.xvfb.pid if self.xvfb is not None else None)
            finally:
                x.waits.disarm()

        self._settled = self._x(action.kind, run)

    # --- shell and files ------------------------------------------------------------------------
    def exec(
        self, command: str | Sequence[str], *, timeout: float = 30.0, output_cap: int = 65536
    ) -> ExecResult:
        """Run a command in the sandbox (a string through bash) in /home/user, with the desktop's
        environment (DISPLAY=:0: it may open windows), as one more process of the sandbox's machine: it
        sees and may signal the desktop's other processes. Background children outlive it until reset
        (a timeout kills its process group)."""
        self._ready()
        if self.holder is None or not self.holder.alive():
            raise EnvError("the sandbox's session is gone (reset restarts it)")
        t0 = time.monotonic()
        proc = self._spawn(["bash", "-c", command] if isinstance(command, str) else list(command), pipes=True)
        try:
            result = collect_output(proc, timeout=timeout, output_cap=output_cap, t0=t0)
        finally:
            if proc.poll() is None:
                proc.kill_tree()
                proc.wait()
        return result

    def put_file(self, path: str, data: bytes) -> None:
        """Write a file of the workspace (parents created), owned by the sandbox user."""
        if self.conf is None:
            raise EnvError("the sandbox is not started")
        workspace_write(self.conf, path, data)

    def get_file(self, path: str) -> bytes:
        """Read a file of the workspace (never through a symlink)."""
        if self.conf is None:
            raise EnvError("the sandbox is not started")
        return workspace_read(self.conf, path)

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
            chown_tree(conf.workspace, conf.uid)

        self.reset(_after_wipe=unpack)

    def call(self, method: str, params: Mapping[str, Any]) -> Any:
        """launch {app, args?, timeout?, title?} → {app, pid, window}: start an app, wait for its window
        (with `title`, for one whose title contains it: the document it opens has loaded);
        a11y → {tree}; windows → {windows: [{id, class, title, x, y, width, height}]}."""
        if method == "launch":
            args = [str(a) for a in params.get("args", [])]
            title = params.get("title")
            return self._launch(
                str(params.get("app", "")),
                args,
                float(params.get("timeout", self.start_timeout)),
                title=str(title) if title else None,
            )
        if method == "a11y":
            self._ready()
            return {"tree": self._a11y_tree()}
        if method == "a11y_xml":  # OSWorld's XML form ({renames}: application names as its image has them)
            self._ready()
            renames = {str(k): str(v) for k, v in dict(params.get("renames") or {}).items()}
            res = self.exec(
                ["/usr/bin/python3", "-c", A11Y_XML_SCRIPT.read_text(), json.dumps(renames)],
                timeout=max(self.a11y_timeout, 30.0), output_cap=64 << 20,
            )  # fmt: skip
            ok = res.exit_code == 0 and not res.timed_out
            return {"tree": res.stdout if ok else None, "reason": "" if ok else res.stderr.strip()[-300:]}
        if method == "windows":
            self._ready()
            return {"windows": [w.to_dict() for w in self._x("windows", lambda x: x.windows())]}
        if method == "window":
            return self._window(params)
        if method == "pkill":
            return self._pkill(params)
        if method == "mcp_tools":
            self._ready()
            return self._mcp().tools_call(params)
        return super().call(method, params)

    def mcp_call(
        self, *, server: str, tool: str, arguments: Mapping[str, Any], timeout: float | None = None
    ) -> dict[str, Any]:
        """A tool of one of the sandbox's MCP servers (started in it on first use: sandbox_workers.mcp)."""
        self._ready()
        return self._mcp().call(server, tool, arguments, timeout=timeout)

    def _mcp(self) -> McpHub:
        if self.mcp_hub is None:
            self.mcp_hub = desktop_hub(self)
        return self.mcp_hub

    def _pkill(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """pkill {names, wait_s?} → {signalled, left}: SIGTERM to this sandbox's processes whose name
        one of `names` matches (a regular expression searched in it, as pkill does), and a wait (wait_s,
        10 s by default) until they are gone: an app quit this way has written its state (Chrome its
        profile), as after OSWorld's `pkill chrome`. A `pkill` run inside sees the same processes (the
        sandbox is one machine) but does not wait, and a task's next step may need the app gone."""
        names = params.get("names")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) and n for n in names):
            raise SandboxError("pkill: names must be a non-empty list of process names")
        try:
            patterns = [re.compile(n) for n in names]
        except re.error as exc:
            raise SandboxError(f"pkill: a name is not a regular expression: {exc}") from None
        wait_s = min(max(float(params.get("wait_s", 10.0)), 0.0), 60.0)
        self._ready()
        found: dict[int, psutil.Process] = {}
        assert self.holder is not None and self.holder.init_pid is not None
        # The whole machine's process table: what `enter` started hangs from nsenter on the host, not
        # from the holder's init (scanning the init's tree alone found no app at all).
        for pid in members(self.holder.init_pid):
            with contextlib.suppress(psutil.Error):
                member = psutil.Process(pid)
                if pid != self.holder.init_pid and any(p.search(member.name()) for p in patterns):
                    found[member.pid] = member
        for proc in found.values():
            with contextlib.suppress(psutil.Error):
                proc.terminate()
        _, left = psutil.wait_procs(list(found.values()), timeout=wait_s)
        return {"signalled": len(found), "left": len(left)}

    def _window(self, params: Mapping[str, Any]) -> dict[str, Any]:
        """window {action: activate|close, name, strict?, by_class?} → {window: the one acted on, or
        None}: the newest window whose title (WM_CLASS with by_class) contains `name`, case-insensitively,
        or equals it with strict: `wmctrl -a` / `-c` (with -F, -x), as OSWorld's setup uses them."""
        action, name = params.get("action"), params.get("name")
        if action not in ("activate", "close") or not isinstance(name, str) or not name:
            raise SandboxError("window: action must be activate or close and name a non-empty string")
        strict, by_class = bool(params.get("strict", False)), bool(params.get("by_class", False))
        self._ready()

        def matches(w: Any) -> bool:
            values = list(w.wm_class) if by_class else [w.title]
            if strict:
                return name in values
            return any(name.lower() in v.lower() for v in values)

        found = [w for w in self._x("windows", lambda x: x.windows()) if matches(w)]
        if not found:
            return {"window": None}
        target = found[-1]
        message = "_NET_ACTIVE_WINDOW" if action == "activate" else "_NET_CLOSE_WINDOW"
        data = [2, 0, 0] if action == "activate" else [0, 2]  # source: a pager (EWMH), time: now

        def send(x: XSession) -> None:
            x.arm()
            x.ewmh_message(target.id, message, data)
            x.settle()

        self._x("window", send)
        return {"window": target.to_dict()}

    HANDOFF_S = 2.0
    """How long a launch whose program exited at once waits for a new window before it takes the one its
    running instance already has."""

    def _launch(self, app: str, args: list[str], timeout: float, title: str | None = None) -> dict[str, Any]:
        if app not in APPS:
            raise SandboxError(f"unknown app {app!r}; valid: {', '.join(sorted(APPS))}")
        self._ready()
        before = {w.id for w in self._x("windows", lambda x: x.windows())}
        proc = _Proc.of(app, self._spawn_app(app, args))
        self.launched.append(proc)
        self._save_state()
        deadline = time.monotonic() + timeout
        exited_at: float | None = None
        while True:
            exited = not proc.alive()  # read before the windows: a hand-off's window is then listed
            # An app's splash screen (GIMP's, while it loads for seconds) is not its window.
            wins = self._x("windows", lambda x: [w for w in x.windows() if not x.is_splash(w.id)])
            ours = [w for w in wins if APPS[app][1] in " ".join(w.wm_class).lower()]
            if title is not None:
                ours = [w for w in ours if title.lower() in w.title.lower()]
            mine = [w for w in ours if w.id not in before]
            if exited and exited_at is None:
                exited_at = time.monotonic()
            if not mine and ours and exited_at is not None and time.monotonic() - exited_at > self.HANDOFF_S:
                # The program handed its arguments to its instance already running and exited (Chromium
                # opens a URL as a tab of its window): no new window comes. Its instance may still open
                # one (LibreOffice opens a document in a new window), so this waits HANDOFF_S first.
                mine = ours
            if mine or time.monotonic() > deadline:
                if mine and app in SLOW_TO_READY:
                    # Its window comes before its content: keys sent while a document still loads
                    # go astray (seen with LibreOffice). Ready once nothing was drawn and the app's
                    # main thread did not run for a moment: no drawing alone is no proof, a busy app
                    # under load may draw nothing for seconds.
                    quiet, left = SLOW_TO_READY[app], max(0.5, deadline - time.monotonic())
                    ready = functools.partial(gui_input.ready_after_launch, int(mine[-1].id), quiet, left)
                    self._x("launch", ready)
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
        if self.mcp_hub is not None:
            out.update(self.mcp_hub.pids())
        for p in (self.xvfb, self.vnc, self.holder, *self.session, *self.launched):
            if p is None:
                continue
            if p.alive():
                out.add(p.pid)
            if p.init_pid and same_process(p.init_pid, p.init_start):
                out.add(p.init_pid)
                out.update(members(p.init_pid))
        return sorted(out)

    # --- surviving a host restart (state() and _save_state() are the plumbing's) ----------------
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
            self.display = int(state["display"])
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
        if not same_process(self.holder.init_pid, self.holder.init_start):
            gone.append("netns")
        if gone:
            raise EnvError(f"sandbox {sandbox_id} cannot be adopted: gone: {', '.join(gone)}")
        conf = Confinement(
            root=root, workspace=root / "home", uid=uid, network=profile.network, memory_mb=profile.memory_mb,
            max_pids=profile.max_pids, tmp=root / "tmp", env=session_env(profile.options),
        )  # fmt: skip
        if uid is not None:
            etc = root / "etc"
            binds = ((str(etc / "passwd"), "/etc/passwd", False), (str(etc / "group"), "/etc/group", False))
            conf = replace(conf, binds=binds)
        self.conf = self._with_display(conf)
        self.x = XSession(f":{self.display}", self.settle_conf)
        self.grabber = Grabber(f":{self.display}")
        log.info("xdesktop %s adopted (display :%s)", sandbox_id, self.display)
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
        disk.release(root)  # after the kills: nothing holds its volume now
        shutil.rmtree(root, ignore_errors=True)
        if state.get("claimed_slot") and state.get("slot") is not None:
            _release_slot(int(state["slot"]), root)
        log.info("xdesktop sandbox in %s cleaned up (%d known processes)", root, len(procs))
