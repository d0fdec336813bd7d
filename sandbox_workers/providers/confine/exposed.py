"""Host files that sandboxes read, and making sure a sandbox uid can read them whatever the umask.

A sandbox's processes run as a uid of its own, and bwrap itself runs as that uid, so every host path bound
into a sandbox must be reachable (o+x on each directory from / down to it) and readable (o+r files, o+rx
directories) by other users. A checkout cloned, or a virtual environment made, under `umask 077` is neither:
bwrap then fails with "Can't find source path …: Permission denied", which reaches people as "Chromium
did not start" or "the MCP server cannot start".

`access_problem` says why a uid cannot read a path (each directory that stops it, with its mode and the
fix); `expose` grants other users read and traverse (never write, and execute only where the owner has
it) on whole trees the project owns, and on the directories between each tree and the project's roots.
What it may not fix, a directory above the project's roots (a 0700 home) or a file it does not own, comes
back as a problem naming the path and the fix: it is never widened silently.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from sandbox_workers.base import EnvError

_READ = stat.S_IRGRP | stat.S_IROTH
_TRAVERSE = stat.S_IXGRP | stat.S_IXOTH


def _may(st: os.stat_result, uid: int, bits: tuple[int, int, int]) -> bool:
    """Whether `uid` (no supplementary groups: sandbox uids have none) has every bit of its class."""
    owner, group, other = bits
    if st.st_uid == uid:
        return st.st_mode & owner == owner
    if st.st_gid == uid:
        return st.st_mode & group == group
    return st.st_mode & other == other


def access_problem(path: Path, uid: int) -> str | None:
    """Why `uid` cannot reach and read `path` (a file or a directory), or None when it can."""
    try:
        target = path.stat()
    except OSError as exc:
        return f"{path} cannot be read: {exc.strerror}"
    for parent in path.parents:
        st = parent.stat()
        if not _may(st, uid, (stat.S_IXUSR, stat.S_IXGRP, stat.S_IXOTH)):
            return (
                f"{path} is not reachable by sandbox users (uid {uid}): {parent} is mode "
                f"{st.st_mode & 0o777:o} (`chmod o+x {parent}`, or keep the checkout where others may pass)"
            )
    need = (
        (stat.S_IRUSR | stat.S_IXUSR, stat.S_IRGRP | stat.S_IXGRP, stat.S_IROTH | stat.S_IXOTH)
        if stat.S_ISDIR(target.st_mode)
        else (stat.S_IRUSR, stat.S_IRGRP, stat.S_IROTH)
    )
    if not _may(target, uid, need):
        return (
            f"{path} is not readable by sandbox users (uid {uid}): it is mode {target.st_mode & 0o777:o} "
            f"(`chmod -R go+rX {path}`)"
        )
    return None


def check_binds(uid: int | None, binds: Iterable[tuple[str, str, bool]]) -> None:
    """EnvError naming the first bind source `uid` cannot read (bwrap, running as `uid`, would fail on it
    with a bare "Permission denied"); nothing to check when the sandbox runs as the host's own user."""
    if uid is None:
        return
    for host_path, sandbox_path, _writable in binds:
        problem = access_problem(Path(host_path), uid)
        if problem is not None:
            raise EnvError(f"cannot bind {sandbox_path} into the sandbox: {problem}")


@dataclass
class Exposure:
    """What `expose` changed and what it could not."""

    changed: list[Path] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _widen(path: Path, st: os.stat_result, want: int, out: Exposure) -> None:
    mode = stat.S_IMODE(st.st_mode)
    if mode | want == mode:
        return
    if os.geteuid() not in (0, st.st_uid):
        out.problems.append(f"{path} is mode {mode:o} and not ours to change (`chmod go+rX {path}`)")
        return
    os.chmod(path, mode | want)
    out.changed.append(path)


def expose(trees: Iterable[Path], *, roots: Iterable[Path]) -> Exposure:
    """Let other users read every tree in `trees` and pass through the directories above each, up to the
    one of `roots` (the project's own folders) it lies in; symlinks are left as they are."""
    out = Exposure()
    roots = [r.resolve() for r in roots]
    for tree in trees:
        tree = tree.resolve()
        root = next((r for r in roots if tree == r or r in tree.parents), None)
        if root is None:
            out.problems.append(f"{tree} lies outside the project's folders ({', '.join(map(str, roots))})")
            continue
        for parent in tree.parents:
            st = parent.stat()
            if root == parent or root in parent.parents:
                _widen(parent, st, _TRAVERSE, out)
            elif not st.st_mode & stat.S_IXOTH:
                out.problems.append(
                    f"{tree} is not reachable by sandbox users: {parent} is mode {st.st_mode & 0o777:o} "
                    f"(`chmod o+x {parent}`, or keep the checkout where others may pass)"
                )
                break
        for folder, dirs, files in os.walk(tree):
            base = Path(folder)
            _widen(base, base.lstat(), _READ | _TRAVERSE, out)
            for name in files:
                path = base / name
                st = path.lstat()
                if stat.S_ISREG(st.st_mode):
                    # Execute for others only where the owner may execute (scripts, shared objects).
                    _widen(path, st, _READ | (_TRAVERSE if st.st_mode & stat.S_IXUSR else 0), out)
            dirs[:] = [d for d in dirs if not (base / d).is_symlink()]
    return out
