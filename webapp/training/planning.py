"""A run's memory and time plan against the training workers' devices, for the launch form and the launch.

The estimate is agent_core.training.planner's, from the base policy's config.json and the run's config;
the devices are those the live training workers reported (webapp.training.workers). A run is planned
against the largest device any of them offers it (its `device` setting: cuda, cpu, or auto: a worker's
GPUs where it has any, else its RAM, which the processes of a CPU run share). A launch is refused only
when the estimate exceeds that device; no plan (no config.json, an unknown shape) or no worker heard
from refuses nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agent_core.training.planner import (
    GIB,
    MFU,
    Plan,
    PlanError,
    assumed_flops,
    plan_run,
    read_model_shape,
)
from webapp.policies.models import PolicyVersion
from webapp.training.models import TrainingWorker
from webapp.training.workers import training_workers_live

NO_WORKER = "no training worker has reported its devices: the run is not checked against one"


@dataclass(frozen=True)
class Device:
    """The device a worker offers a run: its largest of the kind the run would use."""

    worker: str
    kind: str
    name: str
    memory: int
    count: int
    """How many devices of that kind the worker has."""

    def capacity(self, processes: int) -> int:
        """Bytes one process may use: a whole GPU (one per process), or a share of the host's RAM."""
        return self.memory if self.kind == "cuda" else self.memory // max(1, processes)

    def said(self, processes: int) -> str:
        gib = f"{self.memory / GIB:.1f} GiB"
        if self.kind == "cpu":
            shared = f", {self.capacity(processes) / GIB:.1f} GiB each" if processes > 1 else ""
            return f"the RAM of {self.worker} ({gib} shared by {processes} process(es){shared})"
        return f"{self.name} on {self.worker} ({gib})"


def device_of(worker: TrainingWorker, setting: str) -> Device | None:
    """The largest device `worker` offers a run whose `device` setting is `setting`; None if it has none."""
    reported = [d for d in worker.devices or [] if isinstance(d, dict) and int(d.get("memory") or 0) > 0]
    cuda = [d for d in reported if d.get("kind") == "cuda"]
    cpu = [d for d in reported if d.get("kind") == "cpu"]
    pool = {"cuda": cuda, "cpu": cpu}.get(setting, cuda or cpu)  # auto: CUDA where there is one
    if not pool:
        return None
    best = max(pool, key=lambda d: int(d["memory"]))
    return Device(worker.name, str(best["kind"]), str(best.get("name", "")), int(best["memory"]), len(pool))


@dataclass(frozen=True)
class LaunchPlan:
    """What the launch form shows: the estimate, the device it is checked against, and the verdict."""

    plan: Plan | None
    problem: str = ""
    """Why there is no estimate ("" when there is one)."""
    device: Device | None = None
    workers: int = 0
    field: str = ""
    """The field to change when the run does not fit."""
    suggestion: str = ""

    @property
    def capacity(self) -> int | None:
        return self.device.capacity(self.plan.processes) if self.device and self.plan else None

    @property
    def fits(self) -> bool | None:
        """Whether the run fits the largest device (None: no estimate, or no device to check against)."""
        capacity = self.capacity
        return None if capacity is None or self.plan is None else self.plan.fits(capacity)

    @property
    def step_seconds(self) -> float | None:
        """A rough time of one optimizer step on the device (None without one)."""
        if self.plan is None or self.device is None:
            return None
        return self.plan.step_seconds(assumed_flops(self.device.kind, self.device.name, self.plan.dtype))

    @property
    def parts(self) -> list[tuple[str, str]]:
        return [(name, f"{n / GIB:.1f} GiB") for name, n in self.plan.parts()] if self.plan else []

    @property
    def no_worker(self) -> str:
        """Why the estimate is checked against no device ("" when it is)."""
        if self.plan is None or self.device is not None:
            return ""
        if self.workers:
            kind = str(self.plan.config.get("device", "auto"))
            return (
                f"none of the {self.workers} training worker(s) reported a device this run can use "
                f"(device: {kind}): not checked"
            )
        return NO_WORKER

    @property
    def summary(self) -> str:
        """The estimate in one line ("" without one)."""
        if (plan := self.plan) is None:
            return ""
        trained = "" if plan.method == "full" else f" ({plan.trainable:,} trained)"
        how = "FSDP2" if plan.sharded else "DDP"
        processes = f", {plan.processes} processes ({how})" if plan.processes > 1 else ""
        return (
            f"est. {plan.total / GIB:.1f} GiB per process: {plan.params:,} parameters, {plan.method}"
            f"{trained}, {plan.dtype}, {plan.micro_batch} × {plan.seq_len} tokens per forward{processes}"
        )

    @property
    def verdict(self) -> str:
        """Whether it fits, and on what ("" without an estimate)."""
        if self.plan is None:
            return ""
        if self.device is None:
            return self.no_worker
        refused = self.refusal()
        if refused:
            return f"does not fit: {refused[1]}"
        processes, device = self.plan.processes, self.device
        short = device.kind == "cuda" and processes > device.count
        also = f" (it has {device.count} GPU(s) for {processes} processes, one each)" if short else ""
        return f"fits {device.said(processes)}{also}"

    @property
    def time_said(self) -> str:
        """The rough time of a step, labelled as an estimate ("" without a device)."""
        seconds = self.step_seconds
        if seconds is None or self.plan is None or self.device is None:
            return ""
        peak = assumed_flops(self.device.kind, self.device.name, self.plan.dtype) / 1e12
        plan = self.plan
        per_token = f"{plan.step_flops / (plan.micro_batch * plan.seq_len * plan.params):g}"
        took = f"{seconds:.2f} s" if seconds < 60 else f"{seconds / 60:.1f} min"
        return (
            f"≈ {took} per optimizer step at full length (a rough estimate: {per_token} × parameters "
            f"FLOPs per token at {MFU:.0%} of an assumed {peak:g} TFLOP/s peak)"
        )

    def refusal(self) -> tuple[str, str] | None:
        """(field, message) when the run cannot fit the largest device; None otherwise."""
        if self.fits is not False or self.plan is None or self.device is None:
            return None
        plan = self.plan
        what = f"{plan.method}, {plan.dtype}, {plan.micro_batch} × {plan.seq_len} tokens per forward"
        return self.field, (
            f"needs est. {plan.total / GIB:.1f} GiB per process ({what}), more than the largest training "
            f"device, {self.device.said(plan.processes)}: {self.suggestion}"
        )


def launch_plan(
    *, base_policy: PolicyVersion | None, algorithm: str, config: Mapping[str, Any]
) -> LaunchPlan:
    """The plan of a run of `algorithm` with the validated `config` from `base_policy`."""
    if base_policy is None:
        return LaunchPlan(None, "choose a base policy to see its estimate")
    model_dir = base_policy.model_dir()
    if model_dir is None:
        return LaunchPlan(None, f"{base_policy.name} has no model directory to plan from")
    try:
        plan = plan_run(read_model_shape(model_dir), algorithm, config)
    except PlanError as exc:
        return LaunchPlan(None, f"no estimate: {exc}")
    workers = training_workers_live()
    setting = str(config.get("device", "auto"))
    offers = [d for d in (device_of(w, setting) for w in workers) if d is not None]
    if not offers:
        return LaunchPlan(plan, workers=len(workers))
    best = max(offers, key=lambda d: d.capacity(plan.processes))
    capacity = best.capacity(plan.processes)
    if plan.fits(capacity):
        return LaunchPlan(plan, device=best, workers=len(workers))
    fixes = plan.fixes(capacity)
    field = fixes[0].field if fixes else "base_policy"
    return LaunchPlan(
        plan, device=best, workers=len(workers), field=field, suggestion=plan.suggestion(capacity)
    )
