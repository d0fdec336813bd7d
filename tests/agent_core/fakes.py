"""A scripted environment and policy for agent-loop tests (the one boundary these tests fake)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from agent_core import actions as A
from agent_core.env import ActionRejected, EnvError, ExecOutput, Obs
from agent_core.policies.base import Policy, PolicyInput, PolicyOutput
from agent_core.tasks.runner import PreparedTask
from agent_core.tasks.spec import parse_task

PNG = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010802000000907753de"
    "0000000c4944415408d763f8cfc000000301010018dd8db00000000049454e44ae426082"
)


class FakeEnv:
    """Records actions; files live in a dict; `fail_after` raises EnvError at that action."""

    platform = "desktop"

    def __init__(self, *, width: int = 1280, height: int = 720, fail_after: int | None = None) -> None:
        self.width, self.height = width, height
        self.acted: list[A.Action] = []
        self.files: dict[str, bytes] = {}
        self.fail_after = fail_after
        self.observed = 0

    def observe(self) -> Obs:
        self.observed += 1
        return Obs(screenshot=PNG, width=self.width, height=self.height, info={"n": len(self.acted)})

    def act(self, action: A.Action) -> Obs:
        if self.fail_after is not None and len(self.acted) >= self.fail_after:
            raise EnvError("the display died")
        if isinstance(action, A.McpCall):
            raise ActionRejected("no MCP server is attached")
        self.acted.append(action)
        info: dict[str, Any] = {"n": len(self.acted)}
        if isinstance(action, A.Terminal):
            info["result"] = {"exit_code": 0, "stdout": action.command.upper()}
        if isinstance(action, A.FileWrite):
            self.files[action.path] = action.content.encode()
        return Obs(screenshot=PNG, width=self.width, height=self.height, info=info)

    def exec(self, command: str, *, timeout: float = 30.0) -> ExecOutput:
        return ExecOutput(exit_code=0, stdout="")

    def put_file(self, path: str, data: bytes) -> None:
        self.files[path] = data

    def get_file(self, path: str) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path]

    def call(self, method: str, **params: Any) -> Any:
        return {}


class TextPolicy(Policy):
    """Answers with the given texts in turn (then finished())."""

    coords = "absolute"

    def __init__(self, texts: Iterable[str]) -> None:
        self.texts = list(texts)
        self.inputs: list[PolicyInput] = []

    def act(self, inp: PolicyInput) -> PolicyOutput:
        self.inputs.append(inp)
        text = self.texts.pop(0) if self.texts else "Thought: done\nAction: finished()"
        return PolicyOutput(text=text, token_ids=(1, 2), logprobs=(-0.1, -0.2))


def prepared(checks: list[dict[str, Any]] | None = None, **spec: Any) -> PreparedTask:
    doc = {
        "id": "test/fake",
        "instruction": "Write hi to out.txt",
        "platform": "desktop",
        "limits": {"max_steps": 10, "max_seconds": 60},
        "checker": {
            "checks": checks
            or [{"probe": {"op": "file", "path": "out.txt"}, "metric": "exact_match", "expected": "hi"}]
        },
        **spec,
    }
    s = parse_task(doc)
    return PreparedTask(spec=s, seed=0, params={}, instruction=s.instruction)
