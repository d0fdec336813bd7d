"""How a worker trains a claimed run: in its own process, or under torchrun when `processes` > 1.

Under torchrun the ranks run in child processes and rank 0 reports through the job folder
(agent_core.training.dist_job); this worker process relays those reports to the run's RunHooks, so
every database write, heartbeat and stop check stays here, as for a one-process run. A rank that dies
raises ProcessLost, which services.training_run_execute treats as this worker's own death.
"""

from __future__ import annotations

from typing import Any

from agent_core.training.types import Hooks, RunResult, RunSpec

JOB_FOLDER = "torchrun"
"""Under the run's directory: one job folder per attempt (spec, events, torchrun.log)."""


def run_training(spec: RunSpec, hooks: Hooks, *, attempt: int, **data: Any) -> RunResult:
    """Train `spec` to its end in this process, or with `processes` ranks under torchrun."""
    processes = int(spec.config.get("processes", 1))
    if processes <= 1:
        from agent_core.training import runner

        return runner.run(spec, hooks, **data)
    from agent_core.training.dist_job import run_distributed

    job_dir = spec.out_dir / JOB_FOLDER / f"attempt-{attempt}"
    return run_distributed(spec, hooks, examples=data.get("examples"), job_dir=job_dir, processes=processes)
