"""Multi-turn PPO as the audit asked: it learns the action with its default config, it trusts only a
critic that has learned, it corrects for the rollouts' sampler, and it whitens its advantages.

The end-to-end tests run the real trainer on the tiny policy with rollouts of two fixed responses that
differ only in the click's coordinates; the others drive PPO's sample building with a fake learner
(the trainer's scoring is the one boundary faked), so the advantages can be checked by hand.
"""

from __future__ import annotations

import math
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from agent_core.rl.advantages import adaptive_lambda
from agent_core.rl.episodes import RLEpisode, RLTurn
from agent_core.training.batching import Sample
from agent_core.training.checkpoints import latest_checkpoint
from agent_core.training.config import ConfigError, validate_config
from agent_core.training.grpo import GRPO
from agent_core.training.importance import rollout_is_weights
from agent_core.training.model_io import prompt_ids, response_ids
from agent_core.training.ppo import PPO
from agent_core.training.runner import run
from agent_core.training.tiny_policy import build_tiny_policy
from agent_core.training.toy import oracle_examples
from agent_core.training.types import NullHooks, RunSpec

torch = pytest.importorskip("torch")
EXAMPLE = oracle_examples(["toy/buttons-2"], range(7, 8))[0]
GOOD = EXAMPLE.response  # "Thought: I click No.\nAction: click(start_box='(122,126)')"
BAD = GOOD.replace("(122,126)", "(37,95)")  # the page's other button: only the coordinates differ


@pytest.fixture(scope="module")
def policy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny policy after a little SFT on the toy pages (as the trainers' tests start from)."""
    root = tmp_path_factory.mktemp("ppo-audit")
    base = build_tiny_policy(root / "base", hidden_size=32, num_layers=1, num_heads=2, vocab_size=600)
    config = validate_config("sft", {"batch_size": 4, "lr": 3e-3, "max_steps": 20, "checkpoint_every": 20})
    examples = oracle_examples(["toy/buttons-2", "toy/buttons-3"], range(12))
    run(RunSpec("sft", config, base, root / "sft"), NullHooks(quiet=True), examples=examples)
    last = latest_checkpoint(root / "sft")
    assert last is not None
    return last


class ChoiceSource:
    """Every other rollout answers the right click (reward 1), the others the wrong button's (reward 0),
    with the logprobs of the published policy, as its sampler records them, plus `drift` (a sampler
    whose numbers differ from the trainer's by that much per token)."""

    def __init__(self, drift: float = 0.0) -> None:
        self.drift = drift
        self.queue: list[tuple[str, int]] = []
        self.version = 0
        self.model: Any = None
        self.n = 0
        self.seed = 0

    def tasks(self) -> list[str]:
        return ["toy/buttons-2"]

    def publish(self, version: int, model_dir: Path) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.version = version
        self.tok = AutoTokenizer.from_pretrained(str(model_dir))
        self.model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()

    def request(self, task_id: str, n: int, *, max_steps: int) -> int:
        self.seed += 1
        self.queue += [(task_id, self.seed)] * n
        return self.seed

    def pending(self) -> int:
        return len(self.queue)

    def utilisation(self) -> float | None:
        return None

    def close(self) -> None: ...

    def logprobs(self, text: str) -> tuple[list[int], list[float]]:
        prompt = prompt_ids(self.tok, EXAMPLE.messages, EXAMPLE.a11y)
        resp = response_ids(self.tok, text)
        with torch.no_grad():
            logits = self.model(torch.tensor([prompt + resp])).logits[0, len(prompt) - 1 : -1]
        lp = torch.log_softmax(logits.float(), -1).gather(-1, torch.tensor(resp).unsqueeze(-1))
        return resp, lp.squeeze(-1).tolist()

    def choice(self) -> float:
        """log π(right coordinate) - log π(wrong one) at the first token where the two differ."""
        (good_ids, good_lp), (bad_ids, bad_lp) = self.logprobs(GOOD), self.logprobs(BAD)
        at = next(i for i, (g, b) in enumerate(zip(good_ids, bad_ids, strict=False)) if g != b)
        return good_lp[at] - bad_lp[at]

    def poll(self, timeout: float) -> list[RLEpisode]:
        out = []
        while self.queue:
            task_id, seed = self.queue.pop(0)
            good = self.n % 2 == 0
            self.n += 1
            ids, lps = self.logprobs(GOOD if good else BAD)
            rollout = tuple(lp - self.drift for lp in lps)
            turn = RLTurn(EXAMPLE.messages, EXAMPLE.a11y, tuple(ids), rollout, parsed=True)
            out.append(RLEpisode(task_id, seed, float(good), (turn,), self.version, steps=1))
        return out


RUN = {"episodes_per_iteration": 4, "minibatch_size": 4, "max_steps_per_episode": 1}
"""How much to run (not how to learn: every learning setting stays at its default)."""


def test_ppo_with_its_default_config_learns_the_rewarded_coordinate(policy: Path, tmp_path: Path) -> None:
    """The two responses share every token up to the coordinates, so what PPO must learn is the choice
    made there, some ten tokens before the reward. Before, λ_policy fell to 0.2 on these 25 tokens and
    the half-trained critic's guesses carried the reward back: the choice moved the wrong way."""
    cfg = validate_config("ppo", {**RUN, "iterations": 5})
    source = ChoiceSource()
    source.publish(0, policy)
    before = source.choice()
    hooks = NullHooks(quiet=True)
    run(RunSpec("ppo", cfg, policy, tmp_path), hooks, source=source)
    after = source.choice()
    assert after > before + 0.15, (before, after)
    trained = [m for _, m in hooks.metrics if "rl/policy_loss" in m]
    assert trained and all(m["rl/lambda_policy"] >= 0.95 for _, m in hooks.metrics)


def test_ppo_weights_each_token_by_its_rollout_importance(policy: Path, tmp_path: Path) -> None:
    """Rollouts sampled where the tokens were e^0.5 times less likely than under π_old (an older
    version, another engine) weigh e^0.5 in the policy loss (PPO trained them as on-policy before)."""
    cfg = validate_config("ppo", {**RUN, "iterations": 1, "value_pretrain_steps": 0})
    hooks = NullHooks(quiet=True)
    run(RunSpec("ppo", cfg, policy, tmp_path), hooks, source=ChoiceSource(drift=0.5))
    (_, metrics), *_ = hooks.metrics
    assert metrics["rl/is_weight_mean"] == pytest.approx(math.exp(0.5), rel=1e-3)
    assert metrics["rl/is_weight_max"] < 2.0 and metrics["rl/is_truncated_frac"] == 0.0


def test_rollout_is_weights_truncate_at_the_cap_and_report() -> None:
    old = torch.tensor([[0.0, -1.0, -1.0, -1.0]])
    mask = torch.tensor([[0.0, 1.0, 1.0, 1.0]])  # position 0 is the prompt's
    sample = Sample(prompt=[7, 7], response=[1, 2, 3], rollout_logprobs=[-1.0, -2.0, -0.1])
    stats: dict[str, list[float]] = {}
    weights = rollout_is_weights([sample], old, mask, [2], 2.0, stats)
    assert weights[0, 1:].tolist() == pytest.approx([1.0, 2.0, math.exp(-0.9)])
    assert stats["is_weight_max"] == [pytest.approx(math.e)] and stats["is_truncated_frac"] == [
        pytest.approx(1 / 3)
    ]
    # GRPO's weights are the same function's.
    grpo = GRPO(validate_config("grpo", {"is_cap": 2.0}))
    assert torch.equal(grpo.is_weights([sample], old, mask, [2], {}), weights)


# --- sample building, with a fake learner in place of the trainer's scoring ---


class FakeLearner:
    """Encodes a turn as its token ids; scores every sample with the critic values `values` gives."""

    def __init__(self, values: Any) -> None:
        self.values = values
        self.untrained: Counter[str] = Counter()

    def encode_turn(self, turn: RLTurn, *, version: int | None = None) -> Sample | None:
        return Sample([0], list(turn.response_ids), rollout_logprobs=list(turn.rollout_logprobs))

    def score(self, samples: list[Sample], *, values: bool) -> None:
        for s in samples:
            s.old_logprobs = list(s.rollout_logprobs)
            s.old_values = list(self.values(s))


N, AT = 20, 10  # tokens per response; the coordinate token, where the two responses part


def _pair() -> list[list[RLEpisode]]:
    """A rewarded and a failed response of N tokens that differ from token AT on."""

    def episode(reward: float, tail: int) -> RLEpisode:
        ids = tuple([5] * AT + [tail] * (N - AT))
        return RLEpisode("t", 0, reward, (RLTurn((), None, ids, (-1.0,) * N),), 0, steps=1)

    return [[episode(1.0, 8)], [episode(0.0, 9)]]


def _ppo(**cfg: Any) -> PPO:
    return PPO(validate_config("ppo", {"iterations": 10, **cfg}))


def test_a_critic_that_has_not_learned_cannot_cancel_the_outcome_reward() -> None:
    """A critic that is wrong after the coordinate (it rates the failed branch above the rewarded one)
    explains less than nothing; bootstrapping from it would hand its error to the coordinate token.
    Its values are then only a baseline: the advantage is the return minus the value (λ = 1)."""

    def wrong(s: Sample) -> list[float]:
        after = 0.0 if s.response[-1] == 8 else 1.0
        return [0.5] * (AT + 1) + [after] * (N - AT - 1)

    ppo = _ppo(whiten_advantages="off")
    metrics: dict[str, float] = {}
    good, bad = ppo.samples(_pair(), metrics, FakeLearner(wrong))
    assert good.advantages[AT] > 0 > bad.advantages[AT]  # λ 0 before: -0.5 and +0.5
    assert good.advantages == pytest.approx([1 - v for v in wrong(good)])
    assert bad.advantages == pytest.approx([0 - v for v in wrong(bad)])
    assert metrics["rl/critic_ev"] < 0 and metrics["rl/critic_trusted"] == 0.0
    assert metrics["rl/lambda_policy"] == 1.0


def test_a_learned_critic_is_bootstrapped_from_with_the_length_adaptive_lambda() -> None:
    def right(s: Sample) -> list[float]:
        after = 1.0 if s.response[-1] == 8 else 0.0
        return [0.5] * (AT + 1) + [after] * (N - AT - 1)

    metrics: dict[str, float] = {}
    good, _ = _ppo(whiten_advantages="off").samples(_pair(), metrics, FakeLearner(right))
    assert metrics["rl/critic_ev"] > 0.2 and metrics["rl/critic_trusted"] == 1.0
    assert metrics["rl/lambda_policy"] == pytest.approx(0.95)  # the floor: 1 - 1/(0.05 * 20) is 0
    # The critic knows each branch's value: the choice carries the TD error 1 - 0.5, the tokens before
    # it that error discounted by 0.95 per token, the tokens after it none.
    assert good.advantages[AT] == pytest.approx(0.5)
    assert good.advantages[AT - 2] == pytest.approx(0.5 * 0.95**2)
    assert good.advantages[AT + 1 :] == pytest.approx([0.0] * (N - AT - 1))


def test_value_pretraining_lasts_until_the_critic_has_learned_and_at_most_its_steps() -> None:
    ppo = _ppo()  # value_pretrain_steps 3, critic_min_ev 0.2
    ppo.samples(_pair(), {}, FakeLearner(lambda s: [0.0] * N))  # a fresh critic: explains nothing
    assert [ppo.pretraining(n) for n in range(3)] == [True] * 3  # two were the most before
    assert ppo.pretraining(3) is False
    assert ppo.pretraining(1) is False  # over is over: the policy is not paused again
    learned = _ppo()
    learned.samples(_pair(), {}, FakeLearner(lambda s: [float(s.response[-1] == 8)] * N))
    assert learned.pretraining(0) is False


def test_ppo_whitens_its_advantages_over_the_batch() -> None:
    def zero(s: Sample) -> list[float]:
        return [0.0] * N

    metrics: dict[str, float] = {}
    samples = _ppo().samples(_pair(), metrics, FakeLearner(zero))
    flat = torch.tensor([a for s in samples for a in s.advantages])
    assert float(flat.mean()) == pytest.approx(0.0, abs=1e-6)
    assert float(flat.std(unbiased=False)) == pytest.approx(1.0, abs=1e-4)
    assert metrics["rl/advantage_std"] == pytest.approx(float(torch.tensor([1.0] * N + [0.0] * N).std(False)))
    raw = _ppo(whiten_advantages="off").samples(_pair(), {}, FakeLearner(zero))
    assert raw[0].advantages == pytest.approx([1.0] * N) and raw[1].advantages == [0.0] * N


def test_adaptive_lambda_keeps_short_sequences_near_monte_carlo() -> None:
    assert adaptive_lambda(20, 0.05) == 0.0  # the formula alone, as VAPO gives it
    assert adaptive_lambda(20, 0.05, floor=0.95) == 0.95
    assert adaptive_lambda(0, 0.05, floor=0.95) == 0.95
    assert adaptive_lambda(1000, 0.05, floor=0.95) == pytest.approx(0.98)  # long: the formula's own
    with pytest.raises(ValueError, match="floor"):
        adaptive_lambda(20, 0.05, floor=1.0)


def test_ppo_config_defaults_and_bounds() -> None:
    cfg = validate_config("ppo", {})
    assert (cfg["lambda_policy_min"], cfg["whiten_advantages"], cfg["is_cap"]) == (0.95, "on", 2.0)
    assert validate_config("grpo", {})["is_cap"] == 2.0  # shared by both now
    with pytest.raises(ConfigError) as err:
        validate_config("ppo", {"lambda_policy_min": 1.0, "whiten_advantages": "yes", "is_cap": 0.5})
    assert sorted(e.field for e in err.value.errors) == ["is_cap", "lambda_policy_min", "whiten_advantages"]
