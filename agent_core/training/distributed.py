"""Multi-process training: torchrun's process group, each rank's share of a batch, and the launch command.

A run with `processes: N` (SFT, full fine-tuning or LoRA) is launched by the training worker as

    python -m torch.distributed.run --standalone --nproc-per-node N --max-restarts 0 \\
        -m agent_core.training.dist_job JOB_DIR

(`launch_command`; dist_job.py runs one rank and relays rank 0's reports). Each rank trains a DDP
replica: gloo on CPU, nccl on CUDA with one GPU per rank (`cuda:LOCAL_RANK`), bf16 weights with
`dtype: bfloat16` and activation recomputation with `gradient_checkpointing: on`. Every step the global
batch the one-process run would take (same seed, same order) is cut into N deterministic shares
(`Dist.shard`); a rank's loss is its share's token sum over the *global* token count, times N, so
DDP's gradient average is exactly the one-process gradient and the loss curve is the one-process curve,
up to the order of float summation.

Rank 0 alone writes checkpoints and reports metrics, log lines and checkpoints (the other ranks' hooks
are no-ops); every rank follows rank 0's stop decision (`Dist.agree`). torchrun runs with
`--max-restarts 0`: a rank that dies (killed, out of memory) makes torchrun end the others and exit
non-zero, the worker gives the attempt back to the queue, and the next attempt resumes from the last
checkpoint.

Multi-node is the same launch on every node with a rendezvous address in place of `--standalone`:

    python -m torch.distributed.run --nnodes 2 --nproc-per-node 8 --max-restarts 0 \\
        --rdzv-backend c10d --rdzv-endpoint HOST:29400 --rdzv-id run-42 \\
        -m agent_core.training.dist_job /shared/var/training/run-42/torchrun/attempt-1

(`launch_command(processes=8, job_dir=..., nnodes=2, rdzv_endpoint="HOST:29400", rdzv_id="run-42")`).
The run directory must be on storage every node mounts at the same path (checkpoints, the job folder):
rank 0 may land on any node, and it reports through that folder.

With `sharding: fsdp` the ranks shard the model instead of replicating it (FSDP2, fsdp.py): full
fine-tuning of a model whose weights, gradients and AdamW moments one device cannot hold.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, TypeVar

from agent_core.training.errors import TrainingError, lazy

T = TypeVar("T")

ENTRY_MODULE = "agent_core.training.dist_job"
TIMEOUT = timedelta(minutes=30)
"""How long a collective waits for a silent rank (torchrun ends a run whose rank died well before)."""


@dataclass(frozen=True)
class Dist:
    """This process's place in the run: rank of world, the GPU it drives, where collectives happen."""

    rank: int = 0
    world: int = 1
    local_rank: int = 0
    comm_device: str = "cpu"
    """Where collective tensors live: cpu for gloo, this rank's GPU for nccl."""

    @property
    def active(self) -> bool:
        return self.world > 1

    @property
    def is_main(self) -> bool:
        """Whether this rank writes checkpoints and reports (rank 0)."""
        return self.rank == 0

    def device(self, device: str) -> str:
        """The torch device this rank trains on: its own GPU (cuda:LOCAL_RANK) under torchrun."""
        return f"cuda:{self.local_rank}" if self.active and device == "cuda" else device

    def shard(self, batch: Sequence[T]) -> list[T]:
        """This rank's share of a global batch: every world-th sample from position rank."""
        return list(batch[self.rank :: self.world])

    def all_sum(self, values: Sequence[float]) -> list[float]:
        """`values` summed over every rank (as float64), the same on each rank."""
        if not self.active:
            return [float(v) for v in values]
        torch = lazy("torch")
        t = torch.tensor([float(v) for v in values], dtype=torch.float64, device=self.comm_device)
        torch.distributed.all_reduce(t)
        return [float(v) for v in t.tolist()]

    def agree(self, flag: bool) -> bool:
        """Rank 0's `flag` on every rank (a stop decision all ranks must take at the same step)."""
        if not self.active:
            return flag
        torch = lazy("torch")
        t = torch.tensor([1.0 if flag else 0.0], device=self.comm_device)
        torch.distributed.broadcast(t, src=0)
        return bool(t.item())

    def barrier(self) -> None:
        if self.active:
            lazy("torch").distributed.barrier()


def current() -> Dist:
    """This process's Dist: from the process group torchrun's rank set up (`setup`), else one process."""
    torch = lazy("torch")
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return Dist()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    nccl = torch.distributed.get_backend() == "nccl"
    return Dist(
        rank=torch.distributed.get_rank(),
        world=torch.distributed.get_world_size(),
        local_rank=local,
        comm_device=f"cuda:{local}" if nccl else "cpu",
    )


def setup(device: str, env: Mapping[str, str] | None = None) -> Dist:
    """Join the process group torchrun's environment describes (RANK, WORLD_SIZE, LOCAL_RANK,
    MASTER_ADDR, MASTER_PORT): nccl when training on CUDA, gloo on CPU. One process: nothing to join."""
    env = os.environ if env is None else env
    if int(env.get("WORLD_SIZE", "1")) <= 1:
        return Dist()
    torch = lazy("torch")
    if device.startswith("cuda"):
        local = int(env.get("LOCAL_RANK", "0"))
        if local >= torch.cuda.device_count():
            raise TrainingError(
                f"processes: rank {env.get('RANK')} needs GPU {local} but this machine has "
                f"{torch.cuda.device_count()}; run at most one process per GPU"
            )
        torch.cuda.set_device(local)
    backend = "nccl" if device.startswith("cuda") else "gloo"
    torch.distributed.init_process_group(backend=backend, timeout=TIMEOUT)
    return current()


def teardown() -> None:
    """Leave the process group (if this process joined one)."""
    torch = lazy("torch")
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.destroy_process_group()


def prepare_model(model: Any, cfg: Mapping[str, Any], dist: Dist, device: str) -> Any:
    """Gradient checkpointing as the config asks, then the module a step runs forward through: the
    model itself in one process, its DDP wrapper under torchrun (saving and the optimizer keep using
    the bare model, whose parameters the wrapper shares), or the model sharded in place by FSDP2
    (`sharding: fsdp`; the optimizer must be built after this, over the sharded parameters)."""
    if cfg.get("gradient_checkpointing") == "on":
        # Non-reentrant: works with frozen inputs (LoRA) and with DDP's gradient hooks.
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):  # transformers 5 renamed it
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        # model.config.use_cache stays as it is: it would be saved into every checkpoint's config.json,
        # and transformers turns the cache off by itself in a training forward with checkpointing.
    if not dist.active:
        return model
    if cfg.get("sharding") == "fsdp":  # FSDP2: the module itself, its parameters sharded in place
        from agent_core.training.fsdp import shard

        return shard(model)
    ddp = lazy("torch.nn.parallel").DistributedDataParallel
    ids = [int(device.split(":", 1)[1])] if device.startswith("cuda:") else None
    return ddp(model, device_ids=ids)


def launch_command(
    *,
    processes: int,
    job_dir: str | Path,
    nnodes: int = 1,
    rdzv_endpoint: str | None = None,
    rdzv_id: str | None = None,
    python: str = sys.executable,
) -> list[str]:
    """The torchrun command line of one node of a run: standalone on one machine, or joining the
    rendezvous at `rdzv_endpoint` (HOST:PORT) with `nnodes` nodes. No restarts: a dead rank ends the run."""
    if processes < 1:
        raise ValueError(f"processes must be at least 1, got {processes}")
    cmd = [python, "-m", "torch.distributed.run", "--nproc-per-node", str(processes), "--max-restarts", "0"]
    if rdzv_endpoint:
        rid = rdzv_id or Path(job_dir).name
        cmd += ["--nnodes", str(nnodes), "--rdzv-backend", "c10d", "--rdzv-endpoint", rdzv_endpoint]
        cmd += ["--rdzv-id", rid]
    elif nnodes != 1:
        raise ValueError(f"{nnodes} nodes need a rendezvous endpoint (HOST:PORT)")
    else:
        cmd.append("--standalone")
    return [*cmd, "-m", ENTRY_MODULE, str(job_dir)]
