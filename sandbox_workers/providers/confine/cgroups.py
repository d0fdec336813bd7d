"""Sandbox cgroups: the limits every process of a sandbox runs under.

A `SandboxCgroup` (cgroup v2 when its memory and pids controllers can be delegated, else the
v1 memory and pids hierarchies) holds every process of the sandbox. A child joins it race-free: in
`preexec_fn`, before it execs bwrap, it writes its own pid into `cgroup.procs`, sets its rlimits and
drops to the sandbox uid (see `spawning`). Where no cgroup can be made, rlimits are the only limit
(callers say so in their health detail).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import signal
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from sandbox_workers.base import EnvError

log = logging.getLogger(__name__)

CGROUP_PARENT = "flywheel"


def _mounts() -> list[tuple[str, str, set[str]]]:
    """(mount point, fs type, options) of the cgroup file systems."""
    out = []
    with open("/proc/self/mounts") as f:
        for line in f:
            parts = line.split()
            if len(parts) >= 4 and parts[2] in ("cgroup", "cgroup2"):
                out.append((parts[1], parts[2], set(parts[3].split(","))))
    return out


def _own_cgroups() -> dict[str, str]:
    """Controller (or "" for v2) → this process's cgroup path."""
    out: dict[str, str] = {}
    with open("/proc/self/cgroup") as f:
        for line in f:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for c in controllers.split(",") if controllers else [""]:
                out[c] = path
    return out


def _write(path: Path, value: str) -> None:
    with open(path, "w") as f:
        f.write(value)


def _find_base_dirs() -> tuple[str, list[Path]] | None:
    """("v2" | "v1", the parent directories sandboxes' cgroups go under), or None if none is usable."""
    mounts = _mounts()
    own = _own_cgroups()
    for point, fstype, _ in mounts:
        if fstype != "cgroup2":
            continue
        try:
            controllers = (Path(point) / "cgroup.controllers").read_text().split()
        except OSError:
            continue
        if not {"memory", "pids"} <= set(controllers):
            continue
        # Our own cgroup holds processes (us), so in v2 it cannot delegate controllers to children
        # (the no-internal-process rule) unless it is the root; try it, then its parent.
        rel = own.get("", "/").lstrip("/")
        candidates = [Path(point) / rel]
        if rel:
            candidates.append((Path(point) / rel).parent)
        for cand in candidates:
            base = cand / CGROUP_PARENT
            try:
                if not {"memory", "pids"} <= set((cand / "cgroup.subtree_control").read_text().split()):
                    _write(cand / "cgroup.subtree_control", "+memory +pids")
                base.mkdir(exist_ok=True)
                if not {"memory", "pids"} <= set((base / "cgroup.subtree_control").read_text().split()):
                    _write(base / "cgroup.subtree_control", "+memory +pids")
                return "v2", [base]
            except OSError:
                continue
    dirs: list[Path] = []
    for controller in ("memory", "pids"):
        found = next((p for p, t, o in mounts if t == "cgroup" and controller in o), None)
        if found is None:
            return None
        base = Path(found) / own.get(controller, "/").lstrip("/") / CGROUP_PARENT
        try:
            base.mkdir(exist_ok=True)
        except OSError:
            return None
        if not os.access(base, os.W_OK):
            return None
        dirs.append(base)
    return "v1", dirs


_BASE: tuple[str, list[Path]] | None | bool = False  # False: not probed yet


class SandboxCgroup:
    """The memory + pids cgroup of one sandbox (v2, or the v1 memory and pids hierarchies)."""

    def __init__(self, version: str, dirs: Sequence[Path]) -> None:
        self.version = version
        self.dirs = list(dirs)

    @classmethod
    def available(cls) -> bool:
        """Whether this host lets us make cgroups with memory and pids limits."""
        global _BASE
        if _BASE is False:
            try:
                _BASE = _find_base_dirs()
            except OSError as exc:
                log.info("no usable cgroups: %s", exc)
                _BASE = None
        return _BASE is not None

    @classmethod
    def name_for(cls, label: str, root: Path) -> str:
        """A cgroup name for the sandbox `label` whose files live under `root`: unique per root, so two
        processes that each start a sandbox of the same name (two scripts' pools, a test beside a demo)
        never share a cgroup, and stopping one never kills the other's processes."""
        digest = hashlib.sha1(str(Path(root).resolve()).encode(), usedforsecurity=False).hexdigest()[:10]
        return f"{label}-{digest}"

    @classmethod
    def create(cls, name: str, memory_mb: int, max_pids: int) -> SandboxCgroup:
        """Make (or reuse) the cgroup `name` with these limits; raises EnvError if not available."""
        if not cls.available():
            raise EnvError("cgroups are not available on this host")
        assert isinstance(_BASE, tuple)
        version, bases = _BASE
        dirs = [base / name for base in bases]
        try:
            for d in dirs:
                d.mkdir(parents=True, exist_ok=True)
            limit = memory_mb * 1024 * 1024
            if version == "v2":
                _write(dirs[0] / "memory.max", str(limit))
                with contextlib.suppress(OSError):
                    _write(dirs[0] / "memory.swap.max", "0")
                _write(dirs[0] / "pids.max", str(max_pids))
            else:
                _write(dirs[0] / "memory.limit_in_bytes", str(limit))
                with contextlib.suppress(OSError):
                    _write(dirs[0] / "memory.memsw.limit_in_bytes", str(limit))
                _write(dirs[1] / "pids.max", str(max_pids))
        except OSError as exc:
            raise EnvError(f"cannot set up cgroup {name}: {exc}") from exc
        return cls(version, dirs)

    @classmethod
    def from_state(cls, state: Mapping[str, Any]) -> SandboxCgroup | None:
        """The cgroup `to_state` described, or None if there was none."""
        if not state or not state.get("dirs"):
            return None
        return cls(str(state["version"]), [Path(d) for d in state["dirs"]])

    def to_state(self) -> dict[str, Any]:
        """JSON describing this cgroup (for a host restart)."""
        return {"version": self.version, "dirs": [str(d) for d in self.dirs]}

    def procs_files(self) -> list[str]:
        """The cgroup.procs files a child writes its pid into to join."""
        return [str(d / "cgroup.procs") for d in self.dirs]

    def pids(self) -> list[int]:
        """Host pids of every process in the cgroup ([] once it is gone)."""
        seen: set[int] = set()
        for d in self.dirs:
            try:
                text = (d / "cgroup.procs").read_text()
            except OSError:
                continue
            seen.update(int(x) for x in text.split())
        return sorted(seen)

    def memory_bytes(self) -> int | None:
        """Memory the cgroup uses now (None if unknown)."""
        name = "memory.current" if self.version == "v2" else "memory.usage_in_bytes"
        try:
            return int((self.dirs[0] / name).read_text())
        except (OSError, ValueError):
            return None

    def kill_all(self, timeout: float = 5.0) -> None:
        """SIGKILL every process in the cgroup until it is empty (a fork racing the kill is caught)."""
        if self.version == "v2":
            with contextlib.suppress(OSError):
                _write(self.dirs[0] / "cgroup.kill", "1")
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids:
                return
            for pid in pids:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            if time.monotonic() > deadline:
                raise EnvError(f"processes {pids} survive SIGKILL in cgroup {self.dirs[0]}")
            time.sleep(0.002)

    def remove(self) -> None:
        """Remove the (empty) cgroup; killing first is the caller's job. Safe when already gone."""
        for d in self.dirs:
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    # EBUSY while the last killed processes are still being torn down.
                    if exc.errno != errno.EBUSY:
                        raise EnvError(f"cannot remove cgroup {d}: {exc}") from exc
                    time.sleep(0.01)
