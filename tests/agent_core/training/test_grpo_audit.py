"""GRPO as DART runs it: the sequence-level (GSPO) ratio, DART's clip defaults, a dual clip that is on
or refused, and the format penalty in the group's rewards. Losses against hand computations on 4 x 3
token batches; the trainer's wiring through a real RLTrainer on a tiny model."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import pytest

from agent_core.rl.advantages import group_advantages
from agent_core.rl.episodes import RLEpisode, RLTurn
from agent_core.training.config import GRPO as GRPO_FIELDS
from agent_core.training.config import ConfigError, _with_defaults, defaults, validate_config
from agent_core.training.errors import TrainingError
from agent_core.training.grpo import GRPO
from agent_core.training.types import NullHooks, RunSpec

torch = pytest.importorskip("torch")
from torch.testing import assert_close  # noqa: E402 - after the importorskip

from agent_core.rl.losses import gspo_policy_loss, policy_loss, ppo_policy_loss  # noqa: E402

# Four sequences (rows); the log-ratio log pi - log pi_old of each token, eps_low 0.1 and eps_high
# 0.28 (a sequence's ratio clamped to [0.9, 1.28]) and dual clip c = 1.5:
#   row 0: A = 1,  mean log-ratio (0.3 - 0.1 + 0.1) / 3 = 0.1, s = e^0.1 inside: loss -e^0.1
#   row 1: A = -1, mean (0.4 + 0.6) / 2 = 0.5 (the masked 10 does not count), s = e^0.5 = 1.65:
#          max(1.65, 1.28) = 1.65 above the dual bound -A*c = 1.5 -> 1.5 (dual-clipped, no gradient)
#   row 2: A = 2,  mean (0.5 + 0.5 - 0.1) / 3 = 0.3, s = e^0.3 = 1.35: max(-2.70, -2.56) -> -2.56 (clipped)
#   row 3: no masked token: counts nowhere, whatever its numbers
MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
DELTA = torch.tensor([[0.3, -0.1, 0.1], [0.4, 0.6, 10.0], [0.5, 0.5, -0.1], [5.0, 5.0, 5.0]])
ADV = torch.tensor([[1.0, 1.0, 1.0], [-1.0, -1.0, 100.0], [2.0, 2.0, 2.0], [7.0, 7.0, 7.0]])
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-0.7, -1.2, -3.0], [-0.4, -0.9, -1.1], [-1.0, -1.0, -1.0]])
CLIP = {"eps_low": 0.1, "eps_high": 0.28}
S0, S1, S2 = math.exp(0.1), math.exp(0.5), math.exp(0.3)


def _logprobs() -> torch.Tensor:
    return (OLD + DELTA).requires_grad_()


def test_sequence_ratio_loss_and_gradient_equal_the_hand_computation() -> None:
    lp = _logprobs()
    loss, stats = gspo_policy_loss(lp, OLD, ADV, MASK, **CLIP, dual_clip=1.5)
    # A mean over the 3 sequences with tokens, not over their 8 tokens.
    assert_close(loss, torch.tensor((-S0 + 1.5 - 2.56) / 3))
    assert stats["clip_frac"] == pytest.approx(1 / 3)  # row 2, a share of sequences
    assert stats["dual_clip_frac"] == pytest.approx(1 / 3)  # row 1
    assert stats["ratio_mean"] == pytest.approx((S0 + S1 + S2) / 3)
    assert stats["ratio_max"] == pytest.approx(S1)
    kl = [math.exp(d) - 1 - d for d in (0.3, -0.1, 0.1, 0.4, 0.6, 0.5, 0.5, -0.1)]
    assert stats["approx_kl"] == pytest.approx(sum(kl) / 8, rel=1e-5)  # the token-mean k3, as before
    # d(-A s)/d log pi_t = -A s / |y| on each token of the unclipped sequence, over 3 sequences.
    loss.backward()
    assert lp.grad is not None
    row0 = -S0 / 3 / 3
    assert_close(lp.grad, torch.tensor([[row0] * 3, [0.0] * 3, [0.0] * 3, [0.0] * 3]))

    # Without the dual clip row 1 keeps its loss s and a gradient of s / 2 on each of its two tokens.
    lp = _logprobs()
    loss, stats = gspo_policy_loss(lp, OLD, ADV, MASK, **CLIP)
    assert_close(loss, torch.tensor((-S0 + S1 - 2.56) / 3))
    assert stats["dual_clip_frac"] == 0.0
    loss.backward()
    assert lp.grad is not None
    assert_close(lp.grad[1], torch.tensor([S1 / 2 / 3, S1 / 2 / 3, 0.0]))


def test_sequence_ratio_loss_weighs_each_sequence_by_its_mean_is_weight() -> None:
    weights = torch.tensor([[1.0, 0.5, 0.6], [2.0, 2.0, 9.0], [1.0, 1.0, 1.0], [3.0, 3.0, 3.0]])
    loss, _ = gspo_policy_loss(_logprobs(), OLD, ADV, MASK, **CLIP, dual_clip=1.5, is_weights=weights)
    assert_close(loss, torch.tensor((-S0 * 0.7 + 1.5 * 2.0 - 2.56) / 3))


def test_sequence_ratio_clips_a_sequence_whole_where_the_token_ratio_clips_tokens() -> None:
    # Token ratios e^0.5 and e^-0.5 are each outside [0.9, 1.28]; their sequence's ratio is 1.
    delta = torch.tensor([[0.5, -0.5]])
    mask, adv = torch.ones(1, 2), torch.ones(1, 2)
    old = torch.zeros(1, 2)
    _, seq = gspo_policy_loss(old + delta, old, adv, mask, **CLIP)
    _, tok = ppo_policy_loss(old + delta, old, adv, mask, **CLIP)
    assert seq["clip_frac"] == 0.0 and seq["ratio_max"] == pytest.approx(1.0)
    assert tok["clip_frac"] == pytest.approx(0.5) and tok["ratio_max"] == pytest.approx(math.exp(0.5))


def test_sequence_ratio_needs_one_advantage_per_sequence() -> None:
    adv = ADV.clone()
    adv[0, 1] = 0.5
    with pytest.raises(ValueError, match="one advantage on every token"):
        gspo_policy_loss(_logprobs(), OLD, adv, MASK, **CLIP)


def test_token_level_stays_the_ppo_loss() -> None:
    assert policy_loss("token") is ppo_policy_loss and policy_loss("sequence") is gspo_policy_loss
    with pytest.raises(ValueError, match="valid: token, sequence"):
        policy_loss("episode")
    # The token-level loss of these rows is still its own: a token-mean of per-token clipped terms.
    loss, stats = policy_loss("token")(_logprobs(), OLD, ADV, MASK, **CLIP, dual_clip=1.5)
    ratio = (DELTA.exp() * MASK)[:3]
    expected = []
    for r, a, m in zip(ratio.flatten().tolist(), ADV[:3].flatten().tolist(), MASK[:3].flatten(), strict=True):
        if m:
            term = max(-a * r, -a * min(max(r, 0.9), 1.28))
            expected.append(min(term, -a * 1.5) if a < 0 else term)
    assert float(loss.detach()) == pytest.approx(sum(expected) / len(expected), rel=1e-5)
    assert stats["ratio_max"] == pytest.approx(math.exp(0.6))


@pytest.mark.parametrize("loss_fn", [ppo_policy_loss, gspo_policy_loss])
def test_a_dual_clip_at_or_below_one_is_refused_not_ignored(loss_fn) -> None:  # type: ignore[no-untyped-def]
    for c in (0.5, 1.0, -2.0):
        with pytest.raises(ValueError, match="dual_clip must exceed 1"):
            loss_fn(_logprobs(), OLD, ADV, MASK, **CLIP, dual_clip=c)
    off = [loss_fn(_logprobs(), OLD, ADV, MASK, **CLIP, dual_clip=c)[0] for c in (None, 0.0)]
    assert_close(off[0], off[1])


# --- config: DART's defaults for GRPO, PPO's unchanged, the dual clip on or refused ---


def test_grpo_defaults_follow_dart_and_ppo_keeps_its_own() -> None:
    grpo, ppo = defaults("grpo"), defaults("ppo")
    assert (grpo["eps_low"], grpo["eps_high"], grpo["dual_clip"]) == (0.1, 0.28, 10.0)
    assert grpo["ratio_level"] == "token"
    assert (ppo["eps_low"], ppo["eps_high"]) == (0.2, 0.28) and "dual_clip" not in ppo
    assert GRPO(validate_config("grpo", {})).dual_clip == 10.0
    # The override mechanism names only fields that exist.
    with pytest.raises(ValueError, match="no such field to override: eps_lo"):
        _with_defaults(GRPO_FIELDS, eps_lo=0.1)


def test_a_dual_clip_in_zero_to_one_is_refused_naming_the_field() -> None:
    for c in (0.5, 1.0, "1"):
        with pytest.raises(ConfigError) as err:
            validate_config("grpo", {"dual_clip": c})
        assert err.value.field == "dual_clip" and "must exceed 1" in str(err.value)
    assert GRPO(validate_config("grpo", {"dual_clip": 0})).dual_clip is None  # 0: off
    assert GRPO(validate_config("grpo", {"dual_clip": 1.5})).dual_clip == 1.5
    # A config saved before the check is refused by the algorithm too, not run without a dual clip.
    with pytest.raises(TrainingError, match="dual_clip must exceed 1"):
        GRPO({**validate_config("grpo", {}), "dual_clip": 0.5})


def test_ratio_level_is_a_grpo_choice() -> None:
    assert validate_config("grpo", {"ratio_level": "sequence"})["ratio_level"] == "sequence"
    with pytest.raises(ConfigError) as err:
        validate_config("grpo", {"ratio_level": "episode"})
    assert err.value.field == "ratio_level" and "token, sequence" in str(err.value)
    # PPO's advantages differ token by token (GAE), which a sequence-level ratio cannot carry.
    with pytest.raises(ConfigError) as err:
        validate_config("ppo", {"ratio_level": "sequence"})
    assert err.value.field == "ratio_level" and "unknown field" in str(err.value)


# --- through a real trainer on a tiny model ---


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agent_core.training.tiny_policy import build_tiny_policy

    path = tmp_path_factory.mktemp("tiny") / "base"
    return build_tiny_policy(path, hidden_size=32, num_layers=1, num_heads=2, vocab_size=600)


def _trainer(base: Path, out: Path, **cfg: object):  # type: ignore[no-untyped-def]
    from agent_core.training.rl_trainer import RLTrainer

    config = validate_config("grpo", {"iterations": 1, "min_rollouts": 2, "max_rollouts": 2, **cfg})
    return RLTrainer(RunSpec("grpo", config, base, out), NullHooks(quiet=True))


def _turn(parsed: bool = True, ids: tuple[int, ...] = (11, 12, 13, 14)) -> RLTurn:
    from agent_core.training.toy import oracle_examples

    ex = oracle_examples(["toy/buttons-2"], range(7, 8))[0]
    return RLTurn(ex.messages, ex.a11y, ids, (-1.0,) * len(ids), parsed=parsed)


def _episode(reward: float, *turns: RLTurn) -> RLEpisode:
    return RLEpisode("toy/buttons-2", 1, reward, turns, 0, steps=len(turns))


def test_an_unparsable_turn_lowers_its_episodes_advantage(base: Path, tmp_path: Path) -> None:
    trainer = _trainer(base, tmp_path / "fmt", format_reward=-0.3)
    clean = _episode(1.0, _turn(), _turn())
    sloppy = _episode(1.0, _turn(), _turn(parsed=False))  # same outcome, one turn did not parse
    failed = _episode(0.0, _turn())
    samples = trainer.algo.samples([[clean, sloppy, failed]], {}, trainer)
    advs = [s.advantages for s in samples]
    assert all(len(set(a)) == 1 for a in advs)  # every token of a turn carries its episode's advantage
    expected = group_advantages([1.0, 0.7, 0.0])  # the penalty summed into the episode's reward
    assert [a[0] for a in advs] == pytest.approx([expected[0]] * 2 + [expected[1]] * 2 + [expected[2]])
    assert advs[0][0] > advs[2][0] > advs[4][0]
    # Two successes, one sloppy: no longer a group that all agrees, so it teaches the clean one.
    samples = trainer.algo.samples([[clean, sloppy]], {}, trainer)
    assert len(samples) == 4 and samples[0].advantages[0] > 0 > samples[2].advantages[0]
    assert trainer.untrained["agreed_solved"] == 0


@pytest.mark.parametrize("level", ["sequence", "token"])
def test_the_trainer_clips_at_the_configured_ratio_level(level: str, base: Path, tmp_path: Path) -> None:
    trainer = _trainer(base, tmp_path / level, ratio_level=level, minibatch_size=8)
    ids = (11, 12, 13, 14)
    group = [_episode(1.0, _turn(ids=ids)), _episode(0.0, _turn(ids=ids[:3]))]
    samples = trainer.algo.samples([group], {}, trainer)
    # pi_old moved by +-0.5 per token (0 on an odd last one): each token's ratio e^+-0.5 is outside
    # [0.9, 1.28], while each turn's mean log-ratio, and so its sequence ratio, stays 0.
    for s in samples:
        deltas = [0.5 if i % 2 == 0 else -0.5 for i in range(len(s.old_logprobs))]
        if len(deltas) % 2:
            deltas[-1] = 0.0
        s.old_logprobs = [lp - d for lp, d in zip(s.old_logprobs, deltas, strict=True)]
    stats: dict[str, list[float]] = defaultdict(list)
    trainer._train_minibatch(samples, stats, pretraining=False)
    if level == "sequence":
        assert stats["clip_frac"] == [0.0] and stats["ratio_max"][0] == pytest.approx(1.0, abs=1e-3)
    else:
        assert stats["clip_frac"][0] > 0.2 and stats["ratio_max"][0] == pytest.approx(math.exp(0.5), rel=1e-3)
