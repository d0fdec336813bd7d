"""Supervised fine-tuning: cross-entropy on the assistant's tokens only, token-mean over a batch.

`SFTTrainer(spec, hooks).run(examples)` is what runner.run calls for algorithm "sft"; examples whose
Thought is a placeholder (like "oracle step 3") teach their action only.
"""

from __future__ import annotations

import math
import random
import re
import time
from collections.abc import Callable, Iterable
from dataclasses import replace

from agent_core.thoughts import is_placeholder_thought
from agent_core.training.batching import Sample, pad_batch, token_logprobs
from agent_core.training.checkpoints import latest_checkpoint
from agent_core.training.errors import TrainingError
from agent_core.training.model_io import response_ids
from agent_core.training.trainer import Trainer
from agent_core.training.types import RunResult, SFTExample


class SFTTrainer(Trainer):
    """Supervised fine-tuning: cross-entropy on the assistant's tokens only, token-mean over a batch."""

    def encode(self, examples: Iterable[SFTExample]) -> list[Sample]:
        out: list[Sample] = []
        placeholders = 0
        for ex in examples:
            if ex.placeholder_thought or _teaches_placeholder(ex.response):
                placeholders += 1
                ex = _without_placeholder(ex)
            sample = self._sample(ex.messages, ex.a11y, response_ids(self.tokenizer, ex.response))
            if sample is not None:
                out.append(sample)
        if placeholders:
            self.hooks.on_log(
                f"{placeholders} example(s) recorded a placeholder thought (like 'oracle step 3'): "
                "they teach their action only, never the placeholder"
            )
        if self.too_long:
            self.hooks.on_log(
                f"{self.too_long} example(s) longer than max_seq_len ({self.cfg['max_seq_len']} tokens) "
                "skipped: a vision-language prompt cannot be cut without cutting its images"
            )
        return out

    def run(self, examples: Iterable[SFTExample] | None) -> RunResult:
        if examples is None:
            raise TrainingError("an SFT run needs a dataset version to train on")
        t0 = time.monotonic()
        data = self.encode(examples)
        if not data and self.too_long:
            raise TrainingError(
                f"max_seq_len: every example is longer than {self.cfg['max_seq_len']} tokens "
                "(a vision-language prompt is never cut); raise it"
            )
        if not data:
            raise TrainingError("the dataset version has no usable examples (no valid steps to learn)")
        n = len(data)
        bs = int(self.cfg["batch_size"])
        total = int(self.cfg["max_steps"]) or max(1, math.ceil(float(self.cfg["epochs"]) * n / bs))
        tokens = sum(len(s.prompt) + len(s.response) for s in data)
        self.hooks.on_log(
            f"SFT on {n} examples ({tokens} tokens, {sum(len(s.response) for s in data)} target tokens; "
            f"encoded in {time.monotonic() - t0:.1f} s): {total} steps of {bs} on {self.device}"
            + (f" x {self.dist.world} processes ({self.sharding})" if self.dist.active else "")
        )
        index = _shuffled(n, int(self.cfg["seed"]))
        warmup = int(self.cfg["warmup_steps"])
        base_lr = float(self.cfg["lr"])
        metrics: dict[str, float] = {}
        self.model.train()
        while self.step < total:
            if self.dist.agree(self.hooks.should_stop()):  # every rank stops at rank 0's word
                self.hooks.on_log(f"stop requested: saving step {self.step}")
                path = self.save({}, metrics)
                return RunResult("stopped", self.step, path, metrics)
            started = time.monotonic()
            batch = [data[index(self.step * bs + k)] for k in range(bs)]
            lr = base_lr * min(1.0, (self.step + 1) / warmup) if warmup else base_lr
            loss, grad_norm, n_tok = self._train_step(self.dist.shard(batch), lr)
            self.step += 1
            elapsed = time.monotonic() - started
            metrics = {
                "train/loss": loss,
                "train/lr": lr,
                "train/grad_norm": grad_norm,
                "train/tokens_per_s": n_tok / max(elapsed, 1e-9),
                "train/step_time_s": elapsed,
                "train/epoch": self.step * bs / n,
            }
            self.hooks.on_metrics(self.step, metrics)
            if self.step % 10 == 0 or self.step == total:
                self.hooks.on_log(
                    f"step {self.step}/{total} loss {metrics['train/loss']:.4f} "
                    f"({metrics['train/tokens_per_s']:.0f} tokens/s)"
                )
            if self.step % int(self.cfg["checkpoint_every"]) == 0 or self.step == total:
                self.save({}, metrics)
        last = latest_checkpoint(self.out_dir)
        return RunResult("succeeded", self.step, last, metrics)

    def _train_step(self, batch: list[Sample], lr: float) -> tuple[float, float, int]:
        """One optimizer step on `batch` (this rank's share of the global batch) at learning rate `lr`:
        (loss, gradient norm, tokens) of the global batch."""
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        ids, attn, mask, _ = pad_batch(batch, int(self.tokenizer.pad_token_id), self.device)
        logp, _ = token_logprobs(self.forward_model, ids, attn, mask=mask, images=self._images(batch))
        logp_sum = (logp * mask).sum()
        # The token mean is over the global batch: this share's sum over every rank's target tokens.
        # DDP averages gradients over the ranks, so the world size cancels that mean's 1/world.
        targets, total, tokens = self.dist.all_sum(
            [float(mask.sum()), float(logp_sum.detach()), float(attn.sum())]
        )
        loss = -logp_sum * self.dist.world / max(targets, 1.0)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = self._clip(self.params)
        self.optimizer.step()
        return -total / max(targets, 1.0), grad_norm, int(tokens)


def _shuffled(n: int, seed: int) -> Callable[[int], int]:
    """The data index of global position g: each epoch a fresh permutation of the n examples, seeded
    by (seed, epoch) so a resumed run sees the same order."""
    perms: dict[int, list[int]] = {}

    def index(g: int) -> int:
        epoch, offset = divmod(g, n)
        if epoch not in perms:
            perm = list(range(n))
            random.Random(seed * 1_000_003 + epoch).shuffle(perm)  # noqa: S311 - data order
            perms.clear()
            perms[epoch] = perm
        return perms[epoch][offset]

    return index


def _teaches_placeholder(response: str) -> bool:
    """Whether a response's Thought section is a placeholder (a source that did not mask it)."""
    m = _THOUGHT.match(response)
    return m is not None and is_placeholder_thought(m.group(1))


def _without_placeholder(ex: SFTExample) -> SFTExample:
    """The example with a placeholder Thought section taken out of its target."""
    m = _THOUGHT.match(ex.response)
    if m is None or not is_placeholder_thought(m.group(1)):
        return ex
    return replace(ex, response=ex.response[m.end() :], placeholder_thought=True)


_THOUGHT = re.compile(r"\s*Thought:[ \t]*(.*?)\s*\n(?=\s*(?:Action_Summary|Action):)", re.S)
