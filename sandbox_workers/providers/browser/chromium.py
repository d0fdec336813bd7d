"""Launching Chromium for a browser sandbox, and tracking the processes it starts.

`prepare_launch` writes the wrapper script Playwright runs as "Chromium" (confined with bubblewrap,
in the sandbox's cgroup, as its uid); `BrowserProcs` is the process tree it starts, and
`cleanup_state` kills what a lost sandbox left.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil

from sandbox_workers import miniwob
from sandbox_workers.base import EnvError, Profile
from sandbox_workers.providers.confine.bwrap import bwrap_argv, confinement_for
from sandbox_workers.providers.confine.cgroups import SandboxCgroup
from sandbox_workers.providers.confine.exposed import check_binds
from sandbox_workers.providers.confine.spawning import kill_pid, process_start_time, same_process

log = logging.getLogger(__name__)

CHROMIUM_BIN = next(
    (p for p in ("/usr/lib/chromium/chromium", "/usr/bin/chromium") if os.access(p, os.X_OK)),
    "/usr/bin/chromium",
)
"""Debian's real binary: /usr/bin/chromium is a shell launcher adding flags (extensions, …) we do not want."""
LAUNCH_TIMEOUT_S = 20.0
SANDBOX_PROFILE_DIR = "/home/user/.chromium"
CHROMIUM_FLAGS = (
    "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-gpu", "--no-sandbox",
    "--disable-breakpad", "--disable-crash-reporter", "--password-store=basic",
)  # fmt: skip
_ARGS_MARK = "\x00ARGS\x00"
SANDBOX_GAMES_DIR = "/opt/games"
"""Where the games suite's html/ folder is bound read-only inside a confined browser sandbox."""


@dataclass
class LaunchSpec:
    """What `BrowserProvider` hands to Playwright's launch, and what it needs to find the processes."""

    wrapper: Path
    pid_file: Path
    args: list[str]
    env: dict[str, str | float | bool]
    pw_downloads: Path
    """Playwright's downloads_path, bound in the sandbox at the same path (Chromium writes there)."""
    html_base: str
    """The MiniWoB html/ folder as the browser sees it (file:// base)."""
    confined: bool
    cgroup: SandboxCgroup | None = None
    games_base: str = ""
    """The games suite's html/ folder as the browser sees it (file:// base); "" when there is none."""


def prepare_launch(
    profile: Profile,
    root: Path,
    *,
    slot: int,
    name: str,
    html_dir: Path,
    confined: bool,
    games_dir: Path | None = None,
) -> LaunchSpec:
    """Write the wrapper script under `root` and return the launch settings.

    Confined: the wrapper joins the sandbox's cgroup, sets rlimits, drops to the sandbox uid (setpriv)
    and execs bwrap, which runs Chromium with the network unshared unless the profile has network.
    bwrap gets --die-with-parent (its parent is the Playwright driver): a browser is useless without
    its pipe, so a dead host must not leave it running. Unconfined: plain Chromium, and a dead proxy
    when the profile has no network.
    """
    root.mkdir(parents=True, exist_ok=True)
    pw_downloads = root / "pw-downloads"
    pw_downloads.mkdir(exist_ok=True)
    pid_file = root / "browser.pid"
    pid_file.unlink(missing_ok=True)
    args = [*CHROMIUM_FLAGS, f"--window-size={profile.width},{profile.height}"]
    env: dict[str, str | float | bool] = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(root)}
    lines = ["#!/bin/sh", "# Written by the browser sandbox provider: Playwright runs this as Chromium.",
             f"echo $$ > {shlex.quote(str(pid_file))}"]  # fmt: skip
    cgroup = None
    if confined:
        conf = confinement_for(profile, root, slot=slot)
        if SandboxCgroup.available():
            cgroup = SandboxCgroup.create(
                SandboxCgroup.name_for(f"browser-{name}", root), profile.memory_mb, profile.max_pids
            )
            # Join before exec, like spawning.spawn's preexec_fn: nothing Chromium starts escapes the limits.
            lines += [f"echo $$ > {shlex.quote(f)} || exit 111" for f in cgroup.procs_files()]
        binds = (
            (str(html_dir), miniwob.SANDBOX_HTML_DIR, False),
            (str(pw_downloads), str(pw_downloads), True),
        ) + (((str(games_dir), SANDBOX_GAMES_DIR, False),) if games_dir is not None else ())
        if conf.uid is not None:
            os.chown(pw_downloads, conf.uid, conf.uid)
        check_binds(conf.uid, (*conf.binds, *binds))
        argv = bwrap_argv(
            conf, [CHROMIUM_BIN, _ARGS_MARK, f"--user-data-dir={SANDBOX_PROFILE_DIR}"], extra_binds=binds
        )
        argv.insert(1, "--die-with-parent")
        prefix = ["/usr/bin/prlimit", "--core=0"]
        if conf.uid is not None:
            prefix += [f"--nproc={conf.max_pids}", "--", "/usr/bin/setpriv", f"--reuid={conf.uid}",
                       f"--regid={conf.uid}", "--clear-groups"]  # fmt: skip
        argv = [*prefix, "--", *argv]
        html_base = miniwob.SANDBOX_HTML_DIR
        games_base = SANDBOX_GAMES_DIR if games_dir is not None else ""
    else:
        argv = [CHROMIUM_BIN, _ARGS_MARK, f"--user-data-dir={root / 'profile'}"]
        if not profile.network:
            # No namespace to take the network away: send everything, loopback included, to a dead proxy.
            args += ["--proxy-server=http://127.0.0.1:9", "--proxy-bypass-list=<-loopback>"]
        html_base = str(html_dir)
        games_base = str(games_dir) if games_dir is not None else ""
    lines.append("exec " + " ".join('"$@"' if a == _ARGS_MARK else shlex.quote(a) for a in argv))
    wrapper = root / "chromium-wrapper.sh"
    wrapper.write_text("\n".join(lines) + "\n")
    wrapper.chmod(0o755)
    return LaunchSpec(wrapper, pid_file, args, env, pw_downloads, html_base, confined, cgroup, games_base)


class BrowserProcs:
    """The process tree of one launched browser: the wrapper's pid (then bwrap's) and what it started."""

    def __init__(
        self, root: psutil.Process, chromium: psutil.Process | None, cgroup: SandboxCgroup | None
    ) -> None:
        self.root = root
        self.chromium = chromium
        """The browser process itself (not a renderer); None if it could not be told apart."""
        self.cgroup = cgroup

    @classmethod
    def find(cls, spec: LaunchSpec, timeout: float = 3.0) -> BrowserProcs:
        """Find the tree of a launched browser from the wrapper's pid file; raises EnvError."""
        try:
            root = psutil.Process(int(spec.pid_file.read_text().strip()))
        except (OSError, ValueError, psutil.Error) as exc:
            raise EnvError(f"the browser's wrapper left no live pid in {spec.pid_file}: {exc}") from exc
        deadline = time.monotonic() + timeout
        while True:
            chromium = _main_chromium(root)
            if chromium is not None or time.monotonic() > deadline:
                return cls(root, chromium, spec.cgroup)
            time.sleep(0.01)

    def chromium_alive(self) -> bool:
        """Whether the browser process (or, failing that, the wrapper's) still runs: two /proc reads."""
        proc = self.chromium or self.root
        try:
            return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False

    def pids(self) -> list[int]:
        """Host pids of every live process of the browser (the tree and its cgroup)."""
        found: set[int] = set(self.cgroup.pids()) if self.cgroup is not None else set()
        try:
            if self.root.is_running():
                found.add(self.root.pid)
                found.update(c.pid for c in self.root.children(recursive=True))
        except psutil.Error:
            pass
        return sorted(found)

    def state(self) -> dict[str, Any]:
        """JSON for `cleanup`: pids with their create times (to survive pid reuse) and the cgroup."""
        pids, times = [], []
        for pid in self.pids():
            t = process_start_time(pid)
            if t is not None:
                pids.append(pid)
                times.append(t)
        return {
            "pids": pids,
            "create_times": times,
            "cgroup": self.cgroup.to_state() if self.cgroup else None,
        }

    def kill(self) -> None:
        """SIGKILL the whole tree, empty and remove the cgroup, and wait briefly for the dead."""
        cleanup_state(self.state())


def cleanup_state(state: Mapping[str, Any]) -> None:
    """Kill what a `BrowserProcs.state()` names (pids checked against their create times), drop its cgroup."""
    pids = [int(p) for p in state.get("pids") or []]
    times = [float(t) for t in state.get("create_times") or []]
    procs = []
    for pid, t in zip(pids, times, strict=False):
        if same_process(pid, t):
            with contextlib.suppress(psutil.Error):
                procs.append(psutil.Process(pid))
            kill_pid(pid, t)
    cgroup = SandboxCgroup.from_state(state.get("cgroup") or {})
    if cgroup is not None:
        try:
            cgroup.kill_all()
            cgroup.remove()
        except EnvError as exc:
            log.warning("browser cgroup cleanup: %s", exc)
    psutil.wait_procs(procs, timeout=3)


def _main_chromium(root: psutil.Process) -> psutil.Process | None:
    try:
        for proc in [root, *root.children(recursive=True)]:
            cmd = proc.cmdline()
            if cmd and cmd[0].endswith("/chromium") and not any(a.startswith("--type=") for a in cmd):
                return proc
    except psutil.Error:
        pass
    return None
