"""The sandbox's workspace seen from the host: file access that never leaves it (symlinks included) and
never takes more of its disk than the sandbox may (DiskFull), ownership and wiping."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
from pathlib import Path, PurePosixPath

from sandbox_workers.base import DiskFull, SandboxPathError
from sandbox_workers.providers.confine.bwrap import SANDBOX_HOME, Confinement


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
    """Write a file of the workspace (parents created), owned by the sandbox uid; never via a symlink.

    The host writes as root, which could use the part of a sandbox's disk kept for root (the host's own
    files there): a file that does not fit what the sandbox itself may still write is refused first
    (DiskFull), and one that meets a full disk while written is removed, not left half written."""
    parts = workspace_parts(path)
    dfd = _open_parent(conf, parts[:-1], create=True)
    try:
        _check_room(dfd, parts[-1], len(data), path)
        fd = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644, dir_fd=dfd)
    except OSError as exc:
        os.close(dfd)
        raise SandboxPathError(f"cannot write {path}: {exc}") from exc
    except BaseException:
        os.close(dfd)
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            if conf.uid is not None:
                os.fchown(fd, conf.uid, conf.uid)
            f.write(data)
    except OSError as exc:
        if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
            raise
        with contextlib.suppress(OSError):
            os.unlink(parts[-1], dir_fd=dfd)
        raise DiskFull(f"cannot write {path} ({len(data)} bytes): the sandbox's disk is full") from None
    finally:
        os.close(dfd)


def _check_room(dfd: int, name: str, size: int, path: str) -> None:
    """DiskFull if `size` bytes do not fit the room an unprivileged writer has left there (counting
    the blocks of the file it replaces)."""
    st = os.fstatvfs(dfd)
    room = st.f_bavail * st.f_frsize
    with contextlib.suppress(OSError):
        room += os.stat(name, dir_fd=dfd, follow_symlinks=False).st_blocks * 512
    needed = -(-size // st.f_frsize) * st.f_frsize
    if needed > room:
        raise DiskFull(f"cannot write {path} ({size} bytes): the sandbox's disk has {room // 1024} KiB left")


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


LOG_TRIM_AT = 1 << 20
LOG_KEEP = 256 << 10


def trim_logs(root: Path, *, trim_at: int = LOG_TRIM_AT, keep: int = LOG_KEEP) -> None:
    """Cut every `*.log` of `root` (the host's, which the sandbox's processes write their output to)
    longer than `trim_at` bytes to its last `keep`, in place: writers that append go on at its end."""
    for path in root.glob("*.log"):
        try:
            fd = os.open(path, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK)
        except OSError:
            continue
        with os.fdopen(fd, "r+b") as f:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size <= trim_at:
                continue
            f.seek(-keep, os.SEEK_END)
            tail = f.read(keep)
            f.seek(0)
            f.write(b"[earlier output trimmed at a reset]\n" + tail)
            f.truncate()
