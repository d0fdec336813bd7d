"""The machinery every trainer shares: load the starting model (or resume a checkpoint), the optimizer,
gradient clipping, samples and their images, and atomic checkpoints.

SFTTrainer (sft.py) and RLTrainer (rl_trainer.py) subclass `Trainer` and write their own `run`.
With `lora: on` the model trains a LoRA adapter (lora.py) and every checkpoint is that adapter, named
against the absolute path of its base model directory; resuming one restores the adapter and optimizer.
"""

from __future__ import annotations

import json
import shutil
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_core.training.batching import Sample, fit_prompt
from agent_core.training.checkpoints import (
    STATE_FILE,
    AdapterError,
    adapter_base,
    checkpoint_dir,
    install,
    prune,
)
from agent_core.training.distributed import current as current_dist
from agent_core.training.distributed import prepare_model
from agent_core.training.errors import TrainingError, lazy
from agent_core.training.fsdp import NAMED, full_state, is_sharded, load_optimizer
from agent_core.training.lora import LoraSettings, describe, save_adapter, trainable_parameters
from agent_core.training.model_io import load_policy_model, pick_device
from agent_core.training.rng import rng_state, set_rng_state
from agent_core.training.tiny_policy import LINEAGE_FILE
from agent_core.training.types import Hooks, RunSpec


class Trainer:
    """A run's model, optimizer and step, loaded from its base model or resumed from a checkpoint."""

    def __init__(self, spec: RunSpec, hooks: Hooks) -> None:
        self.spec = spec
        self.cfg = dict(spec.config)
        self.hooks = hooks
        self.torch = lazy("torch")
        self.dist = current_dist()  # one process, or this rank of a torchrun run (distributed.py)
        self.device = self.dist.device(pick_device(str(self.cfg.get("device", "auto"))))
        self.step = 0
        self.out_dir = Path(spec.out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        start = Path(spec.resume_from) if spec.resume_from else Path(spec.base_model)
        if spec.resume_from and not (start / STATE_FILE).is_file():
            raise TrainingError(f"cannot resume: {start} is not a complete checkpoint (no {STATE_FILE})")
        self.start_dir = start
        self.lora = LoraSettings.of(self.cfg)
        self.torch.manual_seed(int(self.cfg["seed"]))  # a fresh adapter's initial weights too
        self.codec, self.model = load_policy_model(
            start, device=self.device, dtype=self.cfg["dtype"], lora=self.lora
        )
        self.lora_base = self._lora_base(start)
        self.forward_model = prepare_model(self.model, self.cfg, self.dist, self.device)
        self.sharded = is_sharded(self.model)
        self.sharding = "FSDP2" if self.sharded else "DDP"  # how the processes hold the model (several)
        if self.sharded:
            local = sum(p.to_local().numel() for p in self.model.parameters())
            total = sum(p.numel() for p in self.model.parameters())
            self.hooks.on_log(f"FSDP2: each process holds 1/{self.dist.world} of the weights "
                              f"(rank {self.dist.rank}: {local:,} of {total:,} values)")  # fmt: skip
        self.tokenizer = self.codec.tokenizer
        self.too_long = 0  # samples skipped for max_seq_len (VLM ones always, RL turns: never cut)
        self.torch.manual_seed(int(self.cfg["seed"]))
        self.params = trainable_parameters(self.model)
        self.optimizer = self.torch.optim.AdamW(
            self.params, lr=float(self.cfg["lr"]), weight_decay=float(self.cfg["weight_decay"])
        )
        self.lineage = self._lineage(start)
        self.state: dict[str, Any] = {}
        if spec.resume_from:
            self.state = self.torch.load(start / STATE_FILE, map_location=self.device, weights_only=False)
            load_optimizer(
                self.model, self.optimizer, self.state["optimizer"], self.state.get("optimizer_keys")
            )
            self.step = int(self.state["step"])
            set_rng_state(self.state.get("rng"))  # the random streams go on where the checkpoint left them
            self.hooks.on_log(f"resumed from {start.name} (step {self.step})")

    def _lora_base(self, start: Path) -> Path | None:
        """The base model directory a LoRA run's adapters are saved against (None: full fine-tuning)."""
        if self.lora is None:
            return None
        try:
            base = adapter_base(start)
        except AdapterError as exc:
            raise TrainingError(str(exc)) from None
        config = self.model.peft_config["default"]
        shape = (config.r, config.lora_alpha, {str(t).rsplit(".", 1)[-1] for t in config.target_modules})
        if base is not None and shape != (self.lora.r, self.lora.alpha, set(self.lora.targets)):
            # A new adapter on top would need the merged weights as its base, which vLLM does not have.
            self.hooks.on_log(
                f"{start} is a LoRA adapter: training it on, with its own shape, not this run's "
                f"lora_r / lora_alpha / lora_targets"
            )
        self.hooks.on_log(describe(self.model))
        return base if base is not None else start.resolve()

    @staticmethod
    def _lineage(start: Path) -> dict[str, Any]:
        try:
            data = json.loads((start / LINEAGE_FILE).read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _clip(self, params: Iterable[Any]) -> float:
        """Clip the gradient norm to grad_clip (0: measure it only); the norm before clipping."""
        limit = float(self.cfg["grad_clip"])
        params = [p for p in params if p.grad is not None]
        if not params:
            return 0.0
        # An infinite bound clips nothing. Under FSDP2 the norm is a DTensor over every rank's shards.
        norm = self.torch.nn.utils.clip_grad_norm_(params, limit if limit > 0 else float("inf"))
        return float(norm.full_tensor() if hasattr(norm, "full_tensor") else norm)

    def save(self, extra: Mapping[str, Any], metrics: Mapping[str, float]) -> Path:
        """A checkpoint at the current step (atomic: a temporary directory renamed into place)."""
        final = checkpoint_dir(self.out_dir, self.step)
        weights: dict[str, Any] | None = None
        if self.sharded:  # every rank takes part in gathering the full weights and moments
            weights, moments = full_state(self.model, self.optimizer)
        if not self.dist.is_main:  # rank 0 alone writes (every rank holds the same weights and state)
            self.dist.barrier()
            return final
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        if self.lora_base is not None:
            save_adapter(self.model, tmp, self.lora_base)
        else:
            self.model.save_pretrained(str(tmp), **({"state_dict": weights} if weights is not None else {}))
        self.codec.save(tmp)
        lineage = {
            **{k: v for k, v in self.lineage.items() if k in ("base", "seed", "built_by")},
            "algorithm": self.spec.algorithm,
            "step": self.step,
            "parent": str(self.start_dir),
        }
        (tmp / LINEAGE_FILE).write_text(json.dumps(lineage, indent=2))
        state = {"step": self.step, "rng": rng_state(), **extra}
        if weights is not None:  # FSDP2's full optimizer state is keyed by parameter name
            state |= {"optimizer": moments, "optimizer_keys": NAMED}
        else:
            state["optimizer"] = self.optimizer.state_dict()
        self.torch.save(state, tmp / STATE_FILE)
        install(tmp, final)  # a checkpoint of this step saved before is replaced, its KEEP markers kept
        pruned = prune(self.out_dir, int(self.cfg.get("keep_checkpoints", 0)))
        if pruned:
            self.hooks.on_log(f"keep_checkpoints: deleted {', '.join(p.name for p in pruned)}")
        self.hooks.on_checkpoint(self.step, final, dict(metrics))
        self.dist.barrier()  # the other ranks go on once the checkpoint is complete
        return final

    def _sample(
        self, messages: Sequence[Mapping[str, Any]], a11y: str | None, response: list[int]
    ) -> Sample | None:
        """A sample of the prompt and `response`; None (counted in `too_long`) where they do not fit in
        max_seq_len. Only SFT cuts to fit (its response to max_seq_len - 1, a text prompt from its
        start): it has no sampler whose prompt a cut would contradict. An RL turn trains on exactly the
        tokens its policy read and sampled, or not at all; a vision-language prompt is never cut (its
        images would be)."""
        max_len = int(self.cfg["max_seq_len"])
        cut = self.spec.algorithm == "sft"
        resp = response[: max_len - 1] if cut else list(response)
        prompt = self.codec.prompt_ids(messages, a11y)
        if cut and not self.codec.vision:
            return Sample(fit_prompt(prompt, resp, max_len), resp)
        if len(prompt) + len(resp) > max_len:
            self.too_long += 1
            return None
        return Sample(prompt, resp, messages=messages if self.codec.vision else ())

    def _images(self, samples: Sequence[Sample]) -> dict[str, Any]:
        """The minibatch's image tensors, concatenated in sample order (the order of their image tokens
        in the batch), in the model's dtype, on its device; empty for a text-only model."""
        if not self.codec.vision:
            return {}
        parts: dict[str, list[Any]] = defaultdict(list)
        for s in samples:
            for key, value in self.codec.images(s.messages).items():
                parts[key].append(value)
        dtype = next(self.model.parameters()).dtype
        out: dict[str, Any] = {}
        for key, values in parts.items():
            value = self.torch.cat(values, dim=0).to(self.device)
            out[key] = value.to(dtype) if value.is_floating_point() else value
        return out
