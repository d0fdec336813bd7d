"""Advantage estimators against values worked out by hand on toy trajectories."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

from agent_core.rl import adaptive_lambda, decoupled_gae, gae, group_advantages, mc_returns, whiten

ROOT = Path(__file__).resolve().parents[3]


def t(*xs: float) -> torch.Tensor:
    return torch.tensor(xs, dtype=torch.float32)


def test_importing_agent_core_rl_loads_no_torch() -> None:
    code = (
        "import sys, agent_core.rl; heavy = {'torch', 'safetensors'} & set(sys.modules);"
        " assert not heavy, heavy"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, timeout=60)


def test_mc_returns_discount_from_the_end() -> None:
    # G2 = 2; G1 = 0 + 0.5 * 2 = 1; G0 = 1 + 0.5 * 1 = 1.5
    assert_close(mc_returns(t(1, 0, 2), gamma=0.5), t(1.5, 1.0, 2.0))
    # gamma 1: every token gets the sum of what follows it
    assert_close(mc_returns(t(0, 0, 1)), t(1, 1, 1))


def test_gae_matches_the_hand_computation() -> None:
    # gamma 1, lam 0.5, V after the last token = 0:
    # delta2 = 1 + 0 - 0.7 = 0.3; delta1 = 0 + 0.7 - 0.6 = 0.1; delta0 = 0 + 0.6 - 0.5 = 0.1
    # A2 = 0.3; A1 = 0.1 + 0.5 * 0.3 = 0.25; A0 = 0.1 + 0.5 * 0.25 = 0.225
    # returns = A + V = [0.725, 0.85, 1.0]
    adv, ret = gae(t(0, 0, 1), t(0.5, 0.6, 0.7), gamma=1.0, lam=0.5)
    assert_close(adv, t(0.225, 0.25, 0.3))
    assert_close(ret, t(0.725, 0.85, 1.0))


def test_gae_with_lambda_one_is_monte_carlo() -> None:
    # lam 1: A1 = 0.1 + 0.3 = 0.4, A0 = 0.1 + 0.4 = 0.5; returns = [1, 1, 1] = the MC returns
    rewards, values = t(0, 0, 1), t(0.5, 0.6, 0.7)
    adv, ret = gae(rewards, values, gamma=1.0, lam=1.0)
    assert_close(adv, t(0.5, 0.4, 0.3))
    assert_close(ret, mc_returns(rewards))


def test_gae_with_lambda_zero_is_the_td_error() -> None:
    # gamma 0.9, lam 0: A_t = r_t + 0.9 V_{t+1} - V_t
    # A2 = 1 - 0.7 = 0.3; A1 = 0.9 * 0.7 - 0.6 = 0.03; A0 = 0.9 * 0.6 - 0.5 = 0.04
    adv, _ = gae(t(0, 0, 1), t(0.5, 0.6, 0.7), gamma=0.9, lam=0.0)
    assert_close(adv, t(0.04, 0.03, 0.3))


def test_gae_is_detached_and_checks_lengths() -> None:
    values = t(0.5, 0.6, 0.7).requires_grad_()
    adv, ret = gae(t(0, 0, 1), values, gamma=1.0, lam=0.5)
    assert not adv.requires_grad and not ret.requires_grad
    with pytest.raises(ValueError, match="shape"):
        gae(t(0, 1), t(0.5, 0.6, 0.7), gamma=1.0, lam=0.5)


def test_decoupled_gae_value_targets_are_mc_returns_with_lambda_one() -> None:
    # Policy side with lam 0 (the TD errors above); value side with lam 1: G = [0.81, 0.9, 1]
    rewards, values = t(0, 0, 1), t(0.5, 0.6, 0.7)
    adv, targets = decoupled_gae(rewards, values, gamma=0.9, lambda_value=1.0, lambda_policy=0.0)
    assert_close(adv, t(0.04, 0.03, 0.3))
    assert_close(targets, mc_returns(rewards, gamma=0.9))
    assert_close(targets, t(0.81, 0.9, 1.0))


def test_decoupled_gae_policy_side_uses_lambda_policy() -> None:
    adv, targets = decoupled_gae(t(0, 0, 1), t(0.5, 0.6, 0.7), gamma=1.0, lambda_value=1.0, lambda_policy=0.5)
    assert_close(adv, t(0.225, 0.25, 0.3))
    assert_close(targets, t(1.0, 1.0, 1.0))


@pytest.mark.parametrize(
    ("length", "alpha", "expected"),
    [
        (100, 0.05, 0.8),  # 1 - 1/5
        (40, 0.05, 0.5),  # 1 - 1/2
        (20, 0.05, 0.0),  # 1 - 1/1
        (10, 0.05, 0.0),  # 1 - 1/0.5 = -1, clamped
        (0, 0.05, 0.0),  # no division by zero
        (1000, 1.0, 0.999),
    ],
)
def test_adaptive_lambda(length: int, alpha: float, expected: float) -> None:
    assert adaptive_lambda(length, alpha) == pytest.approx(expected)


def test_adaptive_lambda_stays_below_one_and_needs_a_positive_alpha() -> None:
    assert adaptive_lambda(10**30, 10.0) < 1.0
    with pytest.raises(ValueError, match="alpha"):
        adaptive_lambda(10, 0.0)


def test_group_advantages_normalise_within_the_group() -> None:
    # mean 0.5, population std 0.5: (1 - 0.5) / 0.5 = 1, (0 - 0.5) / 0.5 = -1
    assert group_advantages([1, 0, 0, 1]) == pytest.approx([1, -1, -1, 1], abs=1e-5)
    # mean 0.25, std = sqrt((0.75^2 + 3 * 0.25^2) / 4) = sqrt(0.1875) = sqrt(3)/4
    # -> 0.75 / (sqrt(3)/4) = sqrt(3), -0.25 / (sqrt(3)/4) = -1/sqrt(3)
    r3 = math.sqrt(3)
    assert group_advantages([1, 0, 0, 0]) == pytest.approx([r3, -1 / r3, -1 / r3, -1 / r3], abs=1e-5)


def test_group_advantages_of_a_flat_group_are_exactly_zero() -> None:
    assert group_advantages([0.1, 0.1, 0.1]) == [0.0, 0.0, 0.0]
    assert group_advantages([1.0]) == [0.0]
    assert group_advantages([]) == []


def test_whiten_uses_only_the_masked_entries() -> None:
    # masked entries [1, 2, 3]: mean 2, population var 2/3 -> (x - 2) / sqrt(2/3) = [-1.2247, 0, 1.2247]
    s = math.sqrt(2 / 3)
    out = whiten(t(1, 2, 3, 100), t(1, 1, 1, 0))
    assert_close(out, t(-1 / s, 0, 1 / s, 0))
    assert_close(whiten(t(1, 2, 3)), t(-1 / s, 0, 1 / s))


def test_estimators_take_one_episode_at_a_time() -> None:
    with pytest.raises(ValueError, match="1-D"):
        mc_returns(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="1-D"):
        gae(torch.zeros(2, 3), torch.zeros(2, 3), gamma=1.0, lam=1.0)
