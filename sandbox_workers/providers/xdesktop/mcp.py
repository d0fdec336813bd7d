"""Starting MCP servers inside an X desktop sandbox (the `Spawner` of its `McpHub`).

A server is one more process of the desktop, entering its holder's namespaces as its apps do: the
sandbox's uid, its one process table (the shell tool's `pkill` acts on the desktop's apps), its network
namespace (no network unless the profile has one), its cgroup, its workspace as $HOME and the desktop's
environment (DISPLAY: a shell tool may open windows). The host's Python is not visible there (the venv's
interpreter lives under /root); the sandbox's /usr/bin/python3 runs the server, with two read-only
binds the holder makes (`server_binds`, under /opt/flywheel-mcp, the only thing in the sandbox's /opt):
the venv's site-packages (the `mcp` SDK, compiled for the same Python minor version, checked once) and
`sandbox_workers/mcp/servers` as the package `flywheel_mcp_servers`. Any process of the sandbox can
read them, as the servers' shell tool always could. It runs with `-P`: the workspace (its working
folder) is not on its import path, so a file the agent wrote there (`json.py`, `mcp.py`) cannot stand
in for a module.

A server that cannot start (that Python, a bind its uid cannot read, bwrap refusing) is
`McpServerUnavailable`: a tool error, the sandbox goes on. Only a session that is gone is an EnvError.
"""

from __future__ import annotations

import functools
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import mcp

from sandbox_workers.base import EnvError
from sandbox_workers.mcp.hub import McpHub, McpServerUnavailable, ServerSpec
from sandbox_workers.providers.confine.bwrap import with_env
from sandbox_workers.providers.confine.entering import enter
from sandbox_workers.providers.confine.spawning import SandboxProcess

if TYPE_CHECKING:
    from sandbox_workers.providers.xdesktop.plumbing import DesktopPlumbing

PYTHON = "/usr/bin/python3"
PACKAGE = "flywheel_mcp_servers"
SANDBOX_LIB = "/opt/flywheel-mcp/lib"
SANDBOX_SRC = "/opt/flywheel-mcp/src"
SERVERS_DIR = Path(__file__).resolve().parents[2] / "mcp" / "servers"
DEFAULT_SERVERS = ("files", "shell", "records")
"""The servers a desktop profile offers unless its options say otherwise (`mcp_servers`)."""


def site_packages() -> Path:
    """The site-packages folder the host's `mcp` package is installed in."""
    return Path(mcp.__file__).resolve().parent.parent


@functools.cache
def check_python() -> None:
    """McpServerUnavailable unless the sandbox's Python has the host's minor version (the SDK's compiled
    parts need it); checked once per process (until it passes)."""
    want = f"{sys.version_info[0]}.{sys.version_info[1]}"
    try:
        got = subprocess.run(
            [PYTHON, "-c", "import sys; print(f'{sys.version_info[0]}.{sys.version_info[1]}')"],
            capture_output=True, text=True, timeout=10, check=True,
        ).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        raise McpServerUnavailable(f"MCP servers need {PYTHON} in the sandbox: {exc}") from None
    if got != want:
        raise McpServerUnavailable(
            f"MCP servers need {PYTHON} to be Python {want} (the host venv's), not {got}"
        )


def server_argv(spec: ServerSpec) -> list[str]:
    """The command line of `spec`'s server inside the sandbox."""
    return [PYTHON, "-s", "-B", "-P", "-m", f"{PACKAGE}.{spec.module}"]


def server_binds() -> tuple[tuple[str, str, bool], ...]:
    """The read-only binds the servers need, made once into the desktop's holder (see the module's note)."""
    return (
        (str(site_packages()), SANDBOX_LIB, False),
        (str(SERVERS_DIR), f"{SANDBOX_SRC}/{PACKAGE}", False),
    )


def desktop_hub(provider: DesktopPlumbing) -> McpHub:
    """The MCP hub of an X desktop sandbox (the profile's `mcp_servers`, DEFAULT_SERVERS by default)."""
    opts = provider.profile.options
    allowed = opts.get("mcp_servers", DEFAULT_SERVERS)
    if not isinstance(allowed, list | tuple) or not all(isinstance(n, str) for n in allowed):
        raise McpServerUnavailable("profile option mcp_servers must be a list of server names")

    def spawner(spec: ServerSpec) -> SandboxProcess:
        check_python()
        conf, holder = provider.conf, provider.holder
        if conf is None or holder is None or holder.init_pid is None or not holder.alive():
            raise EnvError("the sandbox's session is gone (reset restarts it)")
        env = {"PYTHONPATH": f"{SANDBOX_SRC}:{SANDBOX_LIB}", "PYTHONDONTWRITEBYTECODE": "1"}
        try:
            proc = enter(
                with_env(conf, env), holder.init_pid, server_argv(spec), cgroup=provider.cgroup,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            )  # fmt: skip
        except EnvError as exc:
            if not holder.alive():  # the session went while it started: that is the sandbox failing
                raise
            raise McpServerUnavailable(f"the MCP server {spec.name!r} could not start: {exc}") from exc
        proc.init_pid()  # read now: the hub may kill the tree from its loop's thread later
        return proc

    return McpHub(
        spawner=spawner,
        allowed=list(allowed),
        start_timeout=float(opts.get("mcp_start_timeout_s", 20)),
        call_timeout=float(opts.get("mcp_timeout_s", 30)),
        label=f"xdesktop {provider.sandbox_id}",
    )
