"""Policy and value losses and their statistics, over batches of generated tokens.

Tensors are [B, T] with a 0/1 float `mask` that marks the generated tokens (prompt, padding and
environment tokens are 0). Every loss is a token-mean: the sum over masked tokens of the whole batch
divided by their count, so long responses weigh by their length (DAPO / UI-TARS-2), not per sequence;
except the sequence-level (GSPO) policy loss, whose unit is the sequence: a mean over sequences.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
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


def _clipped_surrogate(adv: Any, ratio: Any, eps_low: float, eps_high: float) -> tuple[Any, Any]:
    """max(-A r, -A clip(r, 1 - eps_low, 1 + eps_high)) and where the clipped term is the larger."""
    torch = _torch()
    pg1 = -adv * ratio
    pg2 = -adv * ratio.clamp(1.0 - eps_low, 1.0 + eps_high)
    return torch.maximum(pg1, pg2), pg2 > pg1


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

    `dual_clip` c: None or 0 for none, else above 1 (a ValueError otherwise: see _dual_clip).
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
    loss_tok, clipped = _clipped_surrogate(adv, ratio, eps_low, eps_high)

    # --- dual clip: for negative advantages the loss above is unbounded in the ratio; cap it at -A*c
    loss_tok, dual = _dual_clip(loss_tok, adv, dual_clip)

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


def gspo_policy_loss(
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
    """GSPO's clipped surrogate on sequence-level ratios (Zheng et al. 2025), a mean over sequences.

    Each row is one sequence i (a turn's response) with one advantage A_i on every masked token (a
    ValueError otherwise). Its ratio s_i = exp(mean over its masked tokens of (log pi - log pi_old))
    is the length-normalised likelihood ratio, clipped to [1 - eps_low, 1 + eps_high] as a whole: the
    sequence is in or out of the trust region, never a few of its tokens. Loss: the mean over rows with
    a masked token of max(-A_i s_i, -A_i clip(s_i)), dual-clipped as ppo_policy_loss's, times the mean
    of the row's IS weights (a per-token weight on a loss averaged over the sequence's tokens). So
    d loss / d log pi_t = -A_i s_i / (|y_i| * sequences) on every token of an unclipped sequence.

    Stats as ppo_policy_loss's, per sequence: clip_frac and dual_clip_frac are shares of sequences,
    ratio_mean and ratio_max are over the s_i; approx_kl stays the token-mean k3 estimate, so the two
    ratio levels' KL reads alike.
    """
    torch = _torch()
    m = mask.to(logprobs.dtype)
    has = m.sum(dim=-1) > 0
    adv = _sequence_advantages(advantages.detach(), m, has)
    old = old_logprobs.detach()
    diff = torch.where(m > 0, logprobs - old, torch.zeros_like(logprobs))
    seq_log_ratio = diff.sum(dim=-1) / m.sum(dim=-1).clamp_min(1.0)
    ratio = torch.exp(seq_log_ratio.clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT))

    # --- clipped surrogate per sequence (asymmetric, as the token-level loss)
    loss_seq, clipped = _clipped_surrogate(adv, ratio, eps_low, eps_high)
    loss_seq, dual = _dual_clip(loss_seq, adv, dual_clip)
    if is_weights is not None:
        loss_seq = loss_seq * masked_mean(is_weights.detach(), m, dim=-1)

    seqs = has.to(loss_seq.dtype)
    loss = (loss_seq * seqs).sum() / seqs.sum().clamp_min(1.0)

    with torch.no_grad():
        r = ratio.detach()
        tok_lr = (logprobs.detach() - old).clamp(-_LOG_RATIO_LIMIT, _LOG_RATIO_LIMIT)
        stats = {
            "clip_frac": float(masked_mean(clipped.to(r.dtype), seqs)),
            "dual_clip_frac": float(masked_mean(dual.to(r.dtype), seqs)),
            "approx_kl": float(masked_mean((torch.exp(tok_lr) - 1.0) - tok_lr, m)),
            "ratio_mean": float(masked_mean(r, seqs)),
            "ratio_max": float(torch.where(has, r, torch.zeros_like(r)).max()) if bool(has.any()) else 0.0,
        }
    return loss, stats


def _sequence_advantages(adv: Any, m: Any, has: Any) -> Any:
    """[B, T] token advantages -> [B]: each row's one advantage (0 for a row without tokens)."""
    torch = _torch()
    big = torch.finfo(adv.dtype).max
    hi = torch.where(m > 0, adv, torch.full_like(adv, -big)).amax(dim=-1)
    lo = torch.where(m > 0, adv, torch.full_like(adv, big)).amin(dim=-1)
    if bool((has & (hi != lo)).any()):
        raise ValueError("a sequence-level ratio needs one advantage on every token of a sequence")
    return torch.where(has, hi, torch.zeros_like(hi))


def _dual_clip(loss: Any, adv: Any, dual_clip: float | None) -> tuple[Any, Any]:
    """Cap the loss of negative advantages at -A*c (Ye et al. 2020); the loss and where it was capped.

    c must exceed 1: the clipped loss of a negative advantage is already at least -A*(1 - eps_low), so
    a bound c <= 1 would cap (and stop the gradient of) every negative-advantage token or sequence whose
    ratio passed c, which is no dual clip; such a c is refused, not quietly ignored. None or 0: none."""
    torch = _torch()
    if dual_clip is None or dual_clip == 0:
        return loss, torch.zeros_like(loss, dtype=torch.bool)
    if not dual_clip > 1.0:
        raise ValueError(f"dual_clip must exceed 1 (or be 0 for none), got {dual_clip:g}")
    bound = -adv * dual_clip
    dual = (adv < 0) & (loss > bound)
    return torch.where(dual, bound, loss), dual


PolicyLoss = Callable[..., tuple[Any, dict[str, float]]]
POLICY_LOSSES: dict[str, PolicyLoss] = {"token": ppo_policy_loss, "sequence": gspo_policy_loss}
"""The clipped policy losses by the level their importance ratio is taken at (GRPO's `ratio_level`)."""


def policy_loss(ratio_level: str) -> PolicyLoss:
    """The clipped policy loss whose importance ratio is per token or per sequence; raises on others."""
    if ratio_level not in POLICY_LOSSES:
        raise ValueError(f"unknown ratio level {ratio_level!r}; valid: {', '.join(POLICY_LOSSES)}")
    return POLICY_LOSSES[ratio_level]


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
