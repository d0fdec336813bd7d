"""Confinement of sandboxed processes with bubblewrap, cgroups and rlimits.

Every process of a sandbox runs under `bwrap` with its own user, mount, pid, ipc and uts namespaces
and (unless the profile allows the network) a network namespace holding only `lo`. The host's
`/usr` and `/etc` are visible read-only; the workspace (host `root/home`) is `$HOME=/home/user`;
nothing else of the host's `/root`, `/work`, `/home`, `/var` or `/opt` is there. When the host runs
as root each sandbox gets its own unprivileged uid (200000 + slot): sandboxes cannot signal each
other, root-only files of the host stay unreadable, and RLIMIT_NPROC applies.

Limits: a `SandboxCgroup` (cgroup v2 when its memory and pids controllers can be delegated, else the
v1 memory and pids hierarchies) holds every process of the sandbox. A child joins it race-free: in
`preexec_fn`, before it execs bwrap, it writes its own pid into `cgroup.procs`, sets its rlimits and
drops to the sandbox uid. Where no cgroup can be made, rlimits are the only limit (callers say so
in their health detail).

One sandbox usually runs many bwrap processes (a window manager, apps, each shell command). They
share one network namespace, so a server started by one is reachable from the others at 127.0.0.1:
`start_netns_holder` starts a tiny holder process whose namespace the others join (`join=` of
`spawn`). Each bwrap has its own pid namespace; killing the host pid of its pid 1
(`SandboxProcess.init_pid`) kills everything it started.

Also here, for every provider that confines: `collect_output` (run a spawned command to completion
with a timeout and an output cap) and `workspace_read` / `workspace_write` (host-side file access
that never leaves the workspace, symlinks included).

Note for callers: bwrap runs as the sandbox uid, so that uid must be able to traverse every parent
directory of the sandbox root (`confinement_for` checks it and says which directory is not).
`spawn` uses `preexec_fn`, so it forks the calling process: fine from worker threads on Linux/glibc.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import fcntl
import hashlib
import json
import logging
import os
import resource
import select
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path, PurePosixPath
from typing import IO, Any

from sandbox_workers.base import EnvError, ExecResult, Profile, SandboxError, SandboxPathError

log = logging.getLogger(__name__)

SANDBOX_HOME = "/home/user"
UID_BASE = 200000
"""Sandbox uids are UID_BASE + slot when the host runs as root."""
CGROUP_PARENT = "flywheel"

_CLONE_NEWNET = 0x40000000
_CLONE_NEWIPC = 0x08000000
_CLONE_NEWUSER = 0x10000000
_NS_GET_USERNS = 0xB701  # ioctl: the user namespace owning a namespace fd

_FileArg = int | IO[Any] | None


@dataclass(frozen=True)
class Confinement:
    """How one sandbox's processes are confined (built by `confinement_for`)."""

    root: Path
    """The sandbox's directory on the host."""
    workspace: Path
    """Host path of the workspace; it is $HOME (/home/user) inside."""
    uid: int | None
    """Unprivileged uid the sandbox runs as (when the host is root); None: the host's own user."""
    network: bool
    memory_mb: int
    max_pids: int
    binds: tuple[tuple[str, str, bool], ...] = ()
    """Extra bind mounts: (host path, sandbox path, writable)."""
    env: Mapping[str, str] = field(default_factory=dict)
    """Added to the clean environment (after the defaults, so it may override them)."""
    tmp: Path | None = None
    """Host directory shared by the sandbox's processes as /tmp; None: a private tmpfs per process."""


def confinement_for(profile: Profile, root: Path, *, slot: int, shared_tmp: bool = False) -> Confinement:
    """The confinement of the sandbox in `root` (created; its workspace `root/home` owned by the uid).

    `slot` is a small integer unique among the host's live sandboxes (it picks the uid). With
    `shared_tmp`, `root/tmp` is /tmp for every process of the sandbox (else each gets a tmpfs).
    """
    uid = UID_BASE + slot if os.geteuid() == 0 else None
    root.mkdir(parents=True, exist_ok=True)
    workspace = root / "home"
    workspace.mkdir(exist_ok=True)
    tmp = root / "tmp" if shared_tmp else None
    if tmp is not None:
        tmp.mkdir(exist_ok=True)
        tmp.chmod(0o1777)
    if uid is not None:
        _check_traversable(root, uid)
        os.chown(workspace, uid, uid)
        if tmp is not None:
            os.chown(tmp, uid, uid)
    binds: tuple[tuple[str, str, bool], ...] = ()
    if uid is not None:
        # A passwd entry for the sandbox uid, so `whoami`, shells and ssh-like tools see a user.
        etc = root / "etc"
        etc.mkdir(exist_ok=True)
        host_passwd = Path("/etc/passwd").read_text()
        host_group = Path("/etc/group").read_text()
        (etc / "passwd").write_text(
            host_passwd + f"user:x:{uid}:{uid}:Sandbox user:{SANDBOX_HOME}:/bin/bash\n"
        )
        (etc / "group").write_text(host_group + f"user:x:{uid}:\n")
        binds = ((str(etc / "passwd"), "/etc/passwd", False), (str(etc / "group"), "/etc/group", False))
    return Confinement(
        root=root,
        workspace=workspace,
        uid=uid,
        network=profile.network,
        memory_mb=profile.memory_mb,
        max_pids=profile.max_pids,
        binds=binds,
        tmp=tmp,
    )


def _check_traversable(path: Path, uid: int) -> None:
    """Raise EnvError if `uid` (no supplementary groups) cannot reach `path` (bwrap needs to)."""
    for parent in [path, *path.parents]:
        st = parent.stat()
        if st.st_uid == uid:
            ok = bool(st.st_mode & 0o100)
        elif st.st_gid == uid:
            ok = bool(st.st_mode & 0o010)
        else:
            ok = bool(st.st_mode & 0o001)
        if not ok:
            raise EnvError(
                f"sandbox root {path} is not reachable by the sandbox uid {uid}: "
                f"{parent} is mode {st.st_mode & 0o777:o} (give it o+x or put sandboxes elsewhere)"
            )


def sandbox_env(conf: Confinement) -> dict[str, str]:
    """The clean environment every sandboxed process starts with."""
    env = {
        "HOME": SANDBOX_HOME,
        "USER": "user",
        "LOGNAME": "user",
        "SHELL": "/bin/bash",
        "PATH": "/usr/local/bin:/usr/bin:/bin:/usr/sbin:/sbin",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",  # noqa: S108 (the sandbox's own /tmp)
    }
    env.update(conf.env)
    return env


def bwrap_argv(
    conf: Confinement,
    argv: Sequence[str],
    *,
    cwd: str = SANDBOX_HOME,
    joined_net: bool = False,
    extra_binds: Iterable[tuple[str, str, bool]] = (),
    info_fd: int | None = None,
    as_pid_1: bool = False,
) -> list[str]:
    """The bwrap command line running `argv` confined by `conf`.

    `joined_net`: the process has already joined the sandbox's network namespace (see `spawn`), so
    bwrap must not make a new one. `info_fd`: bwrap writes {"child-pid": N} there (N is the host pid
    of the sandbox's pid 1; killing it kills the whole pid namespace).
    """
    out = ["bwrap"]
    if joined_net:
        out += ["--unshare-user", "--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
        if conf.uid is None:
            # Unprivileged, the process entered the holder's user namespace, where it is root: bwrap
            # would map root into the sandbox too. Keep the host user's ids instead.
            out += ["--uid", str(os.getuid()), "--gid", str(os.getgid())]
    else:
        out.append("--unshare-all")
        if conf.network:
            out.append("--share-net")
    # --new-session: no TIOCSTI into a terminal of the host. No --die-with-parent: sandboxes must
    # outlive a restart of the host process (which adopts them again).
    out += ["--new-session", "--hostname", "sandbox"]
    if as_pid_1:
        out.append("--as-pid-1")
    out += ["--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        host = Path("/") / name
        if host.is_symlink():
            out += ["--symlink", os.readlink(host), f"/{name}"]
        elif host.is_dir():
            out += ["--ro-bind", str(host), f"/{name}"]
    out += ["--ro-bind", "/etc", "/etc"]
    # Font caches are public and save every GUI app seconds of cache building on its first start.
    out += ["--ro-bind-try", "/var/cache/fontconfig", "/var/cache/fontconfig"]
    # (Paths inside the sandbox below: its own /tmp and /dev/shm, not the host's.)
    out += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/dev/shm"]  # noqa: S108
    if conf.tmp is not None:
        out += ["--bind", str(conf.tmp), "/tmp"]  # noqa: S108
    else:
        out += ["--tmpfs", "/tmp"]  # noqa: S108
    out += ["--bind", str(conf.workspace), SANDBOX_HOME]
    for host_path, sandbox_path, writable in (*conf.binds, *extra_binds):
        out += ["--bind" if writable else "--ro-bind", host_path, sandbox_path]
    # The root is bwrap's own tmpfs: make it read-only too (after every mount point exists), so
    # nothing but $HOME, /tmp and /dev/shm can be written.
    out += ["--remount-ro", "/"]
    out.append("--clearenv")
    for key, value in sandbox_env(conf).items():
        out += ["--setenv", key, value]
    if info_fd is not None:
        out += ["--info-fd", str(info_fd)]
    out += ["--chdir", cwd, "--", *argv]
    return out


# --- cgroups -----------------------------------------------------------------------------------


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


# --- spawning ----------------------------------------------------------------------------------

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
    if any("\x00" in arg for arg in argv):
        # exec() cannot take one: refused as the caller's mistake, not a failure of the sandbox.
        raise SandboxError(f"a command cannot hold a NUL character: {list(argv)!r}"[:300])
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


def chown_tree(path: Path, uid: int | None) -> None:
    """Give `path` and everything under it to `uid` (no-op when the sandbox runs as the host user)."""
    if uid is None:
        return
    os.chown(path, uid, uid, follow_symlinks=False)
    for dirpath, dirnames, filenames in os.walk(path):
        for name in (*dirnames, *filenames):
            os.chown(os.path.join(dirpath, name), uid, uid, follow_symlinks=False)


def wipe_dir(path: Path) -> None:
    """Empty `path` (keeping the directory itself, its mode and owner)."""
    for child in path.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                child.unlink()


def with_env(conf: Confinement, env: Mapping[str, str]) -> Confinement:
    """`conf` with more environment variables."""
    return replace(conf, env={**conf.env, **env})


# --- running a command to completion -----------------------------------------------------------


def collect_output(
    proc: SandboxProcess, *, timeout: float, output_cap: int, t0: float | None = None
) -> ExecResult:
    """Read a spawned command's stdout/stderr (PIPEs) up to `output_cap` bytes each; at `timeout`
    kill its whole pid namespace (exit_code None, timed_out True).

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


# --- workspace files ---------------------------------------------------------------------------


def workspace_parts(path: str) -> list[str]:
    """A sandbox path (relative to $HOME, or absolute under /home/user) as components relative to the
    workspace; SandboxPathError if it leaves it ("..", another absolute path) or names it itself."""
    if "\x00" in path:
        # The kernel cannot take one (Python raises ValueError, which would read as a sandbox failure).
        raise SandboxPathError(f"{path!r}: a path cannot hold a NUL character")
    p = PurePosixPath(path)
    if p.is_absolute():
        try:
            p = p.relative_to(SANDBOX_HOME)
        except ValueError:
            raise SandboxPathError(f"{path} is outside the workspace {SANDBOX_HOME}") from None
    parts = [x for x in p.parts if x not in ("", ".")]
    if ".." in parts:
        raise SandboxPathError(f"{path} leaves the workspace ('..' is not allowed)")
    if not parts:
        raise SandboxPathError(f"{path} is the workspace itself, not a file")
    return parts


def _open_parent(conf: Confinement, parts: list[str], create: bool) -> int:
    """An fd of the directory holding the file, walked from the workspace following no symlink (a
    sandboxed process may plant one pointing anywhere; O_NOFOLLOW at every step refuses it)."""
    fd = os.open(conf.workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        for part in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                    if conf.uid is not None:
                        os.chown(part, conf.uid, conf.uid, dir_fd=fd, follow_symlinks=False)
            nfd = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = nfd
        return fd
    except OSError as exc:
        os.close(fd)
        raise SandboxPathError(f"{'/'.join(parts)} is not a directory inside the workspace ({exc})") from exc


def workspace_write(conf: Confinement, path: str, data: bytes) -> None:
    """Write a file of the workspace (parents created), owned by the sandbox uid; never via a symlink."""
    parts = workspace_parts(path)
    dfd = _open_parent(conf, parts[:-1], create=True)
    try:
        fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
    except OSError as exc:
        raise SandboxPathError(f"cannot write {path}: {exc}") from exc
    finally:
        os.close(dfd)
    with os.fdopen(fd, "wb") as f:
        if conf.uid is not None:
            os.fchown(fd, conf.uid, conf.uid)
        f.write(data)


def workspace_read(conf: Confinement, path: str) -> bytes:
    """Read a regular file of the workspace; never via a symlink (SandboxPathError)."""
    parts = workspace_parts(path)
    dfd = _open_parent(conf, parts[:-1], create=False)
    try:
        # O_NONBLOCK: a FIFO planted by the sandbox must not hang the host.
        fd = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=dfd)
    except OSError as exc:
        raise SandboxPathError(f"cannot read {path}: {exc}") from exc
    finally:
        os.close(dfd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise SandboxPathError(f"{path} is not a regular file")
    os.set_blocking(fd, True)
    with os.fdopen(fd, "rb") as f:
        return f.read()
