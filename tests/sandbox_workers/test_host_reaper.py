"""Nothing a sandbox host started outlives it: a host killed with -9 and never restarted leaves no
sandbox process behind once its watchdog's grace has passed (sandbox_workers.reaper)."""

from __future__ import annotations

import psutil
import pytest

from tests.procs import wait_for
from tests.sandbox_workers.hostproc import LIGHT_DESKTOP, HostProc

pytestmark = pytest.mark.slow


def _tree(pids: list[int]) -> set[int]:
    """The pids and every descendant of them (apps a desktop started)."""
    found = set(pids)
    for pid in pids:
        try:
            found |= {c.pid for c in psutil.Process(pid).children(recursive=True)}
        except psutil.NoSuchProcess:
            continue
    return found


def _alive(pids: set[int]) -> list[int]:
    return [p for p in pids if psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


def test_a_host_killed_with_minus_9_holding_desktops_leaves_none_of_their_processes(tmp_path):
    desktops = {"desktop": {**LIGHT_DESKTOP, "min_idle": 3, "max_total": 3}}
    host = HostProc(name="killed", var=tmp_path, profiles=desktops, extra_args=("--orphan-grace", "1"))
    host.start(timeout=180)
    try:
        sandboxes = host.status()["sandboxes"]
        assert len(sandboxes) == 3, sandboxes
        pids = _tree([p for s in sandboxes for p in s["pids"]])
        assert len(_alive(pids)) >= 3 * 3, pids  # Xvfb, x11vnc, the window manager... of each
        host.kill9()
    finally:
        host.stop()
    # The watchdog reaps a sandbox at a time, each process given its grace to exit: on a loaded 2-core
    # machine (CI, beside the vLLM install) that took over 30 s. What is claimed: none is left after.
    assert wait_for(lambda: not _alive(pids), 120, interval=0.2), (
        [" ".join(psutil.Process(p).cmdline()[:3]) for p in _alive(pids)],
        host.log_path.read_text()[-3000:],  # the host's log, and its watchdog's
    )
    # The next host on that var dir starts clean (nothing to adopt, nothing left under its root).
    again = HostProc(name="killed", var=tmp_path, profiles={"desktop": {**LIGHT_DESKTOP, "min_idle": 0}})
    again.start(warm=False)
    try:
        assert again.status()["sandboxes"] == []
    finally:
        again.stop()


def test_the_watchdog_names_who_holds_a_var_dirs_lock(tmp_path) -> None:
    import fcntl
    import os

    from sandbox_workers.reaper import lock_holders

    path = tmp_path / "host.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        assert lock_holders(path) == []
        fcntl.flock(fd, fcntl.LOCK_EX)
        assert lock_holders(path) == [os.getpid()]
    finally:
        os.close(fd)
    assert lock_holders(path) == []
