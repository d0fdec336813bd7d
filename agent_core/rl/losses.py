"""Policy and value losses and their statistics, over batches of generated tokens.

Tensors are [B, T] with a 0/1 float `mask` that marks the generated tokens (prompt, padding and
environment tokens are 0). Every loss is a token-mean: the sum over masked tokens of the whole batch
divided by their count, so long responses weigh by their length (DAPO / UI-TARS-2), not per sequence.
"""

from __future__ import annotations

import importlib
from typing import Any

# exp() of a log-ratio beyond this overflows float32 long before it means anything (verl clamps the same).
_LOG_RATIO_LIMIT = 20.0


def _torch() -> Any:
    # Imported on use so that agent_core (and the web process) imports without torch.
    return importlib.import_module("torch")


def masked_mean(x: Any, mask: Any, dim: int | None = None) -> Any:
    """sum(x * mask) / sum(mask) over everything (the token-mean) or along `dim`; 0 if the mask is empty."""
    m = mask.to(x.dtype)
    if dim is None:
        return (x * m).sum() / m.sum().clamp_min(1e-8)
    return (x * m).sum(dim=dim) / m.sum(dim=dim).clamp_min(1e-8)


def truncated_is_weights(old_logprobs: Any, rollout_logprobs: Any, cap: float) -> Any:
    """Truncated importance weights min(pi_old / pi_rollout, cap) per token, detached."""
    torch = _torch()
    log_ratio = (old_logprobs - rollout_logprobs).detach()
    return torch.exp(log_ratio.clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)).clamp(max=cap)


def ppo_policy_loss(
    logprobs: Any,
    old_logprobs: Any,
    advantages: Any,
    mask: Any,
    *,
    eps_low: float,
    eps_high: float,
    dual_clip: float | None = None,
    is_weights: Any = None,
) -> tuple[Any, dict[str, float]]:
    """Clipped PPO surrogate (asymmetric clip, optional dual clip and IS weights), token-mean; with stats.

    Stats: clip_frac (share of masked tokens where the clipped term is the larger loss), dual_clip_frac
    (share where the dual-clip bound -A*c replaced it), approx_kl (token-mean of the k3 estimator
    (ratio - 1) - log(ratio) of KL(old || new)), ratio_mean and ratio_max over masked tokens.
    """
    torch = _torch()
    old = old_logprobs.detach()
    adv = advantages.detach()
    log_ratio = (logprobs - old).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    ratio = torch.exp(log_ratio)

    # --- clipped surrogate (asymmetric: DAPO's clip-higher lets rare tokens grow more than they shrink)
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    loss_tok = torch.maximum(pg1, pg2)
    clipped = pg2 > pg1

    # --- dual clip: for negative advantages the loss above is unbounded in the ratio; cap it at -A*c
    dual = torch.zeros_like(clipped)
    if dual_clip is not None and dual_clip > 1.0:
        bound = -adv * dual_clip
        dual = (adv < 0) & (loss_tok > bound)
        loss_tok = torch.where(dual, bound, loss_tok)

    # --- truncated importance sampling against the rollout's sampler
    if is_weights is not None:
        loss_tok = loss_tok * is_weights.detach()

    loss = masked_mean(loss_tok, mask)

    with torch.no_grad():
        m = mask.to(ratio.dtype)
        has_tokens = bool(m.sum() > 0)
        lr = log_ratio.detach()
        r = ratio.detach()
        stats = {
            "clip_frac": float(masked_mean(clipped.to(r.dtype), m)),
            "dual_clip_frac": float(masked_mean(dual.to(r.dtype), m)),
            "approx_kl": float(masked_mean((r - 1.0) - lr, m)),
            "ratio_mean": float(masked_mean(r, m)),
            "ratio_max": float(torch.where(m > 0, r, torch.zeros_like(r)).max()) if has_tokens else 0.0,
        }
    return loss, stats


def value_loss(values: Any, returns: Any, mask: Any, *, old_values: Any = None, clip: float = 0.0) -> Any:
    """0.5 * (v - R)^2, token-mean; clip > 0: PPO's max(unclipped, clipped to old_values +- clip)."""
    torch = _torch()
    target = returns.detach()
    unclipped = (values - target) ** 2
    if clip > 0.0:
        if old_values is None:
            raise ValueError("value clipping (clip > 0) needs old_values")
        old = old_values.detach()
        v_clipped = old + (values - old).clamp(-clip, clip)
        per_token = torch.maximum(unclipped, (v_clipped - target) ** 2)
    else:
        per_token = unclipped
    return 0.5 * masked_mean(per_token, mask)


def explained_variance(pred: Any, target: Any, mask: Any) -> float:
    """1 - Var(target - pred) / Var(target) over masked entries (population); 0.0 if Var(target) is 0."""
    torch = _torch()
    with torch.no_grad():
        m = mask.to(target.dtype)
        if float(m.sum()) == 0.0:
            return 0.0
        p = pred.detach().to(target.dtype)
        t = target.detach()

        def var(x: Any) -> Any:
            mean = masked_mean(x, m)
            return masked_mean((x - mean) ** 2, m)

        var_target = float(var(t))
        if var_target == 0.0:
            return 0.0
        return 1.0 - float(var(t - p)) / var_target


def entropy_from_logits(logits: Any) -> Any:
    """Entropy of softmax(logits) over the last dimension ([..., V] -> [...]); -inf logits are fine."""
    torch = _torch()
    logp = torch.log_softmax(logits.float(), dim=-1)
    p = logp.exp()
    # 0 * log 0 is 0, not nan, for masked-out (-inf) entries of the vocabulary.
    plogp = torch.where(p > 0, p * logp, torch.zeros_like(p))
    return -plogp.sum(dim=-1)


def kl_penalty(logprobs: Any, ref_logprobs: Any) -> Any:
    """Per-token KL(pi || ref) by the k3 estimator exp(ref - lp) - (ref - lp) - 1 (non-negative, unbiased)."""
    torch = _torch()
    d = (ref_logprobs.detach() - logprobs).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
    return torch.exp(d) - d - 1.0
