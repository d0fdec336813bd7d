"""A multi-process run: the job folder, one rank under torchrun, and the launcher that relays rank 0.

`run_distributed(spec, hooks, examples=..., job_dir=..., processes=N)` stands in for `runner.run` when a
run has `processes` > 1 (the training worker calls it). It writes the job folder (spec.json, the SFT
examples as examples.jsonl), starts torchrun (distributed.launch_command) and, until torchrun exits,
relays what rank 0 appends to events.jsonl to `hooks` (metrics, checkpoints, log lines, then the
result or the error); a stop the hooks ask for becomes a `stop` file that rank 0 reads and every rank
follows. The hooks (the worker's database writes) stay in the worker's process: files rather than a
pipe because they work the same when rank 0 runs on another node (the run directory is on shared
storage then) and leave a record of the attempt (torchrun.log beside them).

How it ends: the result event -> RunResult; a TrainingError on a rank -> TrainingError (the user must
fix something); another exception on a rank -> RankFailed; a rank that died without a word (killed,
out of memory) -> ProcessLost, which the worker treats like its own death: the attempt goes back to the
queue and the next one resumes from the last checkpoint. torchrun dies with the process that started
it (PR_SET_PDEATHSIG), so a killed worker leaves no ranks training behind it.

`python -m agent_core.training.dist_job JOB_DIR` is one rank (what torchrun starts N times).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import traceback
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import agent_core
from agent_core.training.distributed import launch_command, setup, teardown
from agent_core.training.errors import TrainingError
from agent_core.training.types import Hooks, NullHooks, RunResult, RunSpec, SFTExample

SPEC, EXAMPLES, EVENTS, STOP, LOG = "spec.json", "examples.jsonl", "events.jsonl", "stop", "torchrun.log"
PEER = "peer-lost"


class RankFailed(RuntimeError):
    """A rank raised an exception other than a TrainingError (a bug, an out-of-memory error)."""


class ProcessLost(RuntimeError):
    """A rank died without reporting (killed by a signal): the attempt is lost, the run may resume."""


# --- the job folder --------------------------------------------------------------------------------


def write_job(job_dir: Path, spec: RunSpec, examples: Iterable[SFTExample] | None) -> None:
    """A fresh job folder: the spec and the examples every rank reads."""
    job_dir.mkdir(parents=True, exist_ok=True)
    for name in (EVENTS, STOP):
        (job_dir / name).unlink(missing_ok=True)
    for pid_file in job_dir.glob("rank-*.pid"):
        pid_file.unlink()
    spec_json = {
        "algorithm": spec.algorithm,
        "config": dict(spec.config),
        "base_model": str(spec.base_model),
        "out_dir": str(spec.out_dir),
        "resume_from": str(spec.resume_from) if spec.resume_from else None,
    }
    (job_dir / SPEC).write_text(json.dumps(spec_json, indent=2))
    if examples is None:
        return
    with (job_dir / EXAMPLES).open("w", encoding="utf-8") as f:
        for ex in examples:
            row = {
                "messages": [dict(m) for m in ex.messages],
                "response": ex.response,
                "a11y": ex.a11y,
                "source": ex.source,
                "placeholder_thought": ex.placeholder_thought,
            }
            f.write(json.dumps(row) + "\n")


def read_spec(job_dir: Path) -> RunSpec:
    data = json.loads((job_dir / SPEC).read_text())
    resume = data.get("resume_from")
    return RunSpec(
        algorithm=data["algorithm"],
        config=data["config"],
        base_model=Path(data["base_model"]),
        out_dir=Path(data["out_dir"]),
        resume_from=Path(resume) if resume else None,
    )


def read_examples(job_dir: Path) -> list[SFTExample] | None:
    path = job_dir / EXAMPLES
    if not path.is_file():
        return None
    with path.open(encoding="utf-8") as f:
        return [SFTExample(**json.loads(line)) for line in f if line.strip()]


def _append(job_dir: Path, event: Mapping[str, Any]) -> None:
    # One write() on an O_APPEND descriptor: lines from several ranks never interleave.
    fd = os.open(job_dir / EVENTS, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (json.dumps(event) + "\n").encode())
    finally:
        os.close(fd)


class FileHooks:
    """Rank 0's hooks: each report one line of events.jsonl; a stop is asked for by the `stop` file."""

    def __init__(self, job_dir: Path) -> None:
        self.job_dir = job_dir

    def on_metrics(self, step: int, metrics: Mapping[str, float]) -> None:
        _append(self.job_dir, {"kind": "metrics", "step": step, "metrics": dict(metrics)})

    def on_checkpoint(self, step: int, path: Path, metrics: Mapping[str, float]) -> None:
        event = {"kind": "checkpoint", "step": step, "path": str(path), "metrics": dict(metrics)}
        _append(self.job_dir, event)

    def on_log(self, message: str) -> None:
        _append(self.job_dir, {"kind": "log", "message": str(message)})

    def should_stop(self) -> bool:
        return (self.job_dir / STOP).exists()


# --- one rank ---------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """One rank of the job in argv[0]: join the group, train, report (rank 0), leave the group."""
    from agent_core.training import runner
    from agent_core.training.model_io import pick_device

    job_dir = Path((argv if argv is not None else sys.argv[1:])[0])
    rank = int(os.environ.get("RANK", "0"))
    (job_dir / f"rank-{rank}.pid").write_text(str(os.getpid()))
    hooks: Hooks = FileHooks(job_dir) if rank == 0 else NullHooks(quiet=True)
    try:
        spec = read_spec(job_dir)
        dist = setup(pick_device(str(spec.config.get("device", "auto"))))
        result = runner.run(spec, hooks, examples=read_examples(job_dir))
        if dist.is_main:
            checkpoint = str(result.checkpoint) if result.checkpoint else None
            event = {"kind": "result", "status": result.status, "step": result.step}
            _append(job_dir, {**event, "checkpoint": checkpoint, "metrics": result.metrics})
    except Exception as exc:
        text = "".join(traceback.format_exception(exc))
        kind = "training" if isinstance(exc, TrainingError) else type(exc).__name__
        kind = PEER if _peer_lost(exc) else kind
        _append(job_dir, {"kind": "error", "rank": rank, "error": kind, "message": str(exc), "trace": text})
        raise
    finally:
        teardown()
    return 0


def _peer_lost(exc: BaseException) -> bool:
    """Whether `exc` is a collective failing because another rank is gone (not this rank's own fault)."""
    import torch.distributed as dist

    text = str(exc)
    return isinstance(exc, dist.DistError) or any(mark in text for mark in _PEER_MARKS)


# gloo reports a dead peer as a plain RuntimeError from its TCP transport.
_PEER_MARKS = ("gloo/transport", "Connection reset by peer", "Connection closed by peer")


# --- the launcher -------------------------------------------------------------------------------------


class _Relay:
    """Reads the complete lines rank 0 (and a failing rank) appended since the last read."""

    def __init__(self, job_dir: Path, hooks: Hooks) -> None:
        self.path = job_dir / EVENTS
        self.hooks = hooks
        self.offset = 0
        self.result: dict[str, Any] | None = None
        self.errors: list[dict[str, Any]] = []

    def pump(self) -> None:
        if not self.path.is_file():
            return
        with self.path.open("rb") as f:
            f.seek(self.offset)
            chunk = f.read()
        end = chunk.rfind(b"\n") + 1
        self.offset += end
        for line in chunk[:end].splitlines():
            self._one(json.loads(line))

    def _one(self, event: dict[str, Any]) -> None:
        kind = event["kind"]
        if kind == "metrics":
            self.hooks.on_metrics(int(event["step"]), event["metrics"])
        elif kind == "checkpoint":
            self.hooks.on_checkpoint(int(event["step"]), Path(event["path"]), event["metrics"])
        elif kind == "log":
            self.hooks.on_log(event["message"])
        elif kind == "result":
            self.result = event
        elif kind == "error":
            self.errors.append(event)


def _die_with_parent() -> None:  # pragma: no cover - runs in the child between fork and exec
    import ctypes

    pr_set_pdeathsig = 1
    ctypes.CDLL(None, use_errno=True).prctl(pr_set_pdeathsig, signal.SIGTERM)


def _stop(proc: subprocess.Popen[bytes], grace_s: float = 20.0) -> None:
    """End torchrun and its ranks: SIGTERM to its process group, SIGKILL after `grace_s`."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def _tail(path: Path, lines: int = 15) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def run_distributed(
    spec: RunSpec,
    hooks: Hooks,
    *,
    examples: Iterable[SFTExample] | None,
    job_dir: Path,
    processes: int,
    poll_s: float = 0.5,
) -> RunResult:
    """Train `spec` with `processes` ranks under torchrun on this machine, reporting through `hooks`."""
    if spec.algorithm != "sft":
        raise TrainingError(f"processes: {spec.algorithm} trains in one process for now")
    started = time.monotonic()
    write_job(job_dir, spec, examples)
    env = dict(os.environ)
    root = str(Path(agent_core.__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    cmd = launch_command(processes=processes, job_dir=job_dir)
    hooks.on_log(f"launching {processes} training processes: {' '.join(cmd)}")
    relay = _Relay(job_dir, hooks)
    stop_asked = False
    with (job_dir / LOG).open("ab") as log:
        proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
            cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - prctl only, no locks taken
        )  # fmt: skip
        try:
            while proc.poll() is None:
                relay.pump()
                if not stop_asked and hooks.should_stop():
                    (job_dir / STOP).touch()
                    stop_asked = True
                time.sleep(poll_s)
            relay.pump()
        finally:
            if proc.poll() is None:  # the hooks raised (the run was taken over): end the ranks
                _stop(proc)
            (job_dir / EXAMPLES).unlink(missing_ok=True)  # a copy of the dataset: not kept
    return _outcome(relay, proc.returncode, job_dir, time.monotonic() - started)


def _outcome(relay: _Relay, code: int, job_dir: Path, elapsed: float) -> RunResult:
    """The run's result, or the error its ranks (or their silence) call for."""
    if relay.result is not None and code == 0:
        r = relay.result
        checkpoint = Path(r["checkpoint"]) if r.get("checkpoint") else None
        return RunResult(r["status"], int(r["step"]), checkpoint, dict(r.get("metrics") or {}))
    for error in relay.errors:
        if error["error"] == "training":
            raise TrainingError(error["message"])
    for error in relay.errors:
        if error["error"] != PEER:
            raise RankFailed(f"rank {error['rank']}: {error['error']}: {error['message']}\n{error['trace']}")
    # Only silence, or ranks that lost a peer: a process was killed from outside (signal, OOM killer).
    raise ProcessLost(
        f"torchrun exited with status {code} after {elapsed:.0f} s: a training process died without an "
        f"error (killed, or out of memory). Last lines of {job_dir / LOG}:\n{_tail(job_dir / LOG)}"
    )


if __name__ == "__main__":
    sys.exit(main())
