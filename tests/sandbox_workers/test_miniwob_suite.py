"""The MiniWoB++ suite end to end in a real (confined) browser sandbox, through the agent loop.

Every oracle must solve its task (reward 1) and doing nothing must score 0, for two seeds each; every
task of the suite must start and score 0 untouched. `make verify-suites` runs all of it (about 4
minutes); `make test` runs a fixed sample: every fourth solved task on one seed, every sixth task started.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

import pytest

from agent_core.agent import run_episode
from agent_core.policies import make_policy
from agent_core.suites import miniwob as suite
from agent_core.tasks.oracles import oracle_names
from agent_core.tasks.runner import evaluate, prepare
from agent_core.thoughts import is_placeholder_thought
from sandbox_workers.agent_env import SandboxEnv
from sandbox_workers.providers.browser import BrowserProvider
from tests.sandbox_workers.conftest import describe, started_browser
from tests.sweeps import every_nth, sample

pytestmark = [
    pytest.mark.slow,
    pytest.mark.sweep,
    pytest.mark.skipif(not os.access("/usr/bin/chromium", os.X_OK), reason="no Chromium"),
]
SEEDS = (1, 2)
SPECS = {spec.id: spec for spec in suite.tasks()}
SOLVED = sorted(name for name in oracle_names() if name.startswith(suite.PREFIX))


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrowserProvider]:
    with started_browser(tmp_path_factory, "mwsuite", 63) as provider:
        yield provider


@pytest.fixture(scope="module")
def env(browser: BrowserProvider) -> SandboxEnv:
    return SandboxEnv(browser, platform="browser")


CASES = sample(
    ((task_id, seed) for task_id in SOLVED for seed in SEEDS),
    lambda c: SOLVED.index(c[0]) % 4 == 0 and c[1] == SEEDS[SOLVED.index(c[0]) // 4 % len(SEEDS)],
)


@pytest.mark.parametrize(("task_id", "seed"), CASES)
def test_oracle_solves_and_noop_does_not(env: SandboxEnv, task_id: str, seed: int) -> None:
    spec = SPECS[task_id]
    assert spec.oracle == task_id
    outcome = run_episode(env, make_policy("oracle"), prepare(spec, env, seed=seed))
    assert outcome.reward == 1.0, describe(outcome)
    # The page ends the episode on the answer (env_done); an oracle whose last action is not the
    # answer finishes itself.
    assert outcome.stop_reason in ("env_done", "finished"), describe(outcome)
    assert len(outcome.steps) <= spec.limits.max_steps
    # Oracle demonstrations are SFT data: every step says what it sees and why, never a stand-in.
    stand_ins = [(s.index, s.thought) for s in outcome.steps if is_placeholder_thought(s.thought)]
    assert not stand_ins, stand_ins

    outcome = run_episode(env, make_policy("noop"), prepare(spec, env, seed=seed))
    assert outcome.reward == 0.0, describe(outcome)


def test_thinking_time_does_not_run_the_episode_clock(env: SandboxEnv) -> None:
    # Page time is paused between actions: a policy may think past the task's 10 s limit.
    spec = SPECS["miniwob/click-test"]
    prepared = prepare(spec, env, seed=3)
    before = env.call("virtual_time", mode="pause")["page_time_ms"]
    time.sleep(1.0)
    after = env.call("virtual_time", mode="pause")["page_time_ms"]
    assert after == before
    assert env.call("miniwob_reward")["done"] is False
    outcome = run_episode(env, make_policy("oracle"), prepared)
    assert outcome.reward == 1.0, describe(outcome)
    assert env.call("miniwob_reward")["reward"] > 0.9  # the time-scaled reward saw almost no page time


def test_every_task_starts_and_scores_zero_untouched(env: SandboxEnv) -> None:
    failures = []
    for task_id in every_nth(sorted(SPECS), 6):
        spec = SPECS[task_id]
        try:
            prepared = prepare(spec, env, seed=1)
            env.observe()
            check = evaluate(prepared, env)
        except Exception as exc:  # noqa: BLE001 - collect every broken task, then fail once
            failures.append(f"{task_id}: {type(exc).__name__}: {exc}")
            continue
        if check.reward != 0.0 or not prepared.instruction.strip():
            failures.append(f"{task_id}: reward {check.reward}, instruction {prepared.instruction!r}")
    assert not failures, failures
