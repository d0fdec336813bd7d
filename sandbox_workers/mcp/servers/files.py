"""The `files` MCP server: list, read, write and search files of the sandbox's workspace.

Every path is relative to the workspace ($HOME in the sandbox); one that resolves outside it is refused
(see `_workspace`). Run inside the sandbox: ``python3 -m flywheel_mcp_servers.files`` (stdio).
"""

from __future__ import annotations

import os
from typing import Any

from mcp.server.fastmcp import FastMCP

from ._workspace import MAX_READ, PathRefused, read_text, relative, resolve, workspace

MAX_ENTRIES = 500
MAX_MATCHES = 200
MAX_WRITE = 1 << 20

server = FastMCP("files", log_level="WARNING")


@server.tool()
def list_dir(path: str = ".") -> dict[str, Any]:
    """List a folder of the workspace: each entry's name, type (file, dir, link, other) and size."""
    real = resolve(path)
    if not real.is_dir():
        raise PathRefused(f"{path!r} is not a folder")
    entries = []
    for entry in sorted(os.scandir(real), key=lambda e: e.name)[:MAX_ENTRIES]:
        kind = (
            "link"
            if entry.is_symlink()
            else "dir"
            if entry.is_dir()
            else "file"
            if entry.is_file()
            else "other"
        )
        size = entry.stat(follow_symlinks=False).st_size if kind == "file" else None
        entries.append({"name": entry.name, "type": kind, "size": size})
    return {"path": relative(real), "entries": entries}


@server.tool()
def read_file(path: str) -> dict[str, Any]:
    """Read a text file of the workspace (at most 1 MiB)."""
    real, text = read_text(path)
    return {"path": relative(real), "content": text}


@server.tool()
def write_file(path: str, content: str, append: bool = False) -> dict[str, Any]:
    """Write (or with append=true, add to the end of) a text file of the workspace; folders are created."""
    data = content.encode("utf-8")
    if len(data) > MAX_WRITE:
        raise PathRefused(f"content is {len(data)} bytes; this tool writes at most {MAX_WRITE}")
    real = resolve(path)
    if real.is_dir():
        raise PathRefused(f"{path!r} is a folder")
    resolve(relative(real.parent))  # the folder too (it may not exist yet: realpath of what does)
    real.parent.mkdir(parents=True, exist_ok=True)
    flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(real, flags, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)
    return {"path": relative(real), "written": len(data), "appended": append}


@server.tool()
def search(text: str, path: str = ".", ignore_case: bool = False) -> dict[str, Any]:
    """Find the lines containing `text` in the files under a folder of the workspace (hidden ones
    skipped): each match's file, line number and line."""
    if not text:
        raise PathRefused("text must not be empty")
    base = resolve(path)
    root = workspace()
    needle = text.lower() if ignore_case else text
    files: list[str] = [str(base)] if base.is_file() else []
    if base.is_dir():
        for folder, dirs, names in os.walk(base):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            files += [os.path.join(folder, n) for n in sorted(names) if not n.startswith(".")]
    matches: list[dict[str, Any]] = []
    for file in files:
        try:
            real = resolve(file, root=root)
            if not real.is_file() or real.stat().st_size > MAX_READ:
                continue
            lines = real.read_bytes().decode("utf-8", "replace").splitlines()
        except (PathRefused, OSError):
            continue  # a link out of the workspace or an unreadable file: not searched
        for number, line in enumerate(lines, 1):
            if needle in (line.lower() if ignore_case else line):
                matches.append({"path": relative(real), "line": number, "text": line[:500]})
                if len(matches) >= MAX_MATCHES:
                    return {"matches": matches, "truncated": True}
    return {"matches": matches, "truncated": False}


if __name__ == "__main__":
    server.run("stdio")
