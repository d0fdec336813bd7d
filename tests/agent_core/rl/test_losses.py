"""Policy and value losses against values worked out by hand on 2 x 3 token batches."""

from __future__ import annotations

import math

import pytest
import torch
from torch.testing import assert_close

from agent_core.rl import (
    entropy_from_logits,
    explained_variance,
    kl_penalty,
    masked_mean,
    ppo_policy_loss,
    truncated_is_weights,
    value_loss,
)

MASK = torch.tensor([[1.0, 1.0, 1.0], [1.0, 1.0, 0.0]])
# Token by token, with eps_low 0.2, eps_high 0.3 (ratio clamped to [0.8, 1.3]) and dual clip c = 3:
#   (0,0) A=1,  ratio 1.5: pg1 = -1.5, pg2 = -1.3 -> max -1.3 (clipped branch)
#   (0,1) A=-1, ratio 5:   pg1 = 5,    pg2 = 1.3  -> max 5; dual clip min(5, -A*3 = 3) -> 3
#   (0,2) A=2,  ratio 0.9: pg1 = -1.8, pg2 = -1.8 -> -1.8
#   (1,0) A=-2, ratio 0.5: pg1 = 1,    pg2 = 1.6  -> max 1.6 (clipped branch); dual bound 6 not reached
#   (1,1) A=0.5, ratio 1:  -0.5
#   (1,2) masked out (A=100, ratio 10 must not count anywhere)
RATIOS = torch.tensor([[1.5, 5.0, 0.9], [0.5, 1.0, 10.0]])
ADV = torch.tensor([[1.0, -1.0, 2.0], [-2.0, 0.5, 100.0]])
OLD = torch.tensor([[-1.0, -2.0, -0.5], [-3.0, -0.7, -1.2]])


def _logprobs() -> torch.Tensor:
    return (OLD + RATIOS.log()).requires_grad_()


def test_ppo_loss_with_asymmetric_and_dual_clip() -> None:
    lp = _logprobs()
    loss, stats = ppo_policy_loss(lp, OLD, ADV, MASK, eps_low=0.2, eps_high=0.3, dual_clip=3.0)
    # token-mean: (-1.3 + 3 - 1.8 + 1.6 - 0.5) / 5 = 1.0 / 5
    assert_close(loss, torch.tensor(0.2))
    assert stats["clip_frac"] == pytest.approx(2 / 5)  # (0,0) and (1,0)
    assert stats["dual_clip_frac"] == pytest.approx(1 / 5)  # (0,1)
    assert stats["ratio_mean"] == pytest.approx((1.5 + 5 + 0.9 + 0.5 + 1) / 5)
    assert stats["ratio_max"] == pytest.approx(5.0)  # the masked 10 is ignored
    # k3: (r - 1) - ln r per token, token-mean
    kl = sum((r - 1) - math.log(r) for r in (1.5, 5, 0.9, 0.5, 1)) / 5
    assert stats["approx_kl"] == pytest.approx(kl, rel=1e-5)
    assert all(isinstance(v, float) for v in stats.values())

    # Gradients flow only through unclipped tokens: d(-A * ratio)/d lp = -A * ratio, over 5 tokens.
    loss.backward()
    assert lp.grad is not None
    assert_close(lp.grad, torch.tensor([[0.0, 0.0, -1.8 / 5], [0.0, -0.5 / 5, 0.0]]))


def test_ppo_loss_without_dual_clip_keeps_the_large_negative_advantage_loss() -> None:
    # (0,1) stays at 5: (-1.3 + 5 - 1.8 + 1.6 - 0.5) / 5 = 3.0 / 5. A c in (0, 1] is refused, not
    # taken for "off" (tests/agent_core/training/test_grpo_audit.py).
    for dual in (None, 0.0):
        loss, stats = ppo_policy_loss(_logprobs(), OLD, ADV, MASK, eps_low=0.2, eps_high=0.3, dual_clip=dual)
        assert_close(loss, torch.tensor(0.6))
        assert stats["dual_clip_frac"] == 0.0


def test_ppo_loss_weighs_tokens_by_importance_weights() -> None:
    weights = torch.tensor([[1.0, 0.5, 2.0], [1.0, 1.0, 7.0]])
    loss, _ = ppo_policy_loss(
        _logprobs(), OLD, ADV, MASK, eps_low=0.2, eps_high=0.3, dual_clip=3.0, is_weights=weights
    )
    # (-1.3 * 1 + 3 * 0.5 - 1.8 * 2 + 1.6 - 0.5) / 5 = -2.3 / 5
    assert_close(loss, torch.tensor(-0.46))


def test_ppo_loss_is_zero_at_the_old_policy_with_zero_advantages() -> None:
    loss, stats = ppo_policy_loss(
        OLD.clone(), OLD, torch.zeros(2, 3), MASK, eps_low=0.2, eps_high=0.28, dual_clip=3.0
    )
    assert float(loss) == 0.0
    assert stats["clip_frac"] == 0.0 and stats["approx_kl"] == 0.0 and stats["ratio_mean"] == 1.0


def test_truncated_is_weights_cap_and_detach() -> None:
    old = torch.tensor([0.0, math.log(3.0), math.log(0.5)], requires_grad=True)
    rollout = torch.zeros(3)
    w = truncated_is_weights(old, rollout, cap=2.0)
    # exp(0) = 1; exp(ln 3) = 3 -> capped at 2; exp(ln 0.5) = 0.5
    assert_close(w, torch.tensor([1.0, 2.0, 0.5]))
    assert not w.requires_grad


def test_masked_mean_over_everything_and_along_a_dim() -> None:
    x = torch.tensor([[1.0, 2.0], [3.0, 4.0]])
    mask = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    assert_close(masked_mean(x, mask), torch.tensor(8.0 / 3))  # (1 + 3 + 4) / 3
    assert_close(masked_mean(x, mask, dim=1), torch.tensor([1.0, 3.5]))
    assert float(masked_mean(x, torch.zeros(2, 2))) == 0.0


def test_value_loss_unclipped_and_clipped() -> None:
    values = torch.tensor([[1.0, 2.0, 0.0]])
    returns = torch.tensor([[0.0, 2.5, 9.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0]])
    # 0.5 * ((1 - 0)^2 + (2 - 2.5)^2) / 2 = 0.5 * 1.25 / 2
    assert_close(value_loss(values, returns, mask), torch.tensor(0.3125))
    # clip 0.1 around old [0.8, 1.0]: clipped values [0.9, 1.1]
    #   token 0: max((1 - 0)^2, (0.9 - 0)^2) = 1; token 1: max(0.25, (1.1 - 2.5)^2 = 1.96) = 1.96
    #   0.5 * (1 + 1.96) / 2 = 0.74
    old = torch.tensor([[0.8, 1.0, 0.0]])
    assert_close(value_loss(values, returns, mask, old_values=old, clip=0.1), torch.tensor(0.74))
    with pytest.raises(ValueError, match="old_values"):
        value_loss(values, returns, mask, clip=0.1)


def test_explained_variance() -> None:
    target = torch.tensor([1.0, 2.0, 3.0, 4.0, 50.0])
    pred = torch.tensor([1.0, 2.0, 3.0, 5.0, -50.0])
    mask = torch.tensor([1.0, 1.0, 1.0, 1.0, 0.0])
    # errors [0, 0, 0, -1]: Var = 0.1875; Var(target [1..4]) = 1.25 -> 1 - 0.15 = 0.85
    assert explained_variance(pred, target, mask) == pytest.approx(0.85)
    assert explained_variance(target, target, mask) == pytest.approx(1.0)
    assert explained_variance(pred, torch.ones(5), mask) == 0.0
    assert explained_variance(pred, target, torch.zeros(5)) == 0.0


def test_entropy_from_logits() -> None:
    assert_close(entropy_from_logits(torch.zeros(2, 3, 7)), torch.full((2, 3), math.log(7)))
    # huge logits do not overflow; -inf entries (masked vocabulary) contribute 0, not nan
    assert_close(entropy_from_logits(torch.tensor([1000.0, 1000.0])), torch.tensor(math.log(2)))
    assert_close(entropy_from_logits(torch.tensor([0.0, -math.inf])), torch.tensor(0.0))
    # p = [0.5, 0.25, 0.25] (logits ln p): H = 0.5 ln 2 + 2 * 0.25 ln 4 = 1.5 ln 2
    logits = torch.tensor([0.5, 0.25, 0.25]).log()
    assert_close(entropy_from_logits(logits), torch.tensor(1.5 * math.log(2)))


def test_kl_penalty_k3() -> None:
    lp = torch.tensor([-1.0, math.log(0.25)])
    ref = torch.tensor([-1.0, math.log(0.5)])
    # d = ref - lp: 0 -> e^0 - 0 - 1 = 0; ln 2 -> 2 - ln 2 - 1 = 1 - ln 2
    assert_close(kl_penalty(lp, ref), torch.tensor([0.0, 1 - math.log(2)]))
