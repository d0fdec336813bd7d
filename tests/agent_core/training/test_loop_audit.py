"""The RL loop's audit defects, each through a real RLTrainer on a tiny model with a scripted source:
DAPO's dynamic sampling (a group that all agrees fills no iteration; an iteration that trained nothing
publishes nothing), the experience pool's same-instance and age rule, and the random streams a resumed
run carries on with."""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_core.rl.curation import ExperiencePool
from agent_core.rl.episodes import RLEpisode, RLTurn
from agent_core.training.config import validate_config
from agent_core.training.errors import TrainingError
from agent_core.training.runner import run
from agent_core.training.tiny_policy import build_tiny_policy
from agent_core.training.toy import oracle_examples
from agent_core.training.types import NullHooks, RunSpec

torch = pytest.importorskip("torch")
TASK = "toy/buttons-2"

Script = Callable[[int, int], list[tuple[float, int | None]]]
"""(request number from 0, rollouts asked) -> (reward, policy version or None for the published one)
of each rollout of that request."""


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "base"
    return build_tiny_policy(path, hidden_size=32, num_layers=1, num_heads=2, vocab_size=600)


class ScriptedSource:
    """Rollouts of one toy page whose rewards and policy versions a script gives per request; each
    poll returns every rollout asked for, and draws from the random streams as a sampler would
    (what it drew is kept in `draws`)."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.requests: list[tuple[str, int, int]] = []
        self.asked = 0
        self.seed = 0
        self.version = 0
        self.published: list[int] = []
        self.draws: list[tuple[list[float], float]] = []
        ex = oracle_examples([TASK], range(7, 8))[0]
        self.turn = RLTurn(ex.messages, ex.a11y, (1, 2), (-0.1, -0.1), parsed=True)

    def tasks(self) -> list[str]:
        return [TASK]

    def publish(self, version: int, model_dir: Path) -> None:
        self.version = version
        self.published.append(version)

    def request(self, task_id: str, n: int, *, max_steps: int) -> int:
        self.seed += 1
        self.requests.append((task_id, self.seed, n))
        return self.seed

    def pending(self) -> int:
        return sum(n for _, _, n in self.requests)

    def poll(self, timeout: float) -> list[RLEpisode]:
        self.draws.append((torch.rand(2).tolist(), random.random()))
        out = []
        for task, seed, n in self.requests:
            for reward, version in self.script(self.asked, n):
                v = self.version if version is None else version
                out.append(RLEpisode(task, seed, reward, (self.turn,), v, steps=1))
            self.asked += 1
        self.requests = []
        return out

    def utilisation(self) -> float | None:
        return None

    def close(self) -> None: ...


def cycle(*patterns: tuple[float, ...]) -> Script:
    """Request k gets the rewards patterns[k % len(patterns)], from the published policy."""
    return lambda k, n: [(r, None) for r in patterns[k % len(patterns)][:n]]


GRPO = {"iterations": 3, "episodes_per_iteration": 2, "min_rollouts": 2, "max_rollouts": 2,
        "minibatch_size": 4, "entropy_top": 1.0, "checkpoint_every": 100, "pool_size": 0}  # fmt: skip


class LogHooks(NullHooks):
    def __init__(self) -> None:
        super().__init__(quiet=True)
        self.lines: list[str] = []

    def on_log(self, message: str) -> None:
        self.lines.append(message)


# --- 1. dynamic sampling ---


def test_groups_that_all_agree_fill_no_iteration_sampling_goes_on_and_every_iteration_trains(
    base: Path, tmp_path: Path
) -> None:
    # Two of every three requests all fail or all succeed: before, they counted toward the iteration's
    # episodes and the first iteration (its first two requests: all failed, all solved) trained nothing.
    source = ScriptedSource(cycle((0.0, 0.0), (1.0, 1.0), (0.0, 1.0)))
    hooks = LogHooks()
    result = run(RunSpec("grpo", validate_config("grpo", GRPO), base, tmp_path), hooks, source=source)
    assert result.status == "succeeded" and result.step == 3
    metrics = [m for _, m in hooks.metrics]
    assert all(m["rl/turns_trained"] > 0 and m["rl/episodes"] >= 2 for m in metrics), metrics
    # Requests 1 and 2 agreed; 3 and 4 came back together, and 4 agreed too.
    assert metrics[0]["rl/groups_uninformative"] == 3 and metrics[0]["rl/sampled_episodes"] == 8
    for m in metrics:
        # Every episode that came back was trained on or sat in a group that agreed.
        assert m["rl/sampled_episodes"] == m["rl/episodes"] + 2 * m["rl/groups_uninformative"]
    # Success measures the policy: the groups that agreed count too (3 of requests 1-4's 8 succeeded).
    assert metrics[0]["rl/success"] == pytest.approx(3 / 8)
    assert source.published == [0, 1, 2, 3]
    assert all("group(s) all alike" in line for line in hooks.lines if line.startswith("iteration"))


def test_rollouts_that_never_disagree_fail_the_run_saying_why_and_publish_nothing(
    base: Path, tmp_path: Path
) -> None:
    source = ScriptedSource(cycle((0.0, 0.0), (1.0, 1.0)))
    with pytest.raises(TrainingError) as err:
        run(RunSpec("grpo", validate_config("grpo", GRPO), base, tmp_path), NullHooks(quiet=True),
            source=source)  # fmt: skip
    message = str(err.value)
    # UNUSABLE_LIMIT (4) iterations' worth (2) of agreeing groups in a row, each counting one: 8 groups,
    # 16 episodes (a group counted per episode stopped healthy runs on mostly solved tasks).
    assert "GRPO stopped at iteration 1: the last 16 episodes were all unusable" in message
    assert "8 group(s) of rollouts all scored alike (4 all failed, 4 all solved)" in message
    assert source.published == [0]  # before, every empty iteration published a new version


def test_an_iteration_that_trains_no_policy_turn_publishes_no_version_and_says_so(
    base: Path, tmp_path: Path
) -> None:
    # PPO's first iteration trains only the critic (value_pretrain_steps 1): the policy is unchanged.
    source = ScriptedSource(cycle((0.0,), (1.0,)))
    hooks = LogHooks()
    cfg = validate_config("ppo", {"iterations": 3, "episodes_per_iteration": 2, "value_pretrain_steps": 1,
                                  "minibatch_size": 4, "checkpoint_every": 1})  # fmt: skip
    result = run(RunSpec("ppo", cfg, base, tmp_path), hooks, source=source)
    assert result.status == "succeeded" and result.step == 3
    assert [m["rl/turns_trained"] for _, m in hooks.metrics][0] == 0
    # Before: v1 for the critic-only iteration, its weights those of v0 (and v0's rollouts "stale").
    assert source.published == [0, 1, 2]
    first = next(line for line in hooks.lines if line.startswith("iteration 1/3"))
    assert "trained nothing of the policy" in first and "no new version" in first
    state = torch.load(result.checkpoint / "trainer_state.pt", weights_only=False)
    assert state["version"] == 2 and state["versions_seen"] == [0, 1, 2]


# --- 2. the experience pool: the same instance, not too old ---


def _ep(seed: int, reward: float, version: int) -> RLEpisode:
    turn = RLTurn([{"role": "user", "content": "x"}], None, (5,), (-0.5,))
    return RLEpisode(TASK, seed, reward, (turn,), version)


def test_the_pool_injects_only_a_success_of_the_same_instance() -> None:
    pool = ExperiencePool(4, max_age=2)
    pool.add(_ep(seed=1, reward=1.0, version=0))
    other = [_ep(2, 0.0, 0), _ep(2, 0.0, 0)]
    assert pool.inject(other) == (other, False)  # seed 1 solved another problem than seed 2
    out, injected = pool.inject([_ep(1, 0.0, 0), _ep(1, 0.0, 0)])
    assert injected and out[1].seed == 1 and out[1].success and out[1].injected


def test_the_pool_injects_no_success_older_than_pool_max_age() -> None:
    pool = ExperiencePool(4, max_age=2)
    pool.add(_ep(seed=1, reward=1.0, version=0))
    pool.advance(2)  # two versions behind: still young enough
    assert pool.inject([_ep(1, 0.0, 2), _ep(1, 0.0, 2)])[1]
    pool.advance(3)
    assert pool.inject([_ep(1, 0.0, 3), _ep(1, 0.0, 3)]) == ([_ep(1, 0.0, 3), _ep(1, 0.0, 3)], False)
    assert len(pool) == 0  # and forgotten
    pool.add(_ep(seed=1, reward=1.0, version=0))  # too old to keep at all
    assert len(pool) == 0


def test_the_trainer_rescues_a_group_with_its_own_late_success_only(base: Path, tmp_path: Path) -> None:
    """Request 1's one success came from a policy too old to train on (lag 2 > max_policy_lag 1) but
    young enough for the pool (pool_max_age 2): its group of failures learns from it. Request 2's
    failures get no other instance's success, request 3's none older than pool_max_age."""
    from agent_core.training.rl_trainer import RLTrainer

    def script(k: int, n: int) -> list[tuple[float, int | None]]:
        late = {0: [(1.0, 1)], 1: [(0.0, None)], 2: [(1.0, 0)]}.get(k, [(1.0, None)])
        return late + [(0.0, None)] * (n - 1)

    cfg = validate_config("grpo", {**GRPO, "episodes_per_iteration": 4, "min_rollouts": 3,
                                   "max_rollouts": 3, "pool_size": 4, "pool_max_age": 2})  # fmt: skip
    trainer = RLTrainer(RunSpec("grpo", cfg, base, tmp_path), NullHooks(quiet=True))
    trainer.version, trainer.versions_seen = 3, [0, 1, 2, 3]  # a run three versions in
    trainer.pool.advance(3)
    source = ScriptedSource(script)
    source.version = 3
    groups = trainer._collect(source, source.tasks())
    assert groups is not None
    assert [g[0].seed for g in groups] == [1, 4, 5, 6]  # then requests 4-6, informative as they come
    assert sorted(g[0].seed for g in trainer.agreed) == [2, 3]
    assert trainer.untrained["agreed_failed"] == 2
    metrics: dict[str, float] = {}
    trainer.algo.samples(groups, metrics, trainer)
    assert metrics["rl/injected"] == 1


# --- 3. the random streams carry on across a resume ---


def test_a_resumed_sft_run_draws_the_numbers_the_uninterrupted_one_would_have(
    base: Path, tmp_path: Path
) -> None:
    from agent_core.training.sft import SFTTrainer

    class Drawing(NullHooks):  # a sampler or dropout drawing as the run goes
        def on_metrics(self, step: int, metrics: Any) -> None:
            torch.rand(3)
            random.random()

    cfg = validate_config("sft", {"batch_size": 2, "max_steps": 2, "checkpoint_every": 2})
    examples = oracle_examples([TASK], range(4))
    done = run(RunSpec("sft", cfg, base, tmp_path), Drawing(quiet=True), examples=examples)
    expected = (torch.rand(4).tolist(), random.random())  # what the run would have drawn next
    torch.manual_seed(12345)
    random.seed(12345)  # whatever the worker's process drew in between
    SFTTrainer(RunSpec("sft", cfg, base, tmp_path, resume_from=done.checkpoint), NullHooks(quiet=True))
    assert (torch.rand(4).tolist(), random.random()) == expected


def test_a_resumed_rl_run_draws_the_numbers_the_uninterrupted_one_would_have(
    base: Path, tmp_path: Path
) -> None:
    """PPO: the critic's head is initialised after the checkpoint's streams were set back, so the
    run sets them back once more before it goes on."""
    cfg = {"iterations": 2, "episodes_per_iteration": 2, "value_pretrain_steps": 0, "minibatch_size": 4,
           "checkpoint_every": 1}  # fmt: skip
    whole = ScriptedSource(cycle((0.0,), (1.0,)))
    random.seed(0)  # the trainer seeds torch from the config; the process's own stream, the test
    run(RunSpec("ppo", validate_config("ppo", cfg), base, tmp_path / "whole"), NullHooks(quiet=True),
        source=whole)  # fmt: skip
    first = ScriptedSource(cycle((0.0,), (1.0,)))
    one = validate_config("ppo", {**cfg, "iterations": 1})
    random.seed(0)
    half = run(RunSpec("ppo", one, base, tmp_path / "half"), NullHooks(quiet=True), source=first)
    assert first.draws == whole.draws[: len(first.draws)]
    torch.manual_seed(12345)
    random.seed(12345)
    rest = ScriptedSource(cycle((0.0,), (1.0,)))
    spec = RunSpec("ppo", validate_config("ppo", cfg), base, tmp_path / "half", resume_from=half.checkpoint)
    run(spec, NullHooks(quiet=True), source=rest)
    assert rest.draws == whole.draws[len(first.draws) :]


def test_a_mostly_solved_task_waits_out_a_run_of_agreeing_groups(base: Path, tmp_path: Path) -> None:
    """Seven all-solved groups, then one that disagrees: sampling goes on and the run trains. Counted per
    episode (2 per group), the run had stopped after 4 groups, as a mostly solved task in bench/rl_eval.py
    stopped a healthy run."""
    source = ScriptedSource(cycle(*([(1.0, 1.0)] * 7), (0.0, 1.0)))
    hooks = LogHooks()
    result = run(RunSpec("grpo", validate_config("grpo", GRPO), base, tmp_path), hooks, source=source)
    assert result.status == "succeeded"
    assert all(m["rl/turns_trained"] > 0 for _, m in hooks.metrics)
