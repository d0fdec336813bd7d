"""Paths an agent gives a server, confined to the workspace ($HOME inside the sandbox).

bwrap is the real boundary (nothing of the host is there to reach); this keeps the tools' own promise:
a path is relative to the workspace, and one that resolves outside it (``..``, an absolute path
elsewhere, a symlink pointing out) is refused with a message saying so, as a tool error.
"""

from __future__ import annotations

import os
from pathlib import Path

MAX_READ = 1 << 20
"""Largest file a tool reads whole (bytes)."""


class PathRefused(ValueError):
    """A path leaves the workspace, or is not what the tool needs (missing, not a file)."""


def workspace() -> Path:
    """The workspace root: $FLYWHEEL_MCP_WORKSPACE, else $HOME (both resolved)."""
    root = os.environ.get("FLYWHEEL_MCP_WORKSPACE") or os.environ.get("HOME") or "/home/user"
    return Path(root).resolve()


def resolve(path: str, *, root: Path | None = None) -> Path:
    """`path` (relative to the workspace; ``~/x`` and absolute paths inside it are accepted) with every
    symlink followed; PathRefused when the result is outside the workspace."""
    base = root or workspace()
    if not isinstance(path, str) or "\x00" in path:
        raise PathRefused("path must be a string without NUL characters")
    given = path.strip() or "."
    if given == "~" or given.startswith("~/"):
        given = given[2:] or "."
    real = Path(os.path.realpath(base / given))
    if real != base and base not in real.parents:
        raise PathRefused(f"{path!r} resolves outside the workspace ({real}); give a path inside it")
    return real


def relative(path: Path, *, root: Path | None = None) -> str:
    """`path` as the tools show it: relative to the workspace ("." for the workspace itself)."""
    base = root or workspace()
    rel = path.relative_to(base).as_posix()
    return rel or "."


def read_text(path: str, *, root: Path | None = None) -> tuple[Path, str]:
    """A workspace file's text (UTF-8, undecodable bytes replaced); PathRefused if it is not a regular
    file inside the workspace or is larger than MAX_READ."""
    real = resolve(path, root=root)
    if not real.exists():
        raise PathRefused(f"{path!r} does not exist")
    if not real.is_file():
        raise PathRefused(f"{path!r} is not a regular file")
    size = real.stat().st_size
    if size > MAX_READ:
        raise PathRefused(f"{path!r} is {size} bytes; this tool reads at most {MAX_READ}")
    fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "rb") as f:
        return real, f.read().decode("utf-8", "replace")
