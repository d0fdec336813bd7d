"""The distribution a policy samples its tokens from, as one pure tensor function.

softmax(logits / temperature), renormalised over its top-p nucleus: the most likely tokens, fewest
first, until their probabilities sum past top_p (the nucleus as transformers' TopPLogitsWarper and
vLLM's sampler define it: drop each token whose cumulative probability in ascending order is at most
1 - top_p, always keep the likeliest). The local policy samples from it and records its
log-probabilities, the RL trainer scores π_old and π with it, and vLLM with `--logprobs-mode
processed_logprobs` returns the same quantity: the ratio and the importance weight then both refer to
the policy that acted. At temperature 1 and top_p 1 it is the raw model distribution.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_core.training.errors import lazy


def check_sampling(temperature: float, top_p: float) -> None:
    """ValueError unless temperature > 0 and 0 < top_p <= 1."""
    if not temperature > 0:
        raise ValueError(f"temperature must be above 0, got {temperature!r}")
    if not 0 < top_p <= 1:
        raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")


def sampling_logprobs(
    logits: Any, *, temperature: float = 1.0, top_p: float = 1.0, keep: Any = None
) -> tuple[Any, Any]:
    """(float32 log-probabilities [..., V] of the sampling distribution, -inf outside the nucleus;
    whether each `keep` token lay outside the nucleus, or None).

    `keep` ([...], token ids) are tokens that stay in the support even where they fall outside the
    nucleus: the trainer passes the sampled tokens, since logits recomputed in another batch shape (or
    after an update) can move a token that was just inside the sampler's nucleus just outside it, and
    its log-probability must stay finite. The gradient flows through the kept logits."""
    check_sampling(temperature, top_p)
    torch = lazy("torch")
    scaled = logits.float()
    if temperature != 1.0:
        scaled = scaled / temperature
    if top_p >= 1.0:
        return torch.log_softmax(scaled, dim=-1), None
    with torch.no_grad():  # which tokens are in the nucleus is a choice, not a function to differentiate
        ordered, order = scaled.sort(dim=-1)
        cumulative = ordered.softmax(dim=-1).cumsum(dim=-1)
        drop_sorted = cumulative <= 1.0 - top_p
        drop_sorted[..., -1] = False
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        outside = None
        if keep is not None:
            index = keep.unsqueeze(-1)
            outside = drop.gather(-1, index).squeeze(-1)
            drop.scatter_(-1, index, False)
    return torch.log_softmax(scaled.masked_fill(drop, float("-inf")), dim=-1), outside


def entropy_of(logp: Any) -> Any:
    """Entropy [...] of the distributions whose log-probabilities are `logp` [..., V] (-inf allowed);
    its gradient is finite too (0 · log 0 contributes nothing either way)."""
    torch = lazy("torch")
    p = logp.exp()
    return -(p * torch.where(p > 0, logp, torch.zeros_like(logp))).sum(dim=-1)


_PLACEHOLDERS = ("image_token_id", "image_token_index", "video_token_id", "video_token_index")


def placeholder_ids(model: Any) -> tuple[int, ...]:
    """The token ids a vision-language model uses as image (and video) placeholders in its prompt.

    They are never text the policy may say: sampled into a response, the re-scoring forward pass counts
    them as images that have no features (transformers refuses it). The local policy never samples
    them and the trainer scores the same distribution without them (`without_placeholders`)."""
    inner = getattr(model, "module", model)  # under DDP
    config = getattr(inner, "config", None)
    return placeholder_ids_in({name: getattr(config, name, None) for name in _PLACEHOLDERS})


def placeholder_ids_in(config: Mapping[str, Any]) -> tuple[int, ...]:
    """The placeholder token ids a model's config (its config.json, as a dict) names."""
    found = {config.get(name) for name in _PLACEHOLDERS}
    return tuple(sorted(i for i in found if isinstance(i, int) and not isinstance(i, bool) and i >= 0))


def without_placeholders(logits: Any, ids: tuple[int, ...]) -> Any:
    """`logits` [..., V] with the placeholder tokens `ids` impossible (-inf); unchanged without any."""
    if not ids:
        return logits
    torch = lazy("torch")
    index = torch.tensor([i for i in ids if i < logits.shape[-1]], dtype=torch.long, device=logits.device)
    return logits.index_fill(-1, index, float("-inf")) if index.numel() else logits
