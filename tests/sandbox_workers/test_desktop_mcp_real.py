"""The desktop suite's MCP hybrid tasks on a real X desktop: the oracle (tool calls and GUI input)
scores 1, doing nothing scores 0, and the task's tools reach the agent's prompt.

One in-process desktop (the `desktop` profile, with its default MCP servers) serves the module; each
episode starts from `reset()`, as a pooled sandbox would. `make test` runs two tasks (one seed each);
`make verify-suites` (FULL_SWEEPS=1) runs every MCP task on two seeds.
"""

from __future__ import annotations

import shutil
import time
from typing import Any

import pytest

from agent_core.agent import run_episode
from agent_core.policies import make_policy
from agent_core.prompts import system_prompt
from agent_core.suites import desktop as suite
from agent_core.tasks.runner import TaskSetupError, prepare
from agent_core.tasks.spec import TaskSpec, TaskSpecError, parse_task
from agent_core.thoughts import is_placeholder_thought
from sandbox_workers.agent_env import SandboxEnv
from tests.sweeps import sample

MCP_TASKS = [t for t in suite.tasks() if t.mcp]
SEEDS = (0, 1)
SAMPLE = {("hybrid/mcp-price-into-quote", 0), ("hybrid/mcp-ticket-into-form", 1)}
CASES = sample(
    (pytest.param(t, s, id=f"{t.id.removeprefix(suite.PREFIX)}-{s}") for t in MCP_TASKS for s in SEEDS),
    lambda p: (p.values[0].id.removeprefix(suite.PREFIX), p.values[1]) in SAMPLE,
)
HELPERS = ("xdotool", "xprop")


def test_there_are_at_least_six_mcp_tasks_each_with_gui_and_tools() -> None:
    assert len(MCP_TASKS) >= 6
    for task in MCP_TASKS:
        assert task.id.startswith("desktop/hybrid/mcp-") and "mcp" in task.tags
        assert {s.op for s in task.setup} & {"launch"}, f"{task.id} opens no GUI app"
        assert set(task.mcp) <= {"files", "shell", "records"}


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize(("task", "seed"), CASES)
def test_oracle_scores_1_and_doing_nothing_0(xdesktop_sandbox: Any, task: TaskSpec, seed: int) -> None:
    apps = [str(s.args["app"]) for s in task.setup if s.op == "launch"]
    missing = [p for p in (*HELPERS, *apps) if shutil.which(p) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
    sb = xdesktop_sandbox
    env = SandboxEnv(sb, platform="desktop")
    for policy, want in (("oracle", 1.0), ("noop", 0.0)):
        t0 = time.monotonic()
        sb.reset()
        prepared = prepare(task, env, seed=seed)
        # The prompt lists the tools the task names, read from the sandbox's own servers.
        assert {t["server"] for t in prepared.tools} == set(task.mcp)
        prompt = system_prompt("desktop", tools=prepared.tools)
        assert all(f"- {t['server']}.{t['name']}: " in prompt for t in prepared.tools)
        out = run_episode(env, make_policy(policy), prepared)
        assert out.check is not None
        why = f"{policy}: {out.stop_reason} after {len(out.steps)} steps; checks {out.check.details}"
        assert out.stop_reason == "finished", why
        assert out.reward == want, why
        if policy == "oracle":
            kinds = {s.action.kind for s in out.steps if s.action is not None}
            assert "mcp_call" in kinds and kinds - {"mcp_call", "finished"}, kinds  # both halves
            stand_ins = [(s.index, s.thought) for s in out.steps if is_placeholder_thought(s.thought)]
            assert not stand_ins, stand_ins
        print(f"{task.id} seed {seed} {policy}: {time.monotonic() - t0:.1f} s, {len(out.steps)} steps")


@pytest.mark.parametrize(
    ("mcp", "needle"),
    [("records", "mcp: must be a list"), ([1], "mcp: must be a list"), (["files", "files"], "distinct")],
)
def test_a_bad_mcp_field_names_itself(mcp: Any, needle: str) -> None:
    doc = {**MCP_TASKS[0].to_dict(), "mcp": mcp}
    with pytest.raises(TaskSpecError, match=needle):
        parse_task(doc)


class _Env:
    """An environment whose sandbox runs only the `shell` server (the one boundary the runner calls)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def call(self, method: str, **params: Any) -> Any:
        self.calls.append((method, params))
        tool = {"server": "shell", "name": "run", "description": "Run.", "input_schema": {}}
        return {"tools": [tool] if "shell" in params["servers"] else []}


def test_prepare_fetches_the_named_servers_tools_and_refuses_a_missing_one() -> None:
    spec = parse_task({**MCP_TASKS[0].to_dict(), "setup": [], "mcp": ["shell"]})
    env = _Env()
    prepared = prepare(spec, env, seed=0)  # type: ignore[arg-type]
    assert env.calls == [("mcp_tools", {"servers": ["shell"]})]
    assert [t["name"] for t in prepared.tools] == ["run"]
    with pytest.raises(TaskSetupError, match="runs no MCP server records"):
        prepare(parse_task({**spec.to_dict(), "mcp": ["records"]}), _Env(), seed=0)  # type: ignore[arg-type]
