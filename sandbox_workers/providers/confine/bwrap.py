"""How one sandbox's processes are confined: the `Confinement` and its bubblewrap command line.

Every process of a sandbox runs under `bwrap` with its own user, mount, pid, ipc and uts namespaces
and (unless the profile allows the network) a network namespace holding only `lo`. The host's
`/usr` and `/etc` are visible read-only; the workspace (host `root/home`) is `$HOME=/home/user`;
nothing else of the host's `/root`, `/work`, `/home`, `/var` or `/opt` is there. When the host runs
as root each sandbox gets its own unprivileged uid (200000 + slot): sandboxes cannot signal each
other, root-only files of the host stay unreadable, and RLIMIT_NPROC applies.

What a sandbox writes is bounded: its root (workspace, shared /tmp) is a volume of `disk_mb` where the
host can make one (`disk`, mounted by the provider before `confinement_for`); a private /tmp and every
/dev/shm are tmpfs mounts of at most half the memory limit (and of `disk_mb` for /tmp), so a write
past them fails with ENOSPC instead of eating the host's memory where no cgroup holds it.

Note for callers: bwrap runs as the sandbox uid, so that uid must be able to traverse every parent
directory of the sandbox root (`confinement_for` checks it and says which directory is not).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from sandbox_workers.base import EnvError, Profile

SANDBOX_HOME = "/home/user"
UID_BASE = 200000
"""Sandbox uids are UID_BASE + slot when the host runs as root."""


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
    disk_mb: int = 0
    """The profile's disk quota (0: none); it also caps a private /tmp."""

    def tmpfs_mb(self, *, tmp: bool) -> int:
        """The size of a tmpfs bwrap makes (/tmp with `tmp`, else /dev/shm): half the memory limit,
        and no more than the disk quota for /tmp (its pages count as the writer's memory)."""
        half = max(self.memory_mb // 2, 1)
        return min(half, self.disk_mb) if tmp and self.disk_mb else half


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
        # The sandbox's uid passes through its root by group, and no other local user reaches in (its
        # workspace, its world-writable /tmp, its logs): nobody else can watch or plant into it.
        os.chown(root, -1, uid)
        root.chmod(0o710)
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
        disk_mb=profile.disk_mb,
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
    # The package database says what /usr holds (which the sandbox sees anyway): `dpkg -l`, `apt list
    # --installed` answer as on a machine (OSWorld's tasks and checks ask them).
    out += ["--ro-bind-try", "/var/lib/dpkg", "/var/lib/dpkg"]
    # (Paths inside the sandbox below: its own /tmp and /dev/shm, not the host's.)
    out += ["--proc", "/proc", "--dev", "/dev"]
    out += ["--size", str(conf.tmpfs_mb(tmp=False) << 20), "--tmpfs", "/dev/shm"]  # noqa: S108
    if conf.tmp is not None:
        out += ["--bind", str(conf.tmp), "/tmp"]  # noqa: S108
    else:
        out += ["--size", str(conf.tmpfs_mb(tmp=True) << 20), "--tmpfs", "/tmp"]  # noqa: S108
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


def with_env(conf: Confinement, env: Mapping[str, str]) -> Confinement:
    """`conf` with more environment variables."""
    return replace(conf, env={**conf.env, **env})
