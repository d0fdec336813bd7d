"""Paired statistics for "does RL beat SFT": the numbers an evaluation protocol reports.

Both arms of a training seed start from the same SFT checkpoint and are evaluated on the same test
items (task, seed), so the comparison is paired: per training seed the difference of the arms' mean
success, across training seeds its mean and standard error, and a paired bootstrap interval that
resamples training seeds and test items together (both are sources of variance). Pure Python.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

Item = tuple[str, int]
"""A test item: (task id, seed)."""


@dataclass(frozen=True)
class PairedResult:
    """The comparison of arm B (e.g. SFT+RL) against arm A (SFT-only) over training seeds."""

    per_seed: tuple[float, ...]
    """Mean success of B minus A, per training seed."""
    mean: float
    se: float
    """Standard error of `mean` over training seeds (0 with a single seed)."""
    ci_low: float
    ci_high: float
    """The paired bootstrap's percentile interval of the mean difference."""
    level: float

    @property
    def z(self) -> float:
        """`mean` in standard errors (inf when the seeds agree exactly and the mean is not 0)."""
        if self.se == 0:
            return 0.0 if self.mean == 0 else math.copysign(math.inf, self.mean)
        return self.mean / self.se

    def beats(self, standard_errors: float = 2.0) -> bool:
        """B beats A by more than `standard_errors` standard errors (needs ≥ 2 seeds to say so)."""
        return len(self.per_seed) >= 2 and self.mean > standard_errors * self.se


def mean_success(outcomes: Mapping[Item, float]) -> float:
    """Mean success over the task set: each task's mean over its seeds, then the mean over tasks (a
    task with more test seeds does not weigh more)."""
    by_task: dict[str, list[float]] = {}
    for (task, _seed), value in outcomes.items():
        by_task.setdefault(task, []).append(value)
    if not by_task:
        raise ValueError("no outcomes to average")
    return statistics.fmean(statistics.fmean(v) for v in by_task.values())


def per_task(outcomes: Mapping[Item, float]) -> dict[str, float]:
    """Mean success per task."""
    by_task: dict[str, list[float]] = {}
    for (task, _seed), value in outcomes.items():
        by_task.setdefault(task, []).append(value)
    return {task: statistics.fmean(v) for task, v in sorted(by_task.items())}


def paired(
    arm_a: Sequence[Mapping[Item, float]],
    arm_b: Sequence[Mapping[Item, float]],
    *,
    resamples: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> PairedResult:
    """B against A, paired per training seed (the i-th mapping of each arm) and per test item.

    Every training seed's two arms must cover the same items: a pair with a missing side is an error,
    not a silent drop (an evaluation that lost episodes must say so)."""
    if len(arm_a) != len(arm_b) or not arm_a:
        raise ValueError(
            f"need the same number (≥ 1) of training seeds per arm, got {len(arm_a)}, {len(arm_b)}"
        )
    for i, (a, b) in enumerate(zip(arm_a, arm_b, strict=True)):
        if set(a) != set(b):
            missing = sorted(set(a) ^ set(b))[:3]
            raise ValueError(f"training seed #{i}: the arms cover different test items, e.g. {missing}")
        if set(a) != set(arm_a[0]):
            raise ValueError(f"training seed #{i} was tested on other items than training seed #0")
    diffs = tuple(mean_success(b) - mean_success(a) for a, b in zip(arm_a, arm_b, strict=True))
    mean = statistics.fmean(diffs)
    se = statistics.stdev(diffs) / math.sqrt(len(diffs)) if len(diffs) > 1 else 0.0
    low, high = _bootstrap(arm_a, arm_b, resamples=resamples, level=level, seed=seed)
    return PairedResult(diffs, mean, se, low, high, level)


def _bootstrap(
    arm_a: Sequence[Mapping[Item, float]],
    arm_b: Sequence[Mapping[Item, float]],
    *,
    resamples: int,
    level: float,
    seed: int,
) -> tuple[float, float]:
    """Percentile interval of the mean paired difference, resampling training seeds and, within the
    task set, test seeds per task (tasks stay fixed: the task set is the population of interest)."""
    rng = random.Random(seed)  # noqa: S311 - a bootstrap, not a secret
    n = len(arm_a)
    tasks: dict[str, list[int]] = {}
    for task, s in sorted(arm_a[0]):
        tasks.setdefault(task, []).append(s)
    stats: list[float] = []
    for _ in range(resamples):
        seeds = [rng.randrange(n) for _ in range(n)]
        picks = {task: [rng.choice(ss) for _ in ss] for task, ss in tasks.items()}
        total = 0.0
        for i in seeds:
            a, b = arm_a[i], arm_b[i]
            task_diffs = [statistics.fmean(b[(t, s)] - a[(t, s)] for s in ss) for t, ss in picks.items()]
            total += statistics.fmean(task_diffs)
        stats.append(total / n)
    stats.sort()
    tail = (1 - level) / 2
    return stats[int(tail * (resamples - 1))], stats[int((1 - tail) * (resamples - 1))]
