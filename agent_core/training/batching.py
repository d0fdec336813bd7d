"""Samples as tensors: a turn's prompt and response ids, padded batches with their response masks,
per-token log-probabilities, and response values laid out over (and read back from) a batch.

Pure tensor plumbing shared by the SFT and RL trainers; the losses themselves are in agent_core.rl.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from agent_core.rl.losses import entropy_from_logits
from agent_core.training.errors import lazy


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


def token_logprobs(
    model: Any, ids: Any, attn: Any, *, entropy: bool = False, images: Mapping[str, Any] | None = None
) -> tuple[Any, Any]:
    """Log-probabilities of each next token [B,T-1] (and the entropies of those distributions)."""
    torch = lazy("torch")
    logits = model(input_ids=ids, attention_mask=attn, **(images or {})).logits[:, :-1].float()
    logp = torch.log_softmax(logits, dim=-1)
    chosen = logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    ent = entropy_from_logits(logits) if entropy else None
    return chosen, ent


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
