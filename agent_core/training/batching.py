"""Samples as tensors: a turn's prompt and response ids, padded batches with their response masks,
per-token log-probabilities, and response values laid out over (and read back from) a batch.

Pure tensor plumbing shared by the SFT and RL trainers; the losses themselves are in agent_core.rl.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping, MutableMapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_core.training.errors import lazy
from agent_core.training.sampling import entropy_of, placeholder_ids, sampling_logprobs, without_placeholders


@dataclass
class Sample:
    prompt: list[int]
    response: list[int]
    messages: Sequence[Mapping[str, Any]] = ()
    """The prompt's messages, kept (by reference) where a vision-language model needs their images."""
    rollout_logprobs: list[float] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)
    old_logprobs: list[float] = field(default_factory=list)
    old_values: list[float] = field(default_factory=list)
    entropy: float = 0.0
    turn_index: int = 0
    """Its turn's place in its episode (RL), for the per-turn engine/trainer mismatch."""
    on_policy: bool = True
    """Whether the policy version that sampled it is the one the trainer scores it with (RL)."""


def fit_prompt(prompt: list[int], response: list[int], max_len: int) -> list[int]:
    """The prompt cut from the left so prompt + response fit in `max_len` (the response is kept)."""
    room = max(1, max_len - len(response))
    return prompt[-room:]


def minibatches(samples: list[Sample], size: int) -> list[list[Sample]]:
    """`samples` in consecutive slices of `size` (the last one shorter)."""
    return [samples[i : i + size] for i in range(0, len(samples), size)]


def pad_batch(samples: Sequence[Sample], pad: int, device: str) -> tuple[Any, Any, Any, list[int]]:
    """(ids [B,T], attention [B,T], response mask over the *shifted* positions [B,T-1], prompt lens)."""
    torch = lazy("torch")
    width = max(len(s.prompt) + len(s.response) for s in samples)
    ids = torch.full((len(samples), width), pad, dtype=torch.long)
    attn = torch.zeros((len(samples), width), dtype=torch.long)
    mask = torch.zeros((len(samples), width - 1), dtype=torch.float32)
    for i, s in enumerate(samples):
        seq = s.prompt + s.response
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        # Position t of the shifted logits predicts token t+1: the response tokens sit at
        # prompt_len .. prompt_len+len(response)-1, predicted from positions one earlier.
        mask[i, len(s.prompt) - 1 : len(s.prompt) - 1 + len(s.response)] = 1.0
    return ids.to(device), attn.to(device), mask.to(device), [len(s.prompt) for s in samples]


LOGPROB_CHUNK = 1024
"""Positions whose float32 log-softmax (and entropy) over the vocabulary are computed at once."""


def token_logprobs(
    model: Any,
    ids: Any,
    attn: Any,
    *,
    mask: Any = None,
    sampling: Mapping[str, Any] | None = None,
    entropy: bool = False,
    images: Mapping[str, Any] | None = None,
    stats: MutableMapping[str, list[float]] | None = None,
) -> tuple[Any, Any]:
    """Log-probabilities of each next token [B,T-1] under the sampling distribution, and the entropies
    of those distributions (or None). `sampling` (a run config) gives its `temperature` and `top_p`
    (sampling.py: the logits at the temperature, renormalised over the top-p nucleus); without it, or
    at 1 and 1, it is the raw model distribution.

    With `mask` ([B,T-1], as pad_batch gives it) only its positions are computed and the rest are 0:
    the model projects only their hidden states onto the vocabulary (transformers' `logits_to_keep`,
    where the model takes it; otherwise its full logits are sliced first), and the float32 softmax runs
    over LOGPROB_CHUNK positions at a time, recomputed in the backward pass rather than kept. A
    sampled token outside the nucleus is scored over the nucleus plus itself (never -inf); `stats`
    gets the share of such tokens under "outside_nucleus_frac"."""
    torch = lazy("torch")
    temperature = float((sampling or {}).get("temperature", 1.0))
    top_p = float((sampling or {}).get("top_p", 1.0))
    width = ids.shape[1] - 1
    select = (mask > 0) if mask is not None else torch.ones_like(ids[:, 1:], dtype=torch.bool)
    targets = ids[:, 1:][select]
    logits = _selected_logits(model, ids, attn, select, images or {})
    grad = torch.is_grad_enabled() and logits.requires_grad
    checkpoint = lazy("torch.utils.checkpoint").checkpoint
    lps, ents, outside = [], [], 0
    for start in range(0, targets.shape[0], LOGPROB_CHUNK):
        args = (logits[start : start + LOGPROB_CHUNK], targets[start : start + LOGPROB_CHUNK])
        fn = _ChunkScore(temperature, top_p, entropy)
        lp, ent, out = checkpoint(fn, *args, use_reentrant=False) if grad else fn(*args)
        lps.append(lp)
        ents.append(ent)
        outside += int(out)
    if stats is not None and targets.shape[0]:
        stats.setdefault("outside_nucleus_frac", []).append(outside / targets.shape[0])
    where = select.nonzero(as_tuple=True)
    zeros = torch.zeros((ids.shape[0], width), dtype=torch.float32, device=ids.device)
    # No position selected: an empty slice of the logits keeps the result on the graph (a loss over
    # it still runs backward, to zero gradients).
    chosen = zeros.index_put(where, torch.cat(lps) if lps else logits[:, 0].float())
    ent_out = zeros.index_put(where, torch.cat(ents) if ents else logits[:, 0].float()) if entropy else None
    return chosen, ent_out


class _ChunkScore:
    """(log-probabilities of `targets`, entropies, tokens outside the nucleus) of a chunk of logits."""

    def __init__(self, temperature: float, top_p: float, entropy: bool) -> None:
        self.temperature, self.top_p, self.entropy = temperature, top_p, entropy

    def __call__(self, logits: Any, targets: Any) -> tuple[Any, Any, Any]:
        logp, outside = sampling_logprobs(
            logits, temperature=self.temperature, top_p=self.top_p, keep=targets
        )
        chosen = logp.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        ent = entropy_of(logp) if self.entropy else chosen.new_zeros(chosen.shape)
        return chosen, ent, (outside.sum() if outside is not None else targets.new_zeros(()))


def _takes_logits_to_keep(model: Any) -> bool:
    """Whether the model's forward takes a boolean [B,T] `logits_to_keep` (transformers >= 5)."""
    if not hasattr(lazy("transformers.modeling_utils"), "slice_logits_to_keep"):
        return False
    return _takes(model, "logits_to_keep")


def _takes(model: Any, name: str) -> bool:
    """Whether the model's forward (under DDP or peft: the model inside) takes argument `name`."""
    inner = getattr(model, "module", model)
    inner = inner.get_base_model() if hasattr(inner, "get_base_model") else inner
    try:
        return name in inspect.signature(inner.forward).parameters
    except (TypeError, ValueError):
        return False


def _selected_logits(model: Any, ids: Any, attn: Any, select: Any, images: Mapping[str, Any]) -> Any:
    """The logits [N,V] (the model's dtype) at the True positions of `select` [B,T-1], row by row, with a
    vision model's image placeholders impossible (the policy never samples them)."""
    return without_placeholders(_model_logits(model, ids, attn, select, images), placeholder_ids(model))


def multimodal_inputs(model: Any, ids: Any, images: Mapping[str, Any]) -> dict[str, Any]:
    """A forward pass's image inputs: the image tensors, and for a model that places its rotary positions
    by where its images sit (Qwen2-VL / Qwen2.5-VL: `mm_token_type_ids`) that map over the whole padded
    sequence, prompt and response. Without it such a model silently falls back to 1-D positions and
    scores tokens other than the engine sampled them (0.00075 nats/token mean, 0.0024 max, on the tiny
    Qwen2.5-VL against vLLM; 0.00003 with it: the float floor)."""
    out = dict(images)
    if not out or not _takes(model, "mm_token_type_ids"):
        return out
    from agent_core.policies.qwen_vl import mm_token_type_ids

    config = getattr(getattr(model, "module", model), "config", None)  # under DDP
    out["mm_token_type_ids"] = mm_token_type_ids(
        ids, getattr(config, "image_token_id", None), getattr(config, "video_token_id", None)
    )
    return out


def _model_logits(model: Any, ids: Any, attn: Any, select: Any, images: Mapping[str, Any]) -> Any:
    torch = lazy("torch")
    images = multimodal_inputs(model, ids, images)
    if _takes_logits_to_keep(model):
        # The last position predicts nothing: it is never kept.
        keep = torch.cat([select, select.new_zeros((select.shape[0], 1))], dim=1)
        logits = model(input_ids=ids, attention_mask=attn, logits_to_keep=keep, **images).logits
        if logits.ndim == 2:
            return logits
    else:
        logits = model(input_ids=ids, attention_mask=attn, **images).logits
    return logits[:, :-1][select]


def scatter(values: Sequence[Sequence[float]], mask: Any, prompt_lens: Sequence[int]) -> Any:
    """Per-sample response values laid out like `mask` ([B,T-1])."""
    torch = lazy("torch")
    out = torch.zeros_like(mask)
    for i, (vals, p) in enumerate(zip(values, prompt_lens, strict=True)):
        if vals:
            out[i, p - 1 : p - 1 + len(vals)] = torch.tensor(list(vals), dtype=out.dtype)
    return out


def gather(x: Any, mask: Any, prompt_lens: Sequence[int], lengths: Sequence[int]) -> list[list[float]]:
    """The inverse of scatter: each sample's response values as a list."""
    rows = x.detach().float().cpu()
    return [
        rows[i, p - 1 : p - 1 + n].tolist() for i, (p, n) in enumerate(zip(prompt_lens, lengths, strict=True))
    ]
