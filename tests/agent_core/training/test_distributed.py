"""Multi-process SFT under the real torchrun (gloo, 2 CPU processes): the same loss curve as one process,
rank 0 alone reporting and saving, a killed rank ending the run, and the resumed run finishing it.

Tolerance: the two runs do the same arithmetic in a different order (two half-batches padded to their own
widths, sums added across ranks, DDP's gradient all-reduce), so in float32 they differ by rounding only,
about 1e-7 relative per step; a few Adam steps at a small learning rate keep that far below 1e-4, while any
real difference (a share of the batch trained twice or not at all, a loss averaged per rank instead of
per token, ranks drifting apart) moves the loss by percent.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from agent_core.training.checkpoints import STATE_FILE, latest_checkpoint
from agent_core.training.config import ConfigError, validate_config
from agent_core.training.dist_job import ProcessLost, run_distributed
from agent_core.training.distributed import Dist, launch_command
from agent_core.training.runner import run
from agent_core.training.sft import SFTTrainer
from agent_core.training.tiny_policy import build_tiny_policy
from agent_core.training.toy import oracle_examples
from agent_core.training.types import NullHooks, RunSpec
from tests import sweeps

TASKS = ["toy/buttons-2", "toy/buttons-3"]
STEPS = 6
RTOL = 1e-4


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("torch")
    path = tmp_path_factory.mktemp("tiny") / "base"
    return build_tiny_policy(path, hidden_size=32, num_layers=1, num_heads=2, vocab_size=600)


class Recorder(NullHooks):
    def __init__(self) -> None:
        super().__init__(quiet=True)
        self.lines: list[str] = []

    def on_log(self, message: str) -> None:
        self.lines.append(message)


def config(**extra: Any) -> dict[str, Any]:
    # batch 5 over 2 ranks: unequal shares (3 and 2), so the token mean must be the global one.
    cfg = {"batch_size": 5, "lr": 3e-3, "max_steps": STEPS, "checkpoint_every": 3, "device": "cpu"}
    return validate_config("sft", {**cfg, "max_seq_len": 256, **extra})


def losses(hooks: NullHooks, name: str = "train/loss") -> dict[int, float]:
    return {step: m[name] for step, m in hooks.metrics}


def close(a: Mapping[int, float], b: Mapping[int, float]) -> bool:
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) <= RTOL * abs(b[k]) for k in a)


# --- without torchrun ---------------------------------------------------------------------------------


def test_each_rank_takes_its_own_share_of_every_batch() -> None:
    batch = list(range(5))
    shares = [Dist(rank=r, world=2).shard(batch) for r in range(2)]
    assert shares == [[0, 2, 4], [1, 3]]
    assert sorted(x for s in shares for x in s) == batch
    assert Dist().shard(batch) == batch and Dist().all_sum([1, 2]) == [1.0, 2.0] and Dist().agree(True)


def test_launch_command_is_standalone_on_one_machine_and_rendezvous_across_nodes(tmp_path: Path) -> None:
    one = launch_command(processes=2, job_dir=tmp_path / "job", python="py")
    assert one[:3] == ["py", "-m", "torch.distributed.run"]
    assert "--standalone" in one and one[one.index("--max-restarts") + 1] == "0"
    assert one[-3:] == ["-m", "agent_core.training.dist_job", str(tmp_path / "job")]
    many = launch_command(
        processes=8, job_dir=tmp_path / "job", nnodes=2, rdzv_endpoint="h:29400", rdzv_id="r7"
    )
    assert "--standalone" not in many
    for flag, value in [("--nnodes", "2"), ("--rdzv-endpoint", "h:29400"), ("--rdzv-id", "r7"),
                        ("--rdzv-backend", "c10d"), ("--nproc-per-node", "8")]:  # fmt: skip
        assert many[many.index(flag) + 1] == value
    with pytest.raises(ValueError, match="rendezvous"):
        launch_command(processes=2, job_dir=tmp_path, nnodes=2)


def test_processes_is_refused_for_rl_and_above_the_batch_size() -> None:
    for algorithm in ("ppo", "grpo"):
        with pytest.raises(ConfigError) as err:
            validate_config(algorithm, {"processes": 2})
        assert err.value.field == "processes" and "one process" in err.value.message
        assert validate_config(algorithm, {"processes": 1})["processes"] == 1
    with pytest.raises(ConfigError) as err:
        validate_config("sft", {"processes": 4, "batch_size": 2})
    assert err.value.field == "batch_size"
    with pytest.raises(ConfigError) as err:
        validate_config("sft", {"processes": 65})
    assert err.value.field == "processes"
    for wrong in ({"processes": 2, "sharding": "fsdp", "lora": "on"}, {"sharding": "fsdp"}):
        with pytest.raises(ConfigError) as err:
            validate_config("sft", wrong)
        assert err.value.field == "sharding", wrong
    assert validate_config("sft", {"processes": 2, "sharding": "fsdp"})["sharding"] == "fsdp"
    assert validate_config("sft", {})["processes"] == 1


@pytest.mark.parametrize("lora", ["off", "on"])
def test_gradient_checkpointing_recomputes_the_same_steps(base: Path, tmp_path: Path, lora: str) -> None:
    examples = oracle_examples(TASKS, range(4))
    curves = []
    for gc in ("off", "on"):
        hooks = Recorder()
        cfg = config(max_steps=3, gradient_checkpointing=gc, lora=lora, lora_r=8)
        run(RunSpec("sft", cfg, base, tmp_path / f"{lora}-{gc}"), hooks, examples=examples)
        curves.append(losses(hooks))
    assert len(curves[1]) == 3 and close(curves[1], curves[0]), curves
    cfg = config(gradient_checkpointing="on", lora=lora, lora_r=8)
    trainer = SFTTrainer(RunSpec("sft", cfg, base, tmp_path / "check"), Recorder())
    assert trainer.model.is_activation_checkpointing and trainer.forward_model is trainer.model


# --- under torchrun -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_two_processes_give_the_one_process_loss_curve_replicated_or_sharded(
    base: Path, tmp_path: Path
) -> None:
    examples = oracle_examples(TASKS, range(8))
    one = Recorder()
    run(RunSpec("sft", config(), base, tmp_path / "one"), one, examples=examples)
    for sharding, said in (("ddp", "DDP"), ("fsdp", "FSDP2")):
        two = Recorder()
        spec = RunSpec("sft", config(processes=2, sharding=sharding), base, tmp_path / sharding)
        job = tmp_path / sharding / "job"
        result = run_distributed(spec, two, examples=examples, job_dir=job, processes=2)

        assert (result.status, result.step) == ("succeeded", STEPS)
        assert close(losses(two), losses(one)), (sharding, losses(two), losses(one))
        worst = max(abs(losses(two)[k] / losses(one)[k] - 1) for k in losses(one))
        print(f"2 processes ({said}) vs 1: largest relative loss difference {worst:.1e} over {STEPS} steps")
        assert close(losses(two, "train/grad_norm"), losses(one, "train/grad_norm"))
        # Rank 0 alone reported: each step and checkpoint once, and the run says how it ran.
        assert [s for s, _ in two.checkpoints] == [3, 6] == [s for s, _ in one.checkpoints]
        assert any(line.endswith(f"x 2 processes ({said})") for line in two.lines), two.lines
        assert result.checkpoint == latest_checkpoint(tmp_path / sharding) == two.checkpoints[-1][1]
        assert (result.checkpoint / STATE_FILE).is_file()
    # FSDP2's checkpoints are whole models: the same weights as the one-process run's.
    torch = pytest.importorskip("torch")
    from safetensors.torch import load_file

    sharded, whole = (
        load_file(latest_checkpoint(tmp_path / d) / "model.safetensors") for d in ("fsdp", "one")
    )
    assert sharded.keys() == whole.keys()
    assert all(torch.allclose(sharded[k], whole[k], rtol=1e-4, atol=1e-5) for k in whole)
    # Each rank held half of the weights, and its optimizer state saved by name resumes in one process
    # where the unbroken one-process run went.
    assert any("holds 1/2 of the weights" in line for line in two.lines), two.lines
    at_three = tmp_path / "fsdp" / "checkpoints" / "step-000003"
    resumed = Recorder()
    run(RunSpec("sft", config(), base, tmp_path / "fsdp", resume_from=at_three), resumed, examples=examples)
    assert close(losses(resumed), {s: v for s, v in losses(one).items() if s > 3}), losses(resumed)


@pytest.mark.slow
@pytest.mark.sweep
@sweeps.full_only("make test kills a rank through the platform: webapp/training/test_distributed_real.py")
def test_a_killed_rank_ends_the_run_and_the_resumed_run_finishes(base: Path, tmp_path: Path) -> None:
    examples = oracle_examples(TASKS, range(8))
    out, job = tmp_path / "run", tmp_path / "run" / "job"

    many = 24  # room for rank 0 to be mid-run when its peer dies (the first checkpoint is at step 3)
    lora = {"lora": "on", "lora_r": 8, "lr": 1e-2}  # this test trains an adapter; the one above, every weight

    def kill_rank_one_at_the_first_checkpoint() -> None:
        # Watches the disk, not the hooks: the relayed reports lag the ranks by up to a poll, and a
        # tiny run can finish in that time (the kill would then land after the last checkpoint).
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if latest_checkpoint(out) is not None and (job / "rank-1.pid").is_file():
                os.kill(int((job / "rank-1.pid").read_text()), signal.SIGKILL)
                return
            time.sleep(0.01)

    killer = threading.Thread(target=kill_rank_one_at_the_first_checkpoint, daemon=True)
    killer.start()
    killed = Recorder()
    spec = RunSpec("sft", config(processes=2, max_steps=many, **lora), base, out)
    with pytest.raises(ProcessLost, match="a training process died without an error"):
        run_distributed(spec, killed, examples=examples, job_dir=job, processes=2)
    killer.join(timeout=5)
    last = latest_checkpoint(out)
    assert last is not None and 3 <= int(last.name[5:]) < many

    resumed = Recorder()
    again = RunSpec("sft", config(processes=2, max_steps=many, **lora), base, out, resume_from=last)
    result = run_distributed(again, resumed, examples=examples, job_dir=job, processes=2)
    assert (result.status, result.step) == ("succeeded", many)
    at = int(last.name[5:])
    assert [s for s, _ in resumed.metrics] == list(range(at + 1, many + 1))
    assert f"resumed from {last.name} (step {at})" in resumed.lines
    # The resumed steps are the ones an unbroken run takes (same batches, optimizer state restored).
    whole = Recorder()
    run(RunSpec("sft", config(max_steps=many, **lora), base, tmp_path / "whole"), whole, examples=examples)
    assert close(losses(resumed), {s: v for s, v in losses(whole).items() if s > at})


@pytest.mark.slow
def test_a_stop_request_stops_every_rank_at_a_checkpoint(base: Path, tmp_path: Path) -> None:
    class StopAfterTwo(Recorder):
        def should_stop(self) -> bool:
            return len(self.metrics) >= 2

    hooks = StopAfterTwo()
    spec = RunSpec("sft", config(processes=2, max_steps=200, checkpoint_every=100), base, tmp_path / "run")
    examples = oracle_examples(TASKS, range(4))
    result = run_distributed(
        spec, hooks, examples=examples, job_dir=tmp_path / "job", processes=2, poll_s=0.1
    )
    assert result.status == "stopped" and 2 <= result.step < 200
    assert result.checkpoint == latest_checkpoint(tmp_path / "run") and result.checkpoint is not None
    assert result.checkpoint.name == f"step-{result.step:06d}"
    assert any(line.startswith("stop requested: saving step") for line in hooks.lines)


LAUNCHER = """
import sys
from pathlib import Path
from agent_core.training.config import validate_config
from agent_core.training.dist_job import run_distributed
from agent_core.training.toy import oracle_examples
from agent_core.training.types import NullHooks, RunSpec
from tests import sweeps
base, out = Path(sys.argv[1]), Path(sys.argv[2])
cfg = validate_config("sft", {"processes": 2, "batch_size": 2, "max_steps": 100000, "device": "cpu"})
examples = oracle_examples(["toy/buttons-2"], range(4))
run_distributed(RunSpec("sft", cfg, base, out), NullHooks(quiet=True), examples=examples,
                job_dir=out / "job", processes=2)
"""


@pytest.mark.slow
def test_ranks_die_with_the_worker_that_launched_them(base: Path, tmp_path: Path) -> None:
    """A worker killed with SIGKILL leaves no ranks training on (they would race the resumed attempt)."""
    import subprocess
    import sys
    import time

    from tests.procs import wait_for

    job = tmp_path / "out" / "job"
    ranks: list[int] = []
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER, str(base), str(tmp_path / "out")])
    try:
        pid_files = [job / "rank-0.pid", job / "rank-1.pid"]
        assert wait_for(lambda: all(p.is_file() for p in pid_files), timeout=120, interval=0.1)
        time.sleep(0.5)  # the pid files exist before the ranks' own work starts
        ranks = [int(p.read_text()) for p in pid_files]
        launcher.kill()
        launcher.wait()

        def gone(pid: int) -> bool:
            try:
                os.kill(pid, 0)
            except ProcessLookupError:
                return True
            return Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z"  # exited, not yet reaped

        assert wait_for(lambda: all(gone(pid) for pid in ranks), timeout=60, interval=0.2), ranks
    finally:
        if launcher.poll() is None:
            launcher.kill()
        for pid in ranks:  # if the test failed: leave no rank training on this machine
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
