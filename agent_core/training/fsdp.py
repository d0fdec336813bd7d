"""FSDP2 (`sharding: fsdp`): weights, gradients and AdamW moments sharded across a run's processes.

Under DDP each process holds the whole model, its gradients and both AdamW moments, so more processes
lower only the activations. With `sharding: fsdp` (full fine-tuning, `processes` > 1) every decoder
layer and then the whole model is wrapped by `torch.distributed.fsdp.fully_shard`: each rank keeps 1/N
of every parameter (a DTensor), gathers a layer's parameters just before its forward and backward, and
reduce-scatters its gradients, so the persistent memory per rank is about 1/N of DDP's.

The gradient is the one-process gradient, as under DDP: FSDP2 averages the ranks' gradients as DDP does,
and the trainers scale each rank's loss the same way (distributed.py).

Checkpoints stay one Hugging Face model directory, loadable by every tool (vLLM, a one-process resume,
promotion): every rank takes part in gathering the full weights and the full optimizer state
(`full_state`), and rank 0 writes them. The optimizer state is saved keyed by parameter name (the
sharded form knows no parameter order), and `load_optimizer` restores either form into either layout,
so a run may resume with another number of processes or another sharding.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from agent_core.training.errors import TrainingError, lazy

NAMED = "names"
"""`STATE_FILE`'s "optimizer_keys" value when its optimizer state is keyed by parameter name."""


def shard(model: Any) -> Any:
    """`model` with each of its transformer blocks (`_no_split_modules`) and then the whole model under
    FSDP2; the same module object, its parameters now sharded DTensors."""
    fully_shard = lazy("torch.distributed.fsdp").fully_shard
    blocks = set(getattr(model, "_no_split_modules", None) or ())
    for module in model.modules():
        if type(module).__name__ in blocks and module is not model:
            fully_shard(module)
    fully_shard(model)  # the rest: embeddings, final norm, lm_head (tied weights stay one parameter)
    return model


def is_sharded(model: Any) -> bool:
    """Whether `model`'s parameters are FSDP2 shards (DTensors)."""
    dtensor = lazy("torch.distributed.tensor").DTensor
    return any(isinstance(p, dtensor) for p in model.parameters())


def full_state(model: Any, optimizer: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """The full (unsharded) model and optimizer state on CPU, gathered from every rank; a collective:
    every rank calls it, rank 0 gets the states, the others empty dicts."""
    sd = lazy("torch.distributed.checkpoint.state_dict")
    options = sd.StateDictOptions(full_state_dict=True, cpu_offload=True)
    weights = sd.get_model_state_dict(model, options=options)
    # A tied weight (lm_head = embeddings) comes out under both names, as two copies once offloaded:
    # keep the names the model itself saves, so the checkpoint is the one a one-process run writes.
    own = {name for name, _ in model.named_parameters()} | {name for name, _ in model.named_buffers()}
    weights = {name: value for name, value in weights.items() if name in own}
    moments = sd.get_optimizer_state_dict(model, optimizer, options=options)
    return weights, moments


def trainable_names(model: Any) -> list[str]:
    """The names of the parameters an optimizer over `trainable_parameters(model)` updates, in its order."""
    return [name for name, p in model.named_parameters() if p.requires_grad]


def to_named(state: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
    """A torch optimizer state dict (parameters numbered in optimizer order) keyed by parameter name."""
    return {
        "state": {names[i]: v for i, v in state["state"].items()},
        "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in state["param_groups"]],
    }


def to_numbered(state: Mapping[str, Any], names: list[str]) -> dict[str, Any]:
    """A name-keyed optimizer state dict (`to_named`, FSDP2's full form) numbered in optimizer order."""
    index = {name: i for i, name in enumerate(names)}
    unknown = [k for k in state["state"] if k not in index]
    if unknown:
        raise TrainingError(f"cannot resume: the checkpoint's optimizer state names parameters this "
                            f"model lacks ({', '.join(sorted(unknown)[:3])})")  # fmt: skip
    return {
        "state": {index[k]: v for k, v in state["state"].items()},
        "param_groups": [{**g, "params": [index[k] for k in g["params"]]} for g in state["param_groups"]],
    }


def load_optimizer(model: Any, optimizer: Any, saved: Mapping[str, Any], keys: str | None) -> None:
    """Restore a checkpoint's optimizer state (numbered, or by name when `keys` is NAMED) into
    `optimizer` over `model`, sharded or not."""
    names = trainable_names(model)
    if is_sharded(model):
        sd = lazy("torch.distributed.checkpoint.state_dict")
        named = dict(saved) if keys == NAMED else to_named(saved, names)
        options = sd.StateDictOptions(full_state_dict=True)
        sd.set_optimizer_state_dict(model, optimizer, optim_state_dict=named, options=options)
        return
    optimizer.load_state_dict(to_numbered(saved, names) if keys == NAMED else saved)
