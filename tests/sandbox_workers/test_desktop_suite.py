"""The Linux desktop suite on a real X desktop: every task's oracle scores 1, doing nothing scores 0.

One in-process xdesktop sandbox (the `desktop` profile: xterm at start) serves the whole module; each
episode starts from `reset()`, as a pooled sandbox would. `make test` runs a fixed sample (two tasks of
each app, one seed each, about 40 s); `make verify-suites` runs every task on two seeds (about 3.5
minutes on two cores); DESKTOP_SUITE_SEEDS=N runs seeds 0..N-1 (a longer hunt for flaky oracles).
"""

from __future__ import annotations

import os
import shutil
import time
from typing import Any

import pytest

from agent_core.agent import run_episode
from agent_core.policies import make_policy
from agent_core.suites import desktop as suite
from agent_core.tasks.runner import prepare
from agent_core.tasks.spec import TaskSpec
from agent_core.thoughts import is_placeholder_thought
from sandbox_workers.agent_env import SandboxEnv
from tests.sweeps import sample

SEEDS = tuple(range(int(os.environ.get("DESKTOP_SUITE_SEEDS", "2"))))
# The sample: two tasks of each app (terminal, editor, files, browser, hybrid), one seed each.
SAMPLE = {
    ("terminal/count-lines", 1), ("terminal/run-script", 0), ("editor/merge-tabs", 1),
    ("editor/save-new-file", 0), ("files/drag-into-folder", 1), ("files/rename", 0),
    ("browser/new-tab", 0), ("browser/fill-form", 1), ("hybrid/code-hash", 0), ("hybrid/receipt-total", 1),
}  # fmt: skip
CASES = sample(
    (pytest.param(t, s, id=f"{t.id.removeprefix(suite.PREFIX)}-{s}") for t in suite.tasks() for s in SEEDS),
    lambda p: (p.values[0].id.removeprefix(suite.PREFIX), p.values[1]) in SAMPLE,
)
HELPERS = ("xdotool", "xprop")


def _missing(task: TaskSpec) -> list[str]:
    apps = [str(s.args["app"]) for s in task.setup if s.op == "launch"]
    return [p for p in (*HELPERS, *apps) if shutil.which(p) is None]


@pytest.mark.slow
@pytest.mark.sweep
@pytest.mark.parametrize(("task", "seed"), CASES)
def test_oracle_scores_1_and_doing_nothing_0(xdesktop_sandbox: Any, task: TaskSpec, seed: int) -> None:
    missing = _missing(task)
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")
    sb = xdesktop_sandbox
    env = SandboxEnv(sb, platform="desktop")
    for policy, want in (("oracle", 1.0), ("noop", 0.0)):
        t0 = time.monotonic()
        sb.reset()
        prepared = prepare(task, env, seed=seed)
        out = run_episode(env, make_policy(policy), prepared)
        assert out.check is not None
        why = f"{policy}: {out.stop_reason} after {len(out.steps)} steps; checks {out.check.details}"
        assert out.stop_reason == "finished", why
        assert out.reward == want, why
        if policy == "oracle":  # its demonstrations are SFT data: a reason for every step, no stand-in
            stand_ins = [(s.index, s.thought) for s in out.steps if is_placeholder_thought(s.thought)]
            assert not stand_ins, stand_ins
        print(f"{task.id} seed {seed} {policy}: {time.monotonic() - t0:.1f} s, {len(out.steps)} steps")
