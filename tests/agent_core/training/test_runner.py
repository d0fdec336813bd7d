"""Trainers end to end on a tiny model: SFT, GRPO and PPO on the toy source; checkpoints, stop, resume.

Figures (how fast, how well) live in bench/; these tests check what must hold whatever the numbers.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from agent_core import actions as A
from agent_core.agent import AgentConfig, run_episode
from agent_core.env import Obs
from agent_core.policies.base import Policy, PolicyInput, PolicyOutput
from agent_core.policies.local import LocalPolicy
from agent_core.tasks.runner import PreparedTask
from agent_core.tasks.spec import parse_task
from agent_core.training.checkpoints import latest_checkpoint
from agent_core.training.config import ConfigError, validate_config
from agent_core.training.episodes import sft_examples
from agent_core.training.errors import TrainingError
from agent_core.training.model_io import prompt_ids
from agent_core.training.runner import run
from agent_core.training.tiny_policy import LINEAGE_FILE, build_tiny_policy
from agent_core.training.toy import SCREEN, ToySource, _png, oracle_examples
from agent_core.training.types import NullHooks, RunSpec

pytest.importorskip("torch")
TASKS = ["toy/buttons-2", "toy/buttons-3"]


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("tiny") / "base"
    return build_tiny_policy(path, hidden_size=32, num_layers=1, num_heads=2, vocab_size=600)


class StopAfter(NullHooks):
    def __init__(self, n: int) -> None:
        super().__init__(quiet=True)
        self.n = n

    def should_stop(self) -> bool:
        return len(self.metrics) >= self.n


def sft(base: Path, out: Path, hooks: Any = None, **cfg: Any) -> Any:
    config = validate_config("sft", {"batch_size": 4, "lr": 3e-3, "checkpoint_every": 5, **cfg})
    return run(RunSpec("sft", config, base, out), hooks or NullHooks(quiet=True),
               examples=oracle_examples(TASKS, range(12)))  # fmt: skip


def test_sft_learns_writes_loadable_checkpoints_and_resumes(base: Path, tmp_path: Path) -> None:
    hooks = NullHooks(quiet=True)
    result = sft(base, tmp_path / "run", hooks, max_steps=12)
    assert result.status == "succeeded" and result.step == 12
    losses = [m["train/loss"] for _, m in hooks.metrics]
    assert len(losses) == 12 and sum(losses[-3:]) < sum(losses[:3])
    assert [s for s, _ in hooks.checkpoints] == [5, 10, 12]
    last = latest_checkpoint(tmp_path / "run")
    assert last is not None and last.name == "step-000012"
    # The checkpoint is a policy: LocalPolicy loads it and answers; it keeps its lineage.
    lineage = json.loads((last / LINEAGE_FILE).read_text())
    assert lineage["base"] == json.loads((base / LINEAGE_FILE).read_text())["base"]
    assert lineage["step"] == 12 and lineage["algorithm"] == "sft"
    src = ToySource(TASKS, policy={"temperature": 0.0})
    src.publish(0, last)
    ep = src.episode(TASKS[0], 1, 1)
    assert ep.turns and ep.turns[0].response_ids
    src.close()
    # Resume: the step count and the optimizer state carry on.
    more = NullHooks(quiet=True)
    resumed = run(
        RunSpec("sft", validate_config("sft", {"batch_size": 4, "max_steps": 15, "checkpoint_every": 5}),
                base, tmp_path / "run", resume_from=last),
        more,
        examples=oracle_examples(TASKS, range(12)),
    )  # fmt: skip
    assert resumed.step == 15 and [s for s, _ in more.metrics] == [13, 14, 15]


def test_stop_saves_a_checkpoint_and_says_stopped(base: Path, tmp_path: Path) -> None:
    result = sft(base, tmp_path / "run", StopAfter(3), max_steps=50, checkpoint_every=100)
    assert result.status == "stopped" and result.step == 3
    assert latest_checkpoint(tmp_path / "run") == result.checkpoint


def test_sft_without_examples_is_refused(base: Path, tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="no usable examples"):
        run(RunSpec("sft", validate_config("sft", {}), base, tmp_path), NullHooks(), examples=[])


def test_a_half_written_checkpoint_is_never_the_latest(base: Path, tmp_path: Path) -> None:
    sft(base, tmp_path / "run", max_steps=5)
    half = tmp_path / "run" / "checkpoints" / "step-000009.tmp"
    half.mkdir()
    (tmp_path / "run" / "checkpoints" / "step-000010").mkdir()  # no trainer state: incomplete
    latest = latest_checkpoint(tmp_path / "run")
    assert latest is not None and latest.name == "step-000005"


class LogHooks(NullHooks):
    def __init__(self) -> None:
        super().__init__(quiet=True)
        self.lines: list[str] = []

    def on_log(self, message: str) -> None:
        self.lines.append(message)


def test_sft_masks_placeholder_thoughts_and_says_how_many(base: Path, tmp_path: Path) -> None:
    """Examples whose target still says "Thought: oracle step N" (an old export, another source) train
    on their action only; the run log counts them."""
    import dataclasses

    from agent_core.training.sft import _without_placeholder

    examples = oracle_examples(TASKS, range(4))
    stale = [
        dataclasses.replace(ex, response=f"Thought: oracle step {i}\n" + ex.response.split("\n")[-1])
        for i, ex in enumerate(examples[:3])
    ]
    masked = _without_placeholder(stale[0])
    assert masked.response.startswith("Action: ") and masked.placeholder_thought
    assert _without_placeholder(examples[3]) is examples[3]  # a real thought stays
    hooks = LogHooks()
    config = validate_config("sft", {"batch_size": 2, "max_steps": 1})
    run(RunSpec("sft", config, base, tmp_path), hooks, examples=[*stale, examples[3]])
    assert any(line.startswith("3 example(s) recorded a placeholder thought") for line in hooks.lines)


def test_resume_from_an_incomplete_checkpoint_is_refused(base: Path, tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="not a complete checkpoint"):
        run(
            RunSpec("sft", validate_config("sft", {}), base, tmp_path, resume_from=base),
            NullHooks(),
            examples=[],
        )


@pytest.fixture(scope="module")
def sft_policy(base: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("sft")
    sft(base, out, max_steps=20)
    last = latest_checkpoint(out)
    assert last is not None
    return last


RL = {"iterations": 2, "episodes_per_iteration": 4, "max_steps_per_episode": 2, "max_new_tokens": 24,
      "minibatch_size": 4, "checkpoint_every": 1}  # fmt: skip


class SplitToySource(ToySource):
    """The toy source with every other rollout scored as solved, so each group has something to teach
    (this barely trained policy fails every toy page, and a group that all fails trains nothing)."""

    def poll(self, timeout: float) -> list[Any]:
        import dataclasses

        out = []
        for ep in super().poll(timeout):
            self.polled = getattr(self, "polled", 0) + 1  # a group's rollouts are requested together
            out.append(dataclasses.replace(ep, reward=float(ep.reward or self.polled % 2)))
        return out


def test_grpo_iterates_publishes_each_checkpoint_and_reports(sft_policy: Path, tmp_path: Path) -> None:
    source = SplitToySource(TASKS, seed_base=10_000)
    hooks = NullHooks(quiet=True)
    cfg = validate_config("grpo", {**RL, "group_size": 2, "min_rollouts": 2, "max_rollouts": 2})
    result = run(RunSpec("grpo", cfg, sft_policy, tmp_path / "grpo"), hooks, source=source)
    assert result.status == "succeeded" and result.step == 2
    # v0 is the starting policy (saved as step 0); each iteration publishes the next version.
    assert [v for v, _ in source.published] == [0, 1, 2]
    assert [p.name for _, p in source.published] == ["step-000000", "step-000001", "step-000002"]
    names = set().union(*(m for _, m in hooks.metrics))
    for name in ("rl/reward", "rl/success", "rl/episodes", "rl/policy_lag", "rl/injected",
                 "train/tokens_per_s", "rl/env_utilisation", "rl/success/toy/buttons-2"):  # fmt: skip
        assert name in names, name
    state = __import__("torch").load(result.checkpoint / "trainer_state.pt", weights_only=False)
    assert state["version"] == 2 and state["curator"] and state["turns_trained"] > 0


def test_ppo_pretrains_the_critic_then_updates_the_policy(sft_policy: Path, tmp_path: Path) -> None:
    source = ToySource(TASKS, seed_base=20_000)
    hooks = NullHooks(quiet=True)
    cfg = validate_config("ppo", {**RL, "iterations": 3, "value_pretrain_steps": 1})
    result = run(RunSpec("ppo", cfg, sft_policy, tmp_path / "ppo"), hooks, source=source)
    assert result.status == "succeeded"
    first, *rest = [m for _, m in hooks.metrics]
    assert first.get("rl/value_pretraining") == 1.0 and "rl/policy_loss" not in first
    assert "rl/value_loss" in first and "rl/explained_var" in first
    assert all("rl/policy_loss" in m and "rl/clip_frac" in m and "rl/lambda_policy" in m for m in rest)
    state = __import__("torch").load(result.checkpoint / "trainer_state.pt", weights_only=False)
    assert "critic" in state and state["value_pretrained"] == 1


class TurnlessSource(ToySource):
    """Rollouts of a policy that keeps no token ids and logprobs (a scripted one): no turn to train on."""

    def poll(self, timeout: float) -> list[Any]:
        import dataclasses

        return [dataclasses.replace(ep, turns=()) for ep in super().poll(timeout)]


def test_an_rl_run_that_trains_no_turn_fails_saying_why(sft_policy: Path, tmp_path: Path) -> None:
    """GRPO groups that all score alike (or episodes with no sampled turn) train nothing: the run must
    not end as succeeded with its starting weights, nor sample on for ever (dynamic sampling)."""
    cfg = validate_config("grpo", {**RL, "group_size": 2, "min_rollouts": 2, "max_rollouts": 2})
    agreed = PairSource("x", "x")  # every rollout the same wrong answer: all fail alike
    agreed.poll = lambda timeout: [  # type: ignore[method-assign]
        __import__("dataclasses").replace(ep, reward=0.0) for ep in PairSource.poll(agreed, timeout)
    ]
    with pytest.raises(TrainingError) as err:
        run(RunSpec("grpo", cfg, sft_policy, tmp_path / "agreed"), NullHooks(quiet=True), source=agreed)
    # 4 iterations' worth (4) of agreeing groups of 2 in a row: 16 groups, 32 episodes.
    assert "stopped at iteration 1: the last 32 episodes were all unusable" in str(err.value)
    found = __import__("re").search(
        r"(\d+) group\(s\) of rollouts all scored alike \((\d+) all failed, 0 all", str(err.value)
    )
    assert found and found.group(1) == found.group(2) != "0", str(err.value)
    ppo = validate_config("ppo", {**RL, "value_pretrain_steps": 0})
    # Rollouts that never carry a sampled turn cannot fill a batch: the run says so, not waits for ever.
    with pytest.raises(TrainingError, match=r"all unusable.* episode\(s\) came back with no sampled turn"):
        run(RunSpec("ppo", ppo, sft_policy, tmp_path / "turnless"), NullHooks(quiet=True),
            source=TurnlessSource(TASKS, seed_base=30_000))  # fmt: skip


def test_a_ppo_config_whose_policy_would_never_train_is_refused() -> None:
    with pytest.raises(ConfigError) as err:
        validate_config("ppo", {"iterations": 2, "value_pretrain_steps": 2})
    assert err.value.field == "value_pretrain_steps" and "never train" in str(err.value)


def test_rl_without_a_source_is_refused(sft_policy: Path, tmp_path: Path) -> None:
    with pytest.raises(TrainingError, match="live rollouts"):
        run(RunSpec("grpo", validate_config("grpo", {}), sft_policy, tmp_path), NullHooks())


# --- prompts: training sees what the policy saw ---


class Recorder(Policy):
    """Answers with a fixed click and keeps every prompt it was given."""

    def __init__(self) -> None:
        self.prompts: list[Any] = []

    def act(self, inp: PolicyInput) -> PolicyOutput:
        self.prompts.append(inp.messages)
        return PolicyOutput(text=f"Thought: go {len(self.prompts)}\nAction: click(start_box='(10,20)')")


class FakeEnv:
    def __init__(self) -> None:
        self.n = 0

    def observe(self) -> Obs:
        return Obs(_png(*SCREEN), *SCREEN, a11y=f'button "B{self.n}" @(10,20)')

    def act(self, action: A.Action) -> Obs:
        self.n += 1
        return self.observe()

    def exec(self, command: str, *, timeout: float = 30.0) -> Any:
        raise AssertionError("the agent loop runs no shell command on a browser task")

    def put_file(self, path: str, data: bytes) -> None: ...

    def get_file(self, path: str) -> bytes:
        return b""

    def call(self, method: str, **params: Any) -> Mapping[str, Any]:
        return {}


def test_sft_examples_rebuild_the_prompts_the_agent_sent(base: Path) -> None:
    spec = parse_task(
        {"id": "toy/t", "instruction": "Click B.", "platform": "browser", "limits": {"max_steps": 5},
         "checker": {"checks": [{"probe": {"op": "answer"}, "metric": "exists"}]}}
    )  # fmt: skip
    policy = Recorder()
    outcome = run_episode(
        FakeEnv(),
        policy,
        PreparedTask(spec, 0, {}, "Click B.", {}),
        config=AgentConfig(max_steps=5, history_images=2, episodic_k=0),
        score=False,
    )
    examples = sft_examples("Click B.", "browser", outcome.steps, history_images=2)
    assert len(examples) == 5
    assert [list(e.messages) for e in examples] == [list(p) for p in policy.prompts]
    assert examples[3].response == outcome.steps[3].raw_output or examples[3].response.endswith("(10,20)')")
    # ...and the prompt's token ids are LocalPolicy's, to the token.
    local = LocalPolicy(model_path=base, max_new_tokens=4)
    out = local.act(
        PolicyInput("Click B.", outcome.steps[3].observation, 3, messages=policy.prompts[3], screen=SCREEN)
    )
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(base))
    assert tuple(prompt_ids(tok, examples[3].messages, examples[3].a11y)) == out.prompt_token_ids


def test_config_errors_name_the_field() -> None:
    with pytest.raises(ConfigError) as err:
        validate_config("grpo", {"eps_low": 0.3, "eps_high": 0.2})
    assert err.value.field == "eps_high" and "asymmetric" in str(err.value)
    with pytest.raises(ConfigError) as err:
        validate_config("sft", {"lr": "fast"})
    assert err.value.field == "lr" and str(err.value).startswith("lr: must be a number")
    with pytest.raises(ConfigError) as err:
        validate_config("ppo", {"learning_rate": 1e-3})
    assert err.value.field == "learning_rate" and "unknown field" in str(err.value)
    with pytest.raises(ConfigError) as err:
        validate_config("grpo", {"min_rollouts": 9, "max_rollouts": 4})
    assert err.value.field == "min_rollouts"
    with pytest.raises(ConfigError) as err:
        validate_config("sft", {"batch_size": 0})
    assert err.value.field == "batch_size" and "at least 1" in str(err.value)
    cfg = validate_config("ppo", {"lr": "0.001", "iterations": 5.0})
    assert cfg["lr"] == 0.001 and cfg["iterations"] == 5 and cfg["lambda_value"] == 1.0


def test_config_errors_name_every_bad_field_at_once() -> None:
    """A form shows each message beside its field: validation does not stop at the first one."""
    with pytest.raises(ConfigError) as err:
        validate_config(
            "grpo",
            {"lr": "fast", "batch": 3, "iterations": 0, "eps_low": 0.3, "eps_high": 0.2, "device": "tpu"},
        )
    fields = [e.field for e in err.value.errors]
    assert sorted(fields) == ["batch", "device", "eps_high", "iterations", "lr"]
    assert all(e.message and e.field not in e.message.split(":")[0] for e in err.value.errors)
    assert "lr: must be a number" in str(err.value) and "device: must be one of" in str(err.value)
    # A cross-field check waits until both fields are valid on their own.
    with pytest.raises(ConfigError) as err:
        validate_config("grpo", {"min_rollouts": "many", "max_rollouts": 4})
    assert [e.field for e in err.value.errors] == ["min_rollouts"]


# --- the update moves the policy the right way ---


class PairSource:
    """Every rollout of a page answers one of two fixed responses: the right click (reward 1) or a
    wrong one (reward 0), with logprobs of the currently published policy, as a sampler records them."""

    def __init__(self, good: str, bad: str) -> None:
        self.good, self.bad = good, bad
        self.queue: list[tuple[str, int, int]] = []
        self.version = 0
        self.model_dir: Path | None = None
        self.n = 0
        self.seed = 0

    def tasks(self) -> list[str]:
        return ["toy/buttons-2"]

    def publish(self, version: int, model_dir: Path) -> None:
        self.version, self.model_dir = version, model_dir

    def request(self, task_id: str, n: int, *, max_steps: int) -> int:
        self.seed += 1
        self.queue += [(task_id, self.seed, max_steps)] * n
        return self.seed

    def pending(self) -> int:
        return len(self.queue)

    def utilisation(self) -> float | None:
        return None

    def close(self) -> None: ...

    def logprobs(self, text: str) -> tuple[list[int], list[float]]:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        from agent_core.training.model_io import response_ids

        assert self.model_dir is not None
        tok = AutoTokenizer.from_pretrained(str(self.model_dir))
        model = AutoModelForCausalLM.from_pretrained(str(self.model_dir))
        prompt = prompt_ids(tok, self.example.messages, self.example.a11y)
        resp = response_ids(tok, text)
        with torch.no_grad():
            logits = model(torch.tensor([prompt + resp])).logits[0, len(prompt) - 1 : -1]
        lp = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(resp).unsqueeze(-1)).squeeze(-1)
        return resp, lp.tolist()

    @property
    def example(self) -> Any:
        return oracle_examples(["toy/buttons-2"], range(7, 8))[0]

    def poll(self, timeout: float) -> list[Any]:
        from agent_core.rl.episodes import RLEpisode, RLTurn

        out = []
        while self.queue:
            task_id, seed, _ = self.queue.pop(0)
            good = self.n % 2 == 0
            self.n += 1
            ids, lps = self.logprobs(self.good if good else self.bad)
            turn = RLTurn(self.example.messages, self.example.a11y, tuple(ids), tuple(lps), parsed=True)
            out.append(RLEpisode(task_id, seed, float(good), (turn,), self.version, steps=1))
        return out


@pytest.mark.parametrize("algorithm", ["grpo", "ppo"])
def test_the_update_raises_the_successful_response_over_the_failed_one(
    algorithm: str, sft_policy: Path, tmp_path: Path
) -> None:
    ex = oracle_examples(["toy/buttons-2"], range(7, 8))[0]
    good = ex.response
    bad = good.replace("Action: click", "Action: type").split("(start_box")[0] + "(content='x')"
    source = PairSource(good, bad)
    source.publish(0, sft_policy)
    before = sum(source.logprobs(good)[1]) - sum(source.logprobs(bad)[1])
    extra = (
        {"value_pretrain_steps": 0, "critic_lr": 1e-2}
        if algorithm == "ppo"
        else {"max_rollouts": 2, "min_rollouts": 2, "entropy_top": 1.0}
    )
    base_cfg = {
        "iterations": 3,
        "episodes_per_iteration": 4,
        "lr": 1e-3,
        "minibatch_size": 4,
        "checkpoint_every": 1,
    }
    cfg = validate_config(algorithm, {**base_cfg, **extra})
    hooks = NullHooks(quiet=True)
    run(RunSpec(algorithm, cfg, sft_policy, tmp_path / algorithm), hooks, source=source)
    after = sum(source.logprobs(good)[1]) - sum(source.logprobs(bad)[1])
    assert after > before + 0.5, (before, after)
    trained = [m for _, m in hooks.metrics]
    assert all(m["rl/turns_trained"] > 0 for m in trained)
    if algorithm == "grpo":
        # The rollouts' own logprobs were those of the published policy, so the IS weights sit near 1.
        assert all(0.5 < m["rl/is_weight_mean"] <= 2.0 for m in trained)


class InterleavedSource:
    """Rollouts finish out of order: a request's rollouts come back mixed with a later request's of the
    same task, and one is lost to the infrastructure (no turns), as a busy pool returns them."""

    def __init__(self) -> None:
        self.requests: list[tuple[str, int, int]] = []
        self.seed = 100

    def tasks(self) -> list[str]:
        return ["toy/buttons-2"]

    def publish(self, version: int, model_dir: Path) -> None: ...

    def request(self, task_id: str, n: int, *, max_steps: int) -> int:
        self.seed += 1
        self.requests.append((task_id, self.seed, n))
        return self.seed

    def pending(self) -> int:
        return sum(n for _, _, n in self.requests)

    def poll(self, timeout: float) -> list[Any]:
        from agent_core.rl.episodes import RLEpisode, RLTurn

        ex = oracle_examples(["toy/buttons-2"], range(7, 8))[0]
        turn = RLTurn(ex.messages, ex.a11y, (1, 2), (-0.1, -0.1), parsed=True)
        mine, self.requests = self.requests[:2], self.requests[2:]
        (task, s1, n1), (_, s2, n2) = mine
        a = [RLEpisode(task, s1, float(i % 2), (turn,), 0, steps=1) for i in range(n1)]
        b = [RLEpisode(task, s2, float(i % 2), (turn,), 0, steps=1) for i in range(n2)]
        b[0] = RLEpisode(task, s2, 0.0, (), 0)  # lost: its group completes with one fewer
        mixed = [ep for pair in zip(a, b, strict=True) for ep in pair]
        return mixed[::-1]

    def utilisation(self) -> float | None:
        return None

    def close(self) -> None: ...


def test_a_grpo_group_is_the_rollouts_of_one_request_whatever_order_they_finish_in(
    sft_policy: Path, tmp_path: Path
) -> None:
    from agent_core.training.rl_trainer import RLTrainer

    cfg = validate_config(
        "grpo", {"iterations": 1, "episodes_per_iteration": 5, "min_rollouts": 3, "max_rollouts": 3}
    )
    trainer = RLTrainer(RunSpec("grpo", cfg, sft_policy, tmp_path / "g"), NullHooks(quiet=True))
    source = InterleavedSource()
    groups = trainer._collect(source, source.tasks())
    assert groups is not None
    # Two requests of 3 came back interleaved and reversed; one of the second's was lost, so its
    # group has 2. Before, groups were cut from the task's arrivals in order and mixed instances.
    assert sorted((len(g), {ep.seed for ep in g}) for g in groups) == [(2, {102}), (3, {101})]
    assert trainer.dropped == 1
    # The lost episode tells the curator nothing about the task: the 5 others were recorded.
    assert len(trainer.curator.state_dict()["records"]["toy/buttons-2"]) == 5
    assert source.pending() == 6  # the requests asked for beyond this iteration are still out
