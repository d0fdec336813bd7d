"""Nothing a sandbox host started outlives it, however it stops.

Sandbox processes run in sessions of their own, so a host restarted on purpose can adopt them (a rolling
restart, `--keep-sandboxes-on-exit`, or a supervisor restarting a crashed host). That same independence
means a host that dies for good (SIGKILL after an overrun grace, a crash nobody restarts, an OOM kill)
would leave desktops running with parent 1: Xvfb, an x11vnc, apps. So every host holds its var dir's lock
for its life (`hold_host_lock`) and starts a watchdog (`start_watchdog`): a small process in a session of
its own holding the reading end of a pipe whose writing end only the host has. When the host is gone, for
whatever reason, the pipe closes. After a clean stop (STOP) the watchdog reaps what is left at once (a
sandbox still starting when the host stopped). Unless the host said KEEP, the watchdog gives a restarted
host `--orphan-grace` seconds (SANDBOX_ORPHAN_GRACE_S, 30) to take the lock (it then adopts the sandboxes);
otherwise it reaps them (`reap`: every sandbox the state file records, with the state each provider
kept, then every other sandbox directory under the root) under the lock, which a host starting meanwhile
waits for. `python -m sandbox_workers.reaper reap VAR` does the same at once (`make run` runs it after
stopping its processes).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sandbox_workers.registry import BUILT_IN, provider_class

log = logging.getLogger(__name__)

KEEP = b"keep\n"
"""What a host writes to its watchdog before a rolling restart: keep its sandboxes for the next one."""
STOP = b"stop\n"
"""What a host writes when it stops for good: reap what is left once it has exited, without a grace."""
LOCK_WAIT_S = 120.0


def traversable_by_others(path: Path) -> bool:
    """Whether every directory from / to `path` lets other users through (o+x)."""
    return all(part.stat().st_mode & 0o001 for part in [path, *path.parents] if part.exists())


def sandbox_root(var: Path) -> Path:
    """Where sandbox directories live: under `var` if unprivileged sandbox users can reach it.

    Sandboxes run as their own uids and bubblewrap bind-mounts their workspace as that uid, so
    the path must be traversable; a private var dir (a 0700 home, pytest's tmp) gets a root in /tmp
    named after it instead, so a restarted host finds the same one.
    """
    root = (var / "sandboxes").resolve()
    if os.geteuid() != 0 or traversable_by_others(var.resolve()):
        return root
    digest = hashlib.sha256(str(root).encode()).hexdigest()[:12]
    fallback = Path(tempfile.gettempdir()) / f"flywheel-sandboxes-{digest}"
    fallback.mkdir(mode=0o711, exist_ok=True)
    fallback.chmod(0o711)
    return fallback


def _lock_fd(var: Path) -> int:
    var.mkdir(parents=True, exist_ok=True)
    return os.open(var / "host.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


def hold_host_lock(var: Path, timeout: float = LOCK_WAIT_S) -> int:
    """Take `var`'s host lock for the life of the calling process (a second host on the same var dir, or
    a reap of the previous host's sandboxes, makes it wait); the lock's fd, kept open until exit."""
    fd = _lock_fd(var)
    deadline = time.monotonic() + timeout
    waited = False
    while not _try_lock(fd):
        if not waited:
            log.info("waiting for %s: another host process or a reap of its sandboxes holds it", var)
            waited = True
        if time.monotonic() > deadline:
            os.close(fd)
            raise TimeoutError(f"another sandbox host (or a reap of its sandboxes) holds {var / 'host.lock'}")
        time.sleep(0.1)
    return fd


@contextlib.contextmanager
def _locked(var: Path, timeout: float = LOCK_WAIT_S) -> Iterator[None]:
    fd = hold_host_lock(var, timeout)
    try:
        yield
    finally:
        os.close(fd)


def _cleanup(provider: str, root: Path, state: dict[str, Any]) -> None:
    try:
        provider_class(provider).cleanup(root=root, state=state)
    except Exception:  # one sandbox's cleanup failing must not leave the others running
        log.exception("cleanup of %s by %s failed", root, provider)


def reap(var: Path) -> int:
    """Kill every sandbox a host with var dir `var` left, and drop their roots; the number reaped."""
    with _locked(var):
        state_file = var / "pool-state.json"
        try:
            records = list(json.loads(state_file.read_text()).get("sandboxes", []))
        except FileNotFoundError:
            records = []
        except (OSError, ValueError) as exc:
            log.error("pool state file %s unreadable (%s): reaping by directory only", state_file, exc)
            records = []
        root = sandbox_root(var)
        for rec in records:
            _cleanup(str(rec.get("provider")), root / str(rec.get("id")), rec.get("provider_state") or {})
        known = {str(rec.get("id")) for rec in records}
        strays = [d for d in root.iterdir() if d.is_dir() and d.name not in known] if root.is_dir() else []
        for stray in strays:
            for name in sorted(BUILT_IN):
                _cleanup(name, stray, {})
        if root.is_dir():  # what no sandbox directory leads to (a disk of a host killed while it made one)
            for name in sorted(BUILT_IN):
                try:
                    provider_class(name).sweep(pool_root=root)
                except Exception:
                    log.exception("sweep of %s by %s failed", root, name)
        if records:
            tmp = state_file.with_suffix(".reaped")
            tmp.write_text(json.dumps({"version": 1, "sandboxes": []}))
            os.replace(tmp, state_file)
        if records or strays:
            log.info("reaped %d sandbox(es) a stopped host left under %s", len(records) + len(strays), root)
        return len(records) + len(strays)


def start_watchdog(var: Path, *, grace_s: float) -> int:
    """Start the watchdog of the calling host; the file descriptor to write KEEP to before a rolling
    restart (never close it otherwise: its closing at the host's exit is the signal)."""
    read, write = os.pipe()  # both ends non-inheritable: no sandbox process can hold the pipe open
    try:
        subprocess.Popen(  # noqa: S603 - our own interpreter and module
            [sys.executable, "-m", "sandbox_workers.reaper", "watch", str(var), "--grace", str(grace_s)],
            stdin=read, stdout=subprocess.DEVNULL, start_new_session=True, close_fds=True,
        )  # fmt: skip
    finally:
        os.close(read)
    return write


def lock_holders(path: Path) -> list[int]:
    """The pids holding a flock on `path` (from /proc/locks; [] where it cannot be read)."""
    try:
        inode = os.stat(path).st_ino
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    pids = []
    for line in lines:
        parts = line.split()
        # "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF" (a blocked waiter's line has "->" after the id)
        fields = [p for p in parts if p != "->"]
        if len(fields) >= 6 and fields[1] == "FLOCK" and fields[5].rsplit(":", 1)[-1] == str(inode):
            pids.append(int(fields[4]))
    return sorted(set(pids))


def watch(var: Path, *, grace_s: float) -> None:
    """The watchdog: wait until the host's end of stdin closes; unless it said KEEP, give a restarted
    host `grace_s` to take the var dir over (it adopts the sandboxes), else reap them."""
    said = b""
    while chunk := os.read(0, 64):
        said += chunk
    if KEEP in said:
        log.info("sandbox host with var dir %s stopped for a restart: its sandboxes are kept", var)
        return
    if STOP in said:  # a clean stop: what a start still running at its exit left goes now
        reap(var)
        return
    fd = _lock_fd(var)
    try:
        # A restarted host holds the lock for its life; the dying host's own lock is released a moment
        # after its pipe closed (the kernel closes a dead process's files one after another), so a lock
        # found held once is not a new host: only one still held when the grace ends is.
        deadline = time.monotonic() + max(grace_s, 1.0)
        held = False
        while time.monotonic() < deadline:
            held = not _try_lock(fd)
            if not held:
                fcntl.flock(fd, fcntl.LOCK_UN)
            time.sleep(0.2)
        if held:  # a new host process holds the var dir (it adopts them), or a reap runs
            holders = lock_holders(var / "host.lock")
            log.info("the sandbox host of %s is gone; the var dir's lock is held by %s: not reaping",
                     var, ", ".join(map(str, holders)) or "another process")  # fmt: skip
            return
    finally:
        os.close(fd)
    reap(var)


def main(argv: list[str] | None = None) -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    p = argparse.ArgumentParser(prog="python -m sandbox_workers.reaper", description=__doc__.split("\n")[0])
    p.add_argument("command", choices=("reap", "watch"))
    p.add_argument("var", type=Path, help="the sandbox host's var dir (--var-dir)")
    p.add_argument(
        "--grace", type=float, default=0.0, help="watch: seconds a restarted host has to take over"
    )
    args = p.parse_args(argv)
    if args.command == "watch":
        watch(args.var, grace_s=args.grace)
    else:
        print(f"reaped {reap(args.var)} sandbox(es)")


if __name__ == "__main__":
    main()
