"""The `shell` MCP server: run a bash command in the sandbox and get its exit code and output.

The command runs as the server does: inside the sandbox (its uid, namespaces, cgroup, network only if
the profile has one), in the workspace, with the desktop's environment. Run inside the sandbox:
``python3 -m flywheel_mcp_servers.shell`` (stdio).
"""

from __future__ import annotations

import os
import signal
import subprocess
from typing import Any

from mcp.server.fastmcp import FastMCP

from ._workspace import workspace

OUTPUT_CAP = 65536
MAX_TIMEOUT = 25.0
"""Below the hub's 30 s for a call (profile option mcp_timeout_s): a slow command is the tool's own
timeout (a result saying so), not a call the hub gives up on and restarts the server for."""

server = FastMCP("shell", log_level="WARNING")


def _cut(data: bytes) -> tuple[str, bool]:
    return data[:OUTPUT_CAP].decode("utf-8", "replace"), len(data) > OUTPUT_CAP


@server.tool()
def run(command: str, timeout: float = 20.0) -> dict[str, Any]:
    """Run a bash command in the workspace; its exit code (null when killed at `timeout` seconds, at
    most 25), stdout and stderr (each cut at 64 KiB)."""
    if "\x00" in command:
        raise ValueError("a command cannot hold a NUL character")
    if not 0 < timeout <= MAX_TIMEOUT:
        raise ValueError(f"timeout must be in (0, {MAX_TIMEOUT:g}] seconds")
    proc = subprocess.Popen(
        ["bash", "-c", command], cwd=workspace(), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    timed_out = False
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        os.killpg(proc.pid, signal.SIGKILL)
        out, err = proc.communicate()
    stdout, cut_out = _cut(out)
    stderr, cut_err = _cut(err)
    return {
        "exit_code": None if timed_out else proc.returncode,
        "stdout": stdout,
        "stderr": stderr,
        "timed_out": timed_out,
        "truncated": cut_out or cut_err,
    }


if __name__ == "__main__":
    server.run("stdio")
