"""Starting confined processes, and running a command to completion.

`spawn` starts one bwrap process, with its own namespaces (pid 1 of its own pid namespace: killing the
host pid of its pid 1, `SandboxProcess.init_pid`, kills everything it started). `join=` shares the
network and ipc namespaces of a holder (`start_netns_holder`, or a desktop's `entering.start_holder`)
while keeping its own mounts and pid namespace: a desktop's MCP servers run so, with binds the desktop's
other processes must not see. A desktop's own processes instead enter its holder's namespaces
(`entering.enter`): one process table, as one machine. `collect_output` runs a spawned command to
completion with a timeout and an output cap.

`spawn` uses `preexec_fn`, so it forks the calling process: fine from worker threads on Linux/glibc.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import json
import os
import resource
import select
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import IO, Any

from sandbox_workers.base import EnvError, ExecResult, SandboxError
from sandbox_workers.providers.confine.bwrap import SANDBOX_HOME, Confinement, bwrap_argv
from sandbox_workers.providers.confine.cgroups import SandboxCgroup
from sandbox_workers.providers.confine.exposed import check_binds

_CLONE_NEWNET = 0x40000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_NS_GET_USERNS = 0xB701  # ioctl: the user namespace owning a namespace fd

_FileArg = int | IO[Any] | None


_libc: ctypes.CDLL | None = None


def _setns(fd: int, nstype: int) -> None:
    assert _libc is not None
    if _libc.setns(fd, nstype) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns({nstype:#x}): {os.strerror(err)}")


def _child_setup(
    conf: Confinement, cgroup: SandboxCgroup | None, join_fds: tuple[int, int, int] | None
) -> Callable[[], None]:
    """The preexec_fn: join the cgroup, set rlimits, join the shared namespaces, drop to the uid."""
    procs = cgroup.procs_files() if cgroup is not None else []
    uid = conf.uid
    max_pids = conf.max_pids
    global _libc
    if join_fds is not None and _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)

    def setup() -> None:
        # Joining before exec means nothing the child starts can escape the cgroup's limits.
        pid = str(os.getpid())
        for path in procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, pid.encode())
            finally:
                os.close(fd)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        # No RLIMIT_AS: Chromium reserves terabytes of address space it never touches.
        if uid is not None:
            # RLIMIT_NPROC counts per uid, which is this sandbox's own: a second, cgroup-free cap.
            resource.setrlimit(resource.RLIMIT_NPROC, (max_pids, max_pids))
            if join_fds is not None:
                # As root (before dropping): join the holder's network and ipc namespaces.
                _setns(join_fds[1], _CLONE_NEWNET)
                _setns(join_fds[2], _CLONE_NEWIPC)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        elif join_fds is not None:
            # Unprivileged: we own the holder's user namespace, so we may enter it and then its
            # network namespace; bwrap then nests a new user namespace inside it.
            _setns(join_fds[0], _CLONE_NEWUSER)
            _setns(join_fds[1], _CLONE_NEWNET)
            _setns(join_fds[2], _CLONE_NEWIPC)

    return setup


class SandboxProcess(subprocess.Popen[bytes]):
    """A bwrap process; `init_pid()` is the host pid of its pid 1 (killing it ends them all)."""

    _info_r: int | None = None
    _init_pid: int | None = None
    _init_start: float | None = None

    def init_pid(self, timeout: float = 5.0) -> int | None:
        """Host pid of the sandbox's pid 1 (None if bwrap failed before starting it)."""
        if self._init_pid is not None or self._info_r is None:
            return self._init_pid
        fd = self._info_r
        data = b""
        deadline = time.monotonic() + timeout
        try:
            while b"}" not in data:
                if not select.select([fd], [], [], max(deadline - time.monotonic(), 0))[0]:
                    break
                chunk = os.read(fd, 4096)
                if not chunk:
                    break
                data += chunk
        finally:
            os.close(fd)
            self._info_r = None
        with contextlib.suppress(ValueError, KeyError, TypeError):
            self._init_pid = int(json.loads(data[: data.index(b"}") + 1])["child-pid"])
            self._init_start = process_start_time(self._init_pid)
        return self._init_pid

    def kill_tree(self) -> None:
        """SIGKILL the whole pid namespace (its pid 1) and bwrap itself."""
        init = self.init_pid(timeout=1.0)
        if init is not None:
            kill_pid(init, self._init_start)
        with contextlib.suppress(ProcessLookupError):
            self.kill()


def check_argv(argv: Sequence[str]) -> None:
    """SandboxError for a command line exec() cannot take (a NUL character): the caller's mistake, not
    a failure of the sandbox."""
    if any("\x00" in arg for arg in argv):
        raise SandboxError(f"a command cannot hold a NUL character: {list(argv)!r}"[:300])


def spawn(
    conf: Confinement,
    argv: Sequence[str],
    *,
    cgroup: SandboxCgroup | None,
    stdin: _FileArg = None,
    stdout: _FileArg = None,
    stderr: _FileArg = None,
    cwd: str = SANDBOX_HOME,
    join: int | None = None,
    extra_binds: Iterable[tuple[str, str, bool]] = (),
    as_pid_1: bool = False,
) -> SandboxProcess:
    """Start `argv` confined by `conf`, in `cgroup`, in a new session (adoptable after a restart).

    `join`: host pid of a `start_netns_holder` process whose network (and ipc) namespace to share.
    """
    check_argv(argv)
    join_fds: tuple[int, int, int] | None = None
    opened: list[int] = []
    try:
        if join is not None:
            try:
                net = os.open(f"/proc/{join}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
                opened.append(net)
                ipc = os.open(f"/proc/{join}/ns/ipc", os.O_RDONLY | os.O_CLOEXEC)
                opened.append(ipc)
                # The user namespace that OWNS them (bwrap nests another one for the process it
                # runs, and capabilities there do not reach its parent's network namespace).
                owner = fcntl.ioctl(net, _NS_GET_USERNS)
                opened.append(owner)
            except OSError as exc:
                raise EnvError(f"the sandbox's namespace holder (pid {join}) is gone: {exc}") from exc
            join_fds = (owner, net, ipc)
        check_binds(conf.uid, (*conf.binds, *extra_binds))
        info_r, info_w = os.pipe()
        opened.append(info_w)
        args = bwrap_argv(
            conf,
            argv,
            cwd=cwd,
            joined_net=join is not None,
            extra_binds=extra_binds,
            info_fd=info_w,
            as_pid_1=as_pid_1,
        )
        try:
            proc = SandboxProcess(
                args,
                stdin=stdin,
                stdout=stdout,
                stderr=stderr,
                pass_fds=(info_w,),
                preexec_fn=_child_setup(conf, cgroup, join_fds),
                start_new_session=True,
                cwd="/",
                env={"PATH": "/usr/bin:/bin"},
            )
        except (OSError, subprocess.SubprocessError) as exc:
            os.close(info_r)
            raise EnvError(f"cannot start {argv[0]} in the sandbox: {exc}") from exc
        proc._info_r = info_r
        return proc
    finally:
        for fd in opened:
            os.close(fd)


def start_netns_holder(
    conf: Confinement, *, cgroup: SandboxCgroup | None, timeout: float = 5.0
) -> tuple[SandboxProcess, int]:
    """Start the process whose namespaces the sandbox's other processes join; (process, its ns pid).

    The second value is the host pid to pass as `spawn(join=...)`: it lives as long as the holder.
    """
    proc = spawn(
        conf,
        ["sleep", "infinity"],
        cgroup=cgroup,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        as_pid_1=True,
    )
    pid = proc.init_pid(timeout=timeout)
    deadline = time.monotonic() + timeout
    # Wait until the namespace is fully set up (lo up, mounts done): that is when sleep runs.
    while pid is not None and time.monotonic() < deadline:
        try:
            if os.readlink(f"/proc/{pid}/exe").endswith("/sleep"):
                return proc, pid
        except OSError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.001)
    proc.kill_tree()
    proc.wait()
    raise EnvError(f"the sandbox's namespace holder did not start (bwrap exit {proc.returncode})")


# --- small process helpers ---------------------------------------------------------------------


_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _proc_stat(pid: int) -> tuple[str, float] | None:
    """(state letter, start time in seconds since boot) from /proc/PID/stat, None if no such pid."""
    try:
        data = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = data[data.rindex(b")") + 2 :].split()  # after "pid (comm) ": field 3 (state) onwards
    return fields[0].decode(), int(fields[19]) / _CLK_TCK


def process_start_time(pid: int) -> float | None:
    """When the process started, in seconds since boot (immune to wall-clock changes, unlike
    psutil's create_time): with the pid it names one process across pid reuse. None if none."""
    st = _proc_stat(pid)
    return st[1] if st else None


def same_process(pid: int | None, start_time: float | None) -> bool:
    """Whether `pid` is still the (non-zombie) process that started at `start_time` (None: any)."""
    st = _proc_stat(pid) if pid else None
    if st is None or st[0] in ("Z", "X"):
        return False
    return start_time is None or abs(st[1] - float(start_time)) < 0.005


def kill_pid(pid: int | None, start_time: float | None) -> None:
    """SIGKILL `pid` if it is still the same process (pid reuse guarded by its start time)."""
    if not pid:
        return
    if start_time is not None and not same_process(pid, start_time):
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signal.SIGKILL)


# --- running a command to completion -----------------------------------------------------------


def collect_output(
    proc: SandboxProcess, *, timeout: float, output_cap: int, t0: float | None = None
) -> ExecResult:
    """Read a spawned command's stdout/stderr (PIPEs) up to `output_cap` bytes each; at `timeout`
    kill it (`kill_tree`: its pid namespace, or an entered command's process group; exit_code None,
    timed_out True).

    Returns when the command exits: children it left in the background may hold the pipes open, so
    what they write right away is read and the rest is not waited for.
    """
    import selectors

    start = time.monotonic() if t0 is None else t0
    assert proc.stdout is not None and proc.stderr is not None
    out_fd, err_fd = proc.stdout.fileno(), proc.stderr.fileno()
    bufs = {out_fd: bytearray(), err_fd: bytearray()}
    truncated = timed_out = False
    deadline = start + timeout
    exited_at: float | None = None
    with selectors.DefaultSelector() as sel:
        for fd in bufs:
            os.set_blocking(fd, False)
            sel.register(fd, selectors.EVENT_READ)
        while sel.get_map():
            now = time.monotonic()
            if exited_at is None and proc.poll() is not None:
                exited_at = now
            if exited_at is not None and now - exited_at > 0.05:
                break
            if now > deadline:
                timed_out = True
                break
            for key, _ in sel.select(min(deadline - now, 0.05 if exited_at is None else 0.01)):
                fd = key.fd if isinstance(key.fd, int) else key.fd.fileno()
                try:
                    chunk = os.read(fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(fd)
                    continue
                room = max(output_cap - len(bufs[fd]), 0)
                truncated = truncated or len(chunk) > room
                bufs[fd] += chunk[:room]
    if timed_out:
        proc.kill_tree()
    try:
        code = proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill_tree()
        code = proc.wait()
    proc.stdout.close()
    proc.stderr.close()
    return ExecResult(
        exit_code=None if timed_out else code,
        stdout=bufs[out_fd].decode("utf-8", "replace"),
        stderr=bufs[err_fd].decode("utf-8", "replace"),
        timed_out=timed_out,
        truncated=truncated,
        duration_s=time.monotonic() - start,
    )
