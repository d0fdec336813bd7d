"""The MCP hub at its one boundary, the spawner: the real servers run as plain host processes here
(a temporary folder as their workspace), so the hub's own behaviour is tested without a sandbox.
Confined servers in real desktops: test_mcp_real.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from sandbox_workers.base import ActionFailed, EnvError, SandboxError
from sandbox_workers.mcp.hub import (
    SERVERS,
    McpHub,
    McpServerUnavailable,
    McpToolError,
    ServerSpec,
    server_spec,
)
from sandbox_workers.mcp.servers._workspace import PathRefused, resolve

pytestmark = pytest.mark.slow
REPO = Path(__file__).resolve().parents[2]


def host_spawner(
    workspace: Path, argv: Callable[[ServerSpec], list[str]] | None = None
) -> Callable[..., subprocess.Popen[bytes]]:
    def spawn(spec: ServerSpec) -> subprocess.Popen[bytes]:
        cmd = argv(spec) if argv else [sys.executable, "-m", f"sandbox_workers.mcp.servers.{spec.module}"]
        env = {**os.environ, "FLYWHEEL_MCP_WORKSPACE": str(workspace), "PYTHONPATH": str(REPO)}
        pipe = subprocess.PIPE
        return subprocess.Popen(
            cmd, stdin=pipe, stdout=pipe, stderr=pipe, env=env, cwd=workspace, start_new_session=True
        )

    return spawn


@pytest.fixture(scope="module")
def workspace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    ws = tmp_path_factory.mktemp("ws")
    (ws / "notes.txt").write_text("one\ntwo\n")
    (ws / "records.json").write_text('{"SKU-7": {"price": 12.5}, "sku-9": 3}')
    return ws


@pytest.fixture(scope="module")
def hub(workspace: Path) -> Iterator[McpHub]:
    h = McpHub(spawner=host_spawner(workspace), allowed=["files", "records"], call_timeout=10, label="test")
    yield h
    h.close()


def test_tools_come_from_the_servers_themselves(hub: McpHub) -> None:
    tools = hub.tools()
    assert {(t["server"], t["name"]) for t in tools} == {
        ("files", "list_dir"), ("files", "read_file"), ("files", "write_file"), ("files", "search"),
        ("records", "lookup"), ("records", "list_keys"),
    }  # fmt: skip
    lookup = next(t for t in tools if t["name"] == "lookup")
    assert lookup["input_schema"]["required"] == ["key"]
    assert "record" in lookup["description"]


def test_a_call_gives_text_and_structured_content(hub: McpHub, workspace: Path) -> None:
    out = hub.call("files", "read_file", {"path": "notes.txt"})
    assert out["server"] == "files" and out["tool"] == "read_file" and out["is_error"] is False
    assert out["structured"] == {"path": "notes.txt", "content": "one\ntwo\n"}
    assert '"content": "one\\ntwo\\n"' in out["content"]
    assert hub.call("records", "lookup", {"key": "sku-7"})["structured"] == {
        "key": "SKU-7",
        "value": {"price": 12.5},
    }
    hub.call("files", "write_file", {"path": "sub/new.txt", "content": "x", "append": True})
    assert (workspace / "sub/new.txt").read_text() == "x"


def test_a_tool_that_raises_is_an_error_result(hub: McpHub) -> None:
    out = hub.call("records", "lookup", {"key": "SKU"})
    assert out["is_error"] is True
    assert "no record 'SKU'" in out["content"] and "SKU-7, sku-9" in out["content"]
    bad = hub.call("files", "read_file", {"path": 7})
    assert bad["is_error"] is True and "path" in bad["content"]


@pytest.mark.parametrize(
    ("server", "tool", "arguments", "needle"),
    [
        ("files", "delete", {}, "has no tool 'delete'; valid: list_dir, read_file, write_file, search"),
        (
            "shell",
            "run",
            {"command": "id"},
            "'shell' is not available in this sandbox; valid: files, records",
        ),
        ("gopher", "get", {}, "unknown MCP server 'gopher'; valid: files, records, shell"),
        ("files", "read_file", ["notes.txt"], "arguments must be a JSON object, not list"),
    ],
)
def test_calls_the_hub_refuses_are_the_agents_invalid_step(
    hub: McpHub, server: str, tool: str, arguments: object, needle: str
) -> None:
    with pytest.raises(McpToolError, match=needle) as info:
        hub.call(server, tool, arguments)  # type: ignore[arg-type]
    assert isinstance(info.value, ActionFailed)


def test_a_server_killed_between_calls_starts_again(hub: McpHub) -> None:
    hub.call("files", "list_dir", {})
    first = hub.pids()
    for pid in first:
        os.kill(pid, 9)
    deadline = time.monotonic() + 5
    while hub.running() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert hub.call("files", "list_dir", {})["is_error"] is False
    assert set(hub.pids()).isdisjoint(first)


def test_close_stops_every_server(workspace: Path) -> None:
    h = McpHub(spawner=host_spawner(workspace), allowed=["records"], label="closing")
    h.tools()
    (pid,) = h.pids()
    h.close()
    h.close()
    assert h.running() == [] and h.pids() == []
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


def test_a_server_that_cannot_start_is_a_tool_error_not_a_broken_sandbox(workspace: Path) -> None:
    # Issue 34: the Tools panel asked for the tools, the server could not start, and the host replaced the
    # leased sandbox (an EnvError breaks the lease). The tools are missing, not the computer.
    def crashing(spec: ServerSpec) -> list[str]:
        return [sys.executable, "-c", "import sys; sys.stderr.write('no module named mcp'); sys.exit(3)"]

    h = McpHub(spawner=host_spawner(workspace, crashing), allowed=["files"], start_timeout=10, label="crash")
    with pytest.raises(McpServerUnavailable, match="'files' could not start.*no module named mcp") as info:
        h.tools()
    assert isinstance(info.value, ActionFailed) and not isinstance(info.value, EnvError)
    assert str(info.value).endswith("the next use tries to start it again")
    # An agent's call to it is an invalid step with that reason, and the next use tries to start it again.
    with pytest.raises(McpServerUnavailable, match="could not start"):
        h.call("files", "list_dir", {})
    assert h.pids() == []


def test_a_server_that_never_answers_is_a_tool_error_in_bounded_time(workspace: Path) -> None:
    def silent(spec: ServerSpec) -> list[str]:
        return [sys.executable, "-c", "import time; time.sleep(60)"]

    h = McpHub(spawner=host_spawner(workspace, silent), allowed=["files"], start_timeout=1, label="silent")
    t0 = time.monotonic()
    with pytest.raises(McpServerUnavailable, match="no answer in 1 s"):
        h.call("files", "list_dir", {})
    assert time.monotonic() - t0 < 10
    assert h.pids() == []


def test_a_spawner_that_fails_is_a_tool_error_unless_the_sandbox_is_gone(workspace: Path) -> None:
    def refusing(spec: ServerSpec) -> subprocess.Popen[bytes]:
        raise OSError(13, "Permission denied", "/opt/flywheel-mcp/lib")

    h = McpHub(spawner=refusing, allowed=["files", "records"], label="refused")
    with pytest.raises(McpServerUnavailable, match="'files' could not start: .*Permission denied"):
        h.tools()

    # The spawner's EnvError says the sandbox's own session is gone: that one is the machinery failing.
    started = host_spawner(workspace)

    def gone_after_one(spec: ServerSpec) -> subprocess.Popen[bytes]:
        if spec.name == "records":
            raise EnvError("the sandbox's session is gone (reset restarts it)")
        return started(spec)

    h = McpHub(spawner=gone_after_one, allowed=["files", "records"], label="gone")
    with pytest.raises(EnvError, match="session is gone"):
        h.tools()
    assert h.pids() == [] and h.running() == []  # the one started beside it was stopped


def test_the_registry_names_the_valid_servers() -> None:
    assert set(SERVERS) == {"files", "shell", "records"}
    with pytest.raises(McpToolError, match="valid: files, records, shell"):
        server_spec("ftp")
    with pytest.raises(SandboxError, match="mcp_servers: unknown server 'ftp'"):
        McpHub(spawner=host_spawner(Path("/")), allowed=["ftp"])


def test_workspace_paths_never_resolve_outside(tmp_path: Path) -> None:
    ws = tmp_path / "ws"
    (ws / "d").mkdir(parents=True)
    (ws / "d/f.txt").write_text("x")
    (ws / "out").symlink_to(tmp_path)
    (ws / "in").symlink_to(ws / "d")
    root = ws.resolve()
    assert resolve("d/f.txt", root=root) == root / "d/f.txt"
    assert resolve("~/d/f.txt", root=root) == root / "d/f.txt"
    assert resolve(str(root / "d"), root=root) == root / "d"
    assert resolve("in/f.txt", root=root) == root / "d/f.txt"
    assert resolve("", root=root) == root
    assert resolve("out/ws/d", root=root) == root / "d"  # out and back in
    for bad in ("..", "../x", "/etc/passwd", "out", "out/other", "d/../../x", "bad\x00path"):
        with pytest.raises(PathRefused):
            resolve(bad, root=root)
