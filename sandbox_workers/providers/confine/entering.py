"""One computer per sandbox: processes that enter the sandbox's namespaces instead of making their own.

A desktop's processes (its session, its apps, the agent's shell, the checker's probes, a task's setup
steps) must see one process table, as on a real machine: OSWorld's steps `pkill chrome` and read
`ps aux`. So the sandbox's holder (`start_holder`) owns every namespace of the sandbox (user, mount,
pid, network, ipc, uts, cgroup: bwrap made them, with the sandbox's binds) and runs a reaping init as
its pid 1; `enter` runs a command inside all of them with util-linux's `nsenter`, as the sandbox uid,
with no capabilities and no_new_privs, in the sandbox's cgroup. The host sees the same processes with
host pids; another sandbox sees none of them (its own holder, its own pid namespace).

Killing the holder's pid 1 ends every process of the sandbox (the kernel kills a pid namespace with its
init). A command is killed as a process group (`EnteredProcess.kill_tree`): what it started in the
background with `setsid` lives on, as on a real machine, until the sandbox is reset.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import resource
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

from sandbox_workers.base import EnvError, SandboxError
from sandbox_workers.providers.confine.bwrap import SANDBOX_HOME, Confinement, sandbox_env
from sandbox_workers.providers.confine.cgroups import SandboxCgroup
from sandbox_workers.providers.confine.spawning import (
    SandboxProcess,
    _FileArg,
    check_argv,
    process_start_time,
    spawn,
)

NSENTER = "/usr/bin/nsenter"
_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_DUMPABLE = 4
# The holder's pid 1: reaps every orphan of the sandbox at once (as a machine's init does: a killed
# command's children are its until it reaps them, and `ps` would list them meanwhile) and is not
# dumpable, so nothing of the sandbox (same uid) can ptrace it into exiting and take the sandbox down
# with it. A pid namespace's init gets no signal it has no handler for from inside; this one installs
# none (SIGCHLD is blocked and waited for). It is the host's Python bound at /init, so `ps` shows it
# as a machine's: pid 1, "init".
INIT_PYTHON = "/usr/bin/python3"
INIT_ARGV = (
    "/init", "-S", "-c",
    "import ctypes, os, signal\n"
    f"ctypes.CDLL(None).prctl({_PR_SET_DUMPABLE}, 0, 0, 0, 0)\n"
    "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGCHLD])\n"
    "while True:\n"
    "    try:\n"
    "        os.wait()\n"
    "    except ChildProcessError:\n"
    "        signal.sigwait([signal.SIGCHLD])\n"
    "    except OSError:\n"
    "        pass\n",
)  # fmt: skip
_NAMESPACES = (
    ("user", "-U"), ("mnt", "-m"), ("pid", "-p"), ("net", "-n"),
    ("ipc", "-i"), ("uts", "-u"), ("cgroup", "-C"),
)  # fmt: skip


def start_holder(
    conf: Confinement,
    *,
    cgroup: SandboxCgroup | None,
    extra_binds: Iterable[tuple[str, str, bool]] = (),
    timeout: float = 5.0,
) -> tuple[SandboxProcess, int]:
    """Start the sandbox's holder: its namespaces (with `extra_binds` in its mount namespace) and its
    init. Returns (the bwrap process, host pid of the sandbox's pid 1) — the pid `enter` takes."""
    if not Path(INIT_PYTHON).exists():
        raise EnvError(f"{INIT_PYTHON} is missing: the sandbox's init runs on the host's Python")
    binds = ((os.path.realpath(INIT_PYTHON), INIT_ARGV[0], False), *extra_binds)
    proc = spawn(
        conf, INIT_ARGV, cgroup=cgroup, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        extra_binds=binds, as_pid_1=True,
    )  # fmt: skip
    pid = proc.init_pid(timeout=timeout)
    deadline = time.monotonic() + timeout
    # The namespaces are fully set up (lo up, mounts done) once bwrap has exec'd the init, and the
    # init is ready for `enter` once it has made itself non-dumpable (its /proc files turn root's).
    while pid is not None and time.monotonic() < deadline:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{pid}/exe") == INIT_ARGV[0] and not _dumpable(pid):
                return proc, pid
        if proc.poll() is not None:
            break
        time.sleep(0.001)
    proc.kill_tree()
    proc.wait()
    raise EnvError(f"the sandbox's holder did not start (bwrap exit {proc.returncode})")


def _dumpable(pid: int) -> bool:
    # A non-dumpable process's /proc/PID/stat is owned by root (uid 0 on the host).
    return os.stat(f"/proc/{pid}/stat").st_uid != 0


class EnteredProcess(SandboxProcess):
    """An `nsenter` process; `init_pid()` is the host pid of the command it runs in the sandbox."""

    def init_pid(self, timeout: float = 5.0) -> int | None:
        if self._init_pid is not None:
            return self._init_pid
        deadline = time.monotonic() + timeout
        while True:
            try:
                children = Path(f"/proc/{self.pid}/task/{self.pid}/children").read_text().split()
            except OSError:
                children = []
            if children:
                self._init_pid = int(children[0])
                self._init_start = process_start_time(self._init_pid)
                return self._init_pid
            if self.poll() is not None or time.monotonic() > deadline:
                return None
            time.sleep(0.001)

    def kill_tree(self) -> None:
        """SIGKILL the command's process group (nsenter, the command, what it started in its group)."""
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.kill()


def _entry_setup(conf: Confinement, cgroup: SandboxCgroup | None) -> Callable[[], None]:
    procs = cgroup.procs_files() if cgroup is not None else []
    uid, max_pids = conf.uid, conf.max_pids
    libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        pid = str(os.getpid()).encode()
        for path in procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if uid is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (max_pids, max_pids))
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS)")

    return setup


def entry_argv(conf: Confinement, holder: int, argv: Sequence[str], *, cwd: str = SANDBOX_HOME) -> list[str]:
    """The nsenter command line running `argv` in the namespaces of the holder whose init is `holder`."""
    out = [NSENTER, "-t", str(holder)]
    for name, flag in _NAMESPACES:
        try:
            if os.stat(f"/proc/{holder}/ns/{name}").st_ino == os.stat(f"/proc/self/ns/{name}").st_ino:
                continue  # not one of its own (a network profile shares the host's network)
        except OSError as exc:
            raise EnvError(f"the sandbox's holder (pid {holder}) is gone: {exc}") from exc
        out.append(flag)
    if conf.uid is not None:
        out += ["-S", str(conf.uid), "-G", str(conf.uid)]
    else:
        out.append("--preserve-credentials")
    # The root and working directory of the holder's init (bwrap's pivoted root, $HOME).
    out += ["-r", "-w", "--"]
    if cwd != SANDBOX_HOME:
        out += ["/bin/sh", "-c", 'cd "$0" && exec "$@"', cwd]
    return [*out, *argv]


def enter(
    conf: Confinement,
    holder: int,
    argv: Sequence[str],
    *,
    cgroup: SandboxCgroup | None,
    stdin: _FileArg = None,
    stdout: _FileArg = None,
    stderr: _FileArg = None,
    cwd: str = SANDBOX_HOME,
    pass_fds: tuple[int, ...] = (),
) -> EnteredProcess:
    """Start `argv` inside the sandbox whose holder's init is `holder` (see the module's note), in a
    new session, with the sandbox's clean environment."""
    check_argv(argv)
    if not argv:
        raise SandboxError("an empty command")
    args = entry_argv(conf, holder, argv, cwd=cwd)
    try:
        return EnteredProcess(
            args, stdin=stdin, stdout=stdout, stderr=stderr, preexec_fn=_entry_setup(conf, cgroup),
            start_new_session=True, cwd="/", env=sandbox_env(conf), pass_fds=pass_fds,
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise EnvError(f"cannot start {argv[0]} in the sandbox: {exc}") from exc


def members(holder: int) -> list[int]:
    """Host pids of every process in the pid namespace of the holder whose init is `holder` (its own
    tree and what `enter` started, whose parent on the host is nsenter): [] once it is gone."""
    try:
        ns = os.readlink(f"/proc/{holder}/ns/pid")
    except OSError:
        return []
    if ns == os.readlink("/proc/self/ns/pid"):
        return []  # not a sandbox's: the host's own process table
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry.name}/ns/pid") == ns:
                    found.append(int(entry.name))
    return sorted(found)
