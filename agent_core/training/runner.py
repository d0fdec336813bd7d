"""Training runs: SFT, multi-turn PPO (the UI-TARS-2 recipe) and step-level GRPO with DART's curation.

`run(spec, hooks, examples=..., source=...)` is the one entry point: the webapp's Celery task calls it,
and so do the demonstration and benchmark scripts. The same code trains a tiny model on a CPU and a
real one on a GPU (`device: auto`), a text-only causal LM or a vision-language model alike: a checkpoint
with a processor (LLaVA, Qwen2-VL and the like, as `LocalPolicy` loads them) is trained on the screenshots
its prompts carry, encoded by the same `vision_encoding` call the policy makes. Its image tensors are
rebuilt for each minibatch from the prompt's messages rather than kept for the whole run, and a prompt
too long for `max_seq_len` is skipped (and counted) rather than cut, since cutting it would cut an image.

Checkpoints are save_pretrained directories under `out_dir/checkpoints/step-NNNNNN/` that
`LocalPolicy` loads directly (with `lora: on`, peft adapters of the base, which vLLM hot-loads too),
plus `trainer_state.pt` (optimizer, critic, curation state, data
position, RNG), written to a temporary directory and renamed, so a worker killed mid-save leaves the
previous checkpoint intact and `latest_checkpoint` never returns a half-written one.

Where the parts live: model_io (codec, loading, ids, critic), batching (samples as tensors), trainer
(the shared machinery), sft, rl_trainer (the streaming RL loop) with its algorithms ppo and grpo,
lora (adapters), checkpoints (the directory layout, adapter_base), adapter_merge (interpolating
adapters) and errors (TrainingError). torch and transformers are imported
on first use only.
"""

from __future__ import annotations

import traceback
from collections.abc import Iterable

from agent_core.training.errors import TrainingError
from agent_core.training.rl_trainer import ALGORITHMS, RLTrainer
from agent_core.training.sft import SFTTrainer
from agent_core.training.types import Hooks, RolloutSource, RunResult, RunSpec, SFTExample


def run(
    spec: RunSpec,
    hooks: Hooks,
    *,
    examples: Iterable[SFTExample] | None = None,
    source: RolloutSource | None = None,
) -> RunResult:
    """Train as `spec` says; returns when done or stopped. TrainingError for what the user must fix."""
    if spec.algorithm == "sft":
        return SFTTrainer(spec, hooks).run(examples)
    if spec.algorithm in ALGORITHMS:
        return RLTrainer(spec, hooks).run(source)
    raise TrainingError(f"unknown algorithm {spec.algorithm!r}")


def format_exception(exc: BaseException) -> str:
    """A traceback as text, for a run's log."""
    return "".join(traceback.format_exception(exc))
