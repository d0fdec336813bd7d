"""MCP servers inside real X desktop sandboxes: confined like the sandbox's other processes.

One desktop without network serves most tests (its servers start once, on first use); one with the
network profile shows the same server reaching the host. A tool that refuses, raises or times out, and
a server killed mid-call, are the agent's invalid step (ActionFailed), never an env error or a hang.
"""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psutil
import pytest

from agent_core import actions as A
from agent_core.agent import AgentConfig, run_episode
from agent_core.policies.base import Policy, PolicyInput, PolicyOutput
from sandbox_workers.agent_env import SandboxEnv
from sandbox_workers.base import ActionFailed, Profile, perform
from sandbox_workers.client import HostClient
from tests.agent_core.fakes import prepared
from tests.sandbox_workers.conftest import reachable, xdesktop_module
from tests.sandbox_workers.hostproc import LIGHT_DESKTOP, TOKEN, host_process

pytestmark = pytest.mark.slow


def _make(base: Any, name: str, **profile: Any) -> Any:
    mod = xdesktop_module()
    p = mod.XDesktopProvider(
        sandbox_id=f"mcp-{name}-{base.name[-10:]}",
        profile=Profile(name=name, provider="xdesktop", **profile),
        root=base / name,
    )
    p.start()
    return p


@pytest.fixture(scope="module")
def desk(xdesktop_tools: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A started desktop (no network) with the default MCP servers."""
    p = _make(reachable(tmp_path_factory.mktemp("mcp")), "desk")
    yield p
    p.stop()


@pytest.fixture
def host_server() -> Iterator[int]:
    """A TCP server on the host's loopback that answers b"hello"; yields its port."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    srv.settimeout(0.2)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except OSError:
                continue
            with conn:
                conn.sendall(b"hello")

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    yield int(srv.getsockname()[1])
    stop.set()
    t.join(2)
    srv.close()


def mcp(p: Any, server: str, tool: str, **arguments: Any) -> Any:
    """The structured result of a tool call made as an agent's action."""
    result = perform(p, A.McpCall(server, tool, arguments))
    assert result is not None and not result["is_error"], result
    return result["structured"]


def refused(p: Any, server: str, tool: str, **arguments: Any) -> str:
    with pytest.raises(ActionFailed) as info:
        perform(p, A.McpCall(server, tool, arguments))
    return str(info.value)


def gone(pids: list[int]) -> bool:
    """Whether none of `pids` runs (a zombie waiting for the host's init to reap it counts as gone)."""
    for pid in pids:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                return False
        except psutil.NoSuchProcess:
            continue
    return True


def command_of(proc: psutil.Process) -> str:
    """A process's command line ("" once it has exited, even if not yet reaped)."""
    try:
        return " ".join(proc.cmdline())
    except psutil.NoSuchProcess:  # ZombieProcess is one
        return ""


def server_procs(p: Any) -> list[psutil.Process]:
    """The host processes of the sandbox's running MCP servers (bwrap and everything under it); a killed
    one not yet reaped (a zombie) or gone meanwhile is left out."""
    out = []
    for pid in p.mcp_hub.pids():
        try:
            top = psutil.Process(pid)
            found = [top, *top.children(recursive=True)]
        except psutil.NoSuchProcess:  # ZombieProcess is one
            continue
        for proc in found:
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    out.append(proc)
            except psutil.NoSuchProcess:
                continue
    return out


def test_tools_lists_every_server_with_its_real_schema(desk: Any) -> None:
    tools = desk.call("mcp_tools", {})["tools"]
    by = {(t["server"], t["name"]): t for t in tools}
    assert set(by) == {
        ("files", "list_dir"), ("files", "read_file"), ("files", "write_file"), ("files", "search"),
        ("shell", "run"), ("records", "lookup"), ("records", "list_keys"),
    }  # fmt: skip
    read = by[("files", "read_file")]
    assert read["input_schema"]["required"] == ["path"]
    assert read["input_schema"]["properties"]["path"]["type"] == "string"
    assert "timeout" in by[("shell", "run")]["input_schema"]["properties"]
    assert all(t["description"] for t in tools)
    assert sorted(desk.mcp_hub.running()) == ["files", "records", "shell"]


def test_files_server_works_inside_the_workspace(desk: Any) -> None:
    desk.put_file("docs/a.txt", b"alpha\nneedle one\n")
    assert mcp(desk, "files", "read_file", path="docs/a.txt")["content"] == "alpha\nneedle one\n"
    assert mcp(desk, "files", "read_file", path="~/docs/a.txt")["path"] == "docs/a.txt"
    assert mcp(desk, "files", "write_file", path="out/b.txt", content="needle two\n")["written"] == 11
    assert desk.get_file("out/b.txt") == b"needle two\n"
    assert os.stat(desk.conf.workspace / "out/b.txt").st_uid == (desk.conf.uid or os.getuid())
    names = {e["name"] for e in mcp(desk, "files", "list_dir", path=".")["entries"]}
    assert {"docs", "out"} <= names
    found = mcp(desk, "files", "search", text="needle")["matches"]
    assert {(m["path"], m["line"]) for m in found} >= {("docs/a.txt", 2), ("out/b.txt", 1)}


@pytest.mark.parametrize(
    ("tool", "arguments"),
    [
        ("read_file", {"path": "../../etc/hostname"}),
        ("read_file", {"path": "/etc/passwd"}),
        ("read_file", {"path": "/home/user/../../etc/passwd"}),
        ("read_file", {"path": "out-link/passwd"}),
        ("read_file", {"path": "passwd-link"}),
        ("write_file", {"path": "../escape.txt", "content": "x"}),
        ("write_file", {"path": "/tmp/escape.txt", "content": "x"}),
        ("write_file", {"path": "tmp-link/escape.txt", "content": "x"}),
        ("list_dir", {"path": ".."}),
        ("search", {"text": "root", "path": "out-link"}),
    ],
)
def test_files_server_refuses_what_resolves_outside_the_workspace(
    desk: Any, tool: str, arguments: dict[str, Any]
) -> None:
    # Symlinks made inside the sandbox, pointing out of the workspace.
    desk.exec("ln -sfn /etc out-link; ln -sf /etc/passwd passwd-link; ln -sfn /tmp tmp-link")
    why = refused(desk, "files", tool, **arguments)
    assert "outside the workspace" in why, why
    assert "escape.txt" not in os.listdir(desk.conf.root) and not (desk.conf.tmp / "escape.txt").exists()


def test_shell_server_sees_only_the_sandbox(desk: Any, tmp_path: Any) -> None:
    secret = reachable(tmp_path) / "host-secret.txt"
    secret.write_text("do not leak")
    secret.chmod(0o644)
    out = mcp(
        desk, "shell", "run", command=f"cat {secret}; cat /work/main/pyproject.toml; ls /root; id -u; pwd"
    )
    assert "do not leak" not in out["stdout"] and "[project]" not in out["stdout"]
    assert out["stderr"].count("No such file or directory") == 3
    uid, cwd = out["stdout"].split()
    assert int(uid) == (desk.conf.uid if desk.conf.uid is not None else os.getuid())
    assert cwd == "/home/user" and out["exit_code"] == 0


def _connect(port: int) -> str:
    connect = f"socket.create_connection(('127.0.0.1', {port}), 2)"
    return f"python3 -c \"import socket; print('GOT', {connect}.recv(5).decode())\""


def test_shell_server_has_no_network_without_the_profile(desk: Any, host_server: int) -> None:
    out = mcp(desk, "shell", "run", command=_connect(host_server))
    assert "GOT hello" not in out["stdout"] and out["exit_code"] != 0
    assert "Connection refused" in out["stderr"]


def test_shell_server_reaches_the_host_with_the_network_profile(
    desk: Any, host_server: int, tmp_path: Any
) -> None:
    net = _make(reachable(tmp_path), "net", network=True, options={"mcp_servers": ["shell"]})
    try:
        out = mcp(net, "shell", "run", command=_connect(host_server))
        assert "GOT hello" in out["stdout"], out
        assert [t["server"] for t in net.call("mcp_tools", {})["tools"]] == ["shell"]
        assert "not available in this sandbox" in refused(net, "files", "read_file", path="x")
        net_pids = [p.pid for p in server_procs(net)]
    finally:
        net.stop()
    assert net.mcp_hub.pids() == [] and gone(net_pids)


def test_server_processes_run_as_the_sandbox_uid_in_its_cgroup(desk: Any) -> None:
    desk.put_file("records.json", b'{"k": 1}')
    mcp(desk, "records", "list_keys")
    mcp(desk, "files", "list_dir")
    mcp(desk, "shell", "run", command="true")
    procs = server_procs(desk)
    pythons = [p for p in procs if p.name().startswith("python")]
    assert len(pythons) >= 3, [command_of(p) for p in procs]
    uid = desk.conf.uid if desk.conf.uid is not None else os.getuid()
    assert all(p.uids().real == uid for p in pythons)
    if desk.cgroup is not None:
        assert {p.pid for p in pythons} <= set(desk.cgroup.pids())
    assert {p.pid for p in procs} <= set(desk.pids())


@pytest.mark.parametrize(
    ("server", "tool", "arguments", "needle"),
    [
        ("files", "read_file", {}, "path"),  # a required argument missing
        ("files", "read_file", {"path": ["x"]}, "path"),  # of the wrong type
        ("files", "read_file", {"path": "no-such-file.txt"}, "does not exist"),
        ("records", "lookup", {"key": "nobody"}, "no record 'nobody'"),  # the tool raises
        ("files", "chmod", {"path": "x"}, "has no tool 'chmod'; valid: list_dir"),
        ("ftp", "get", {}, "unknown MCP server 'ftp'; valid: files, records, shell"),
        ("shell", "run", {"command": "true", "timeout": 9999}, "timeout must be"),
    ],
)
def test_a_tool_error_is_an_invalid_step(
    desk: Any, server: str, tool: str, arguments: Any, needle: str
) -> None:
    desk.put_file("records.json", b'{"alice": 1}')
    assert needle in refused(desk, server, tool, **arguments)


def test_a_tool_error_reaches_the_agent_as_a_rejected_action(desk: Any) -> None:
    env = SandboxEnv(desk, platform="desktop")
    with pytest.raises(ActionFailed, match="does not exist"):
        env.act(A.McpCall("files", "read_file", {"path": "missing.txt"}))
    obs = env.act(A.McpCall("shell", "run", {"command": "echo hi"}))
    assert obs.info["result"]["structured"]["stdout"] == "hi\n"


def test_a_server_killed_between_calls_is_started_again(desk: Any) -> None:
    mcp(desk, "shell", "run", command="true")
    for p in server_procs(desk):
        if "flywheel_mcp_servers.shell" in command_of(p):
            os.kill(p.pid, signal.SIGKILL)
    # The next call finds it gone and starts it again, or (when it comes before the hub has seen the
    # exit) fails at once as an invalid step; the one after that works.
    t0 = time.monotonic()
    try:
        mcp(desk, "shell", "run", command="true")
    except ActionFailed as exc:
        assert "stopped during the call" in str(exc)
    assert time.monotonic() - t0 < 10
    assert mcp(desk, "shell", "run", command="echo again")["stdout"] == "again\n"


def test_a_server_killed_mid_call_is_an_invalid_step_not_a_hang(desk: Any) -> None:
    t0 = time.monotonic()
    # The command kills its own server (its parent) while the call waits for the answer.
    why = refused(desk, "shell", "run", command="kill -9 $PPID; sleep 20", timeout=25)
    assert "stopped during the call" in why, why
    assert time.monotonic() - t0 < 15
    assert mcp(desk, "shell", "run", command="echo back")["stdout"] == "back\n"


def test_a_call_past_its_timeout_is_an_invalid_step_and_the_server_restarts(desk: Any) -> None:
    t0 = time.monotonic()
    with pytest.raises(ActionFailed, match="no answer in 1 s"):
        desk.mcp_call(server="shell", tool="run", arguments={"command": "sleep 30", "timeout": 20}, timeout=1)
    assert time.monotonic() - t0 < 10
    assert mcp(desk, "shell", "run", command="echo fresh")["stdout"] == "fresh\n"


def test_reset_stops_the_servers_and_they_start_again(desk: Any) -> None:
    mcp(desk, "files", "list_dir")
    before = [p.pid for p in server_procs(desk)]
    assert before
    desk.reset()
    assert gone(before)
    assert desk.mcp_hub.running() == []
    desk.put_file("records.json", b'{"after": "reset"}')
    assert mcp(desk, "records", "lookup", key="after")["value"] == "reset"


def test_a_workspace_file_named_like_a_module_cannot_stand_in_for_it(desk: Any) -> None:
    # The servers run in the workspace: a file the agent wrote there (anyio.py, which the SDK imports)
    # must not replace the module and take the tools down (the server runs with python -P).
    desk.put_file("anyio.py", b"raise SystemExit('a workspace file shadowed anyio')\n")
    try:
        if desk.mcp_hub is not None:
            desk.mcp_hub.close()  # the next use starts them again, importing afresh
        assert mcp(desk, "files", "list_dir")["entries"] is not None
    finally:
        desk.exec("rm -f anyio.py")


class _Scripted(Policy):
    """Plays the given actions in turn, then finished()."""

    wants_messages = False

    def __init__(self, actions: list[A.Action]) -> None:
        self.actions = list(actions)

    def act(self, inp: PolicyInput) -> PolicyOutput:
        action = self.actions.pop(0) if self.actions else A.Finished()
        return PolicyOutput(actions=(action,), thought="scripted")


def test_through_the_sandbox_host_tools_are_listed_and_calls_are_steps(tmp_path: Any) -> None:
    with (
        host_process(name="mcp", var=tmp_path, profiles={"desktop": LIGHT_DESKTOP}) as host,
        HostClient(host.url, TOKEN) as client,
        client.acquire("desktop", holder="test:mcp", ttl_s=120, wait_s=60) as sb,
    ):
        tools = sb.call("mcp_tools", servers=["files"])["tools"]
        assert {t["name"] for t in tools} == {"list_dir", "read_file", "write_file", "search"}
        bad = [
            A.McpCall("files", "read_file", {"path": "/etc/passwd"}),
            A.McpCall("files", "rm", {}),
            A.McpCall("nope", "x", {}),
        ]
        good = [A.McpCall("files", "write_file", {"path": "out.txt", "content": "hi"})]
        out = run_episode(
            SandboxEnv(sb, platform="desktop"),
            _Scripted(bad + good),
            prepared(),
            config=AgentConfig(max_consecutive_invalid=len(bad) + 1),
        )
        assert [bool(s.invalid_reason) for s in out.steps] == [True] * len(bad) + [False] * 2
        assert "outside the workspace" in out.steps[0].invalid_reason
        assert out.steps[len(bad)].info["result"]["structured"]["written"] == 2
        assert out.stop_reason == "finished" and out.reward == 1.0
