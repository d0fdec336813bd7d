"""Advantage estimators: Monte-Carlo returns, GAE (plain, decoupled, length-adaptive) and GRPO's groups.

The per-episode functions take 1-D float tensors over the generated tokens of ONE episode, its turns
concatenated and the environment's tokens left out (so "the next token" of a turn's last token is the
first token of the next turn). The value after the last token is 0: episodes end terminally. Results are
detached: they are targets, never differentiated through.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Sequence
from typing import Any


def _torch() -> Any:
    # Imported on use so that agent_core (and the web process) imports without torch.
    return importlib.import_module("torch")


def _check_1d(x: Any) -> None:
    if x.dim() != 1:
        raise ValueError(f"expected the 1-D tokens of one episode, got shape {tuple(x.shape)}")


def mc_returns(rewards: Any, gamma: float = 1.0) -> Any:
    """Discounted returns G_t = r_t + gamma * G_{t+1}, with G_T = 0."""
    torch = _torch()
    _check_1d(rewards)
    out: list[float] = []
    running = 0.0
    # A Python loop over floats: a per-token loop of tiny tensor ops is ~100x slower on long episodes.
    for r in reversed(rewards.detach().tolist()):
        running = r + gamma * running
        out.append(running)
    out.reverse()
    return torch.tensor(out, dtype=rewards.dtype, device=rewards.device)


def gae(rewards: Any, values: Any, *, gamma: float, lam: float) -> tuple[Any, Any]:
    """Generalised advantage estimation: (advantages, returns = advantages + values)."""
    torch = _torch()
    if rewards.shape != values.shape:
        raise ValueError(
            f"rewards and values differ in shape: {tuple(rewards.shape)} vs {tuple(values.shape)}"
        )
    _check_1d(rewards)
    rs, vs = rewards.detach().tolist(), values.detach().tolist()
    advantages: list[float] = []
    next_value = 0.0
    running = 0.0
    for r, v in zip(reversed(rs), reversed(vs), strict=True):
        delta = r + gamma * next_value - v
        running = delta + gamma * lam * running
        advantages.append(running)
        next_value = v
    advantages.reverse()
    adv = torch.tensor(advantages, dtype=rewards.dtype, device=rewards.device)
    returns = torch.tensor([a + v for a, v in zip(advantages, vs, strict=True)], dtype=rewards.dtype)
    return adv, returns.to(rewards.device)


def adaptive_lambda(length: int, alpha: float, *, floor: float = 0.0) -> float:
    """Length-adaptive GAE lambda (VAPO, UI-TARS-2): max(floor, 1 - 1/(alpha * length)), below 1.

    alpha (VAPO's 0.05) is tuned for sequences of thousands of tokens, where the formula lifts lambda
    towards 1 as the sequence grows. On a short one it falls to 0 (20 tokens at 0.05), and lambda 0
    leaves a token only its own TD error: the outcome reward reaches the earlier tokens, such as an
    action's coordinates, only through the critic. `floor` keeps short sequences near Monte-Carlo."""
    if alpha <= 0:
        raise ValueError(f"alpha must be positive, got {alpha}")
    if not 0.0 <= floor < 1.0:
        raise ValueError(f"floor must be in [0, 1), got {floor}")
    scaled = alpha * length
    # Below 1 the formula goes negative (and length 0 would divide by zero): the floor holds there.
    if scaled <= 1.0:
        return floor
    return max(floor, min(1.0 - 1.0 / scaled, math.nextafter(1.0, 0.0)))


def decoupled_gae(
    rewards: Any, values: Any, *, gamma: float, lambda_value: float, lambda_policy: float
) -> tuple[Any, Any]:
    """Decoupled GAE (VAPO): (policy advantages with lambda_policy, value targets with lambda_value)."""
    advantages, _ = gae(rewards, values, gamma=gamma, lam=lambda_policy)
    _, targets = gae(rewards, values, gamma=gamma, lam=lambda_value)
    return advantages, targets


def group_advantages(rewards: Sequence[float], eps: float = 1e-6) -> list[float]:
    """GRPO's group-normalised advantages (r - mean) / (std + eps), population std; a flat group gives 0."""
    n = len(rewards)
    if n == 0:
        return []
    if max(rewards) == min(rewards):
        # Exactly 0, not rounding noise over eps: a group whose rollouts all did the same teaches nothing.
        return [0.0] * n
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n)
    return [(r - mean) / (std + eps) for r in rewards]


def whiten(x: Any, mask: Any = None, eps: float = 1e-8) -> Any:
    """Shift and scale `x` to mean 0 and variance 1 (population) over the masked entries; others become 0."""
    torch = _torch()
    if mask is None:
        mean = x.mean()
        var = ((x - mean) ** 2).mean()
        return (x - mean) * torch.rsqrt(var + eps)
    m = mask.to(x.dtype)
    count = m.sum().clamp_min(1.0)
    mean = (x * m).sum() / count
    var = (((x - mean) ** 2) * m).sum() / count
    return (x - mean) * torch.rsqrt(var + eps) * m
