"""DART's data curation for step-level GRPO: what to roll out, what to keep, what to train on.

Pure Python (no torch): the per-task rollout count and step cap follow the task's recent success
(`Curator`), a recent success of a task instance is injected into that instance's groups where every
rollout failed (`ExperiencePool`), only the highest-entropy steps are trained on (`top_entropy_mask`)
and only trajectories from recent policies are used (`latest_k`, `within_lag`).

Policy versions are the indices the trainer publishes, 0, 1, 2, … in publish order, so the lag of an
episode is `current - version`, counted in published versions.
"""

from __future__ import annotations

import dataclasses
import math
from collections import deque
from collections.abc import Iterable, Sequence
from typing import Any

from agent_core.rl.episodes import RLEpisode, RLTurn


class Curator:
    """Per-task rollout counts and step caps that follow its success over the last `window` episodes."""

    def __init__(
        self,
        *,
        min_rollouts: int,
        max_rollouts: int,
        window: int,
        max_steps: int,
        length_margin: int,
        min_steps_cap: int,
    ) -> None:
        if not 1 <= min_rollouts <= max_rollouts:
            raise ValueError(f"need 1 <= min_rollouts <= max_rollouts, got {min_rollouts} and {max_rollouts}")
        if window < 1 or max_steps < 1 or min_steps_cap < 1 or length_margin < 0:
            raise ValueError(
                f"need window, max_steps, min_steps_cap >= 1 and length_margin >= 0, got {window}, "
                f"{max_steps}, {min_steps_cap} and {length_margin}"
            )
        self.min_rollouts = min_rollouts
        self.max_rollouts = max_rollouts
        self.window = window
        self.max_steps = max_steps
        self.length_margin = length_margin
        self.min_steps_cap = min_steps_cap
        self._records: dict[str, deque[tuple[bool, int]]] = {}

    def record(self, task_id: str, *, success: bool, steps: int) -> None:
        """Note one finished episode of `task_id`."""
        self._records.setdefault(task_id, deque(maxlen=self.window)).append((bool(success), int(steps)))

    def success_rate(self, task_id: str) -> float | None:
        """Share of successes over the task's last `window` episodes (None before its first)."""
        records = self._records.get(task_id)
        if not records:
            return None
        return sum(1 for ok, _ in records if ok) / len(records)

    def rollouts(self, task_id: str) -> int:
        """Rollouts to ask for: max_rollouts for an unseen or failing task, min_rollouts once solved."""
        rate = self.success_rate(task_id)
        if rate is None:
            return self.max_rollouts
        wanted = self.max_rollouts - (self.max_rollouts - self.min_rollouts) * rate
        # Half rounds up (not Python's banker's rounding): ties go to the side of more exploration.
        return max(self.min_rollouts, min(self.max_rollouts, math.floor(wanted + 0.5)))

    def length_cap(self, task_id: str) -> int:
        """Step cap: longest recent success + margin (at least min_steps_cap, at most max_steps)."""
        successes = [steps for ok, steps in self._records.get(task_id, ()) if ok]
        if not successes:
            return self.max_steps
        return min(self.max_steps, max(self.min_steps_cap, max(successes) + self.length_margin))

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state (for checkpoints)."""
        return {
            "records": {task: [[ok, steps] for ok, steps in recs] for task, recs in self._records.items()}
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned (keeping the last `window` records of each task)."""
        self._records = {
            task: deque(((bool(ok), int(steps)) for ok, steps in recs), maxlen=self.window)
            for task, recs in state["records"].items()
        }


class ExperiencePool:
    """Past successes of each task instance (task and seed), for that instance's groups where every
    rollout failed.

    A success is injected only into a group of its own instance (a success on another seed solved
    another problem: comparing the group with it says nothing of these rollouts) and only while its
    policy is at most `max_age` published versions behind the trainer's (`advance`); older ones are
    forgotten. Each instance keeps its newest `capacity` successes."""

    def __init__(self, capacity: int, *, max_age: int) -> None:
        if capacity < 0 or max_age < 0:
            raise ValueError(f"capacity and max_age must be >= 0, got {capacity} and {max_age}")
        self.capacity = capacity
        self.max_age = max_age
        self.version = 0
        self._episodes: dict[tuple[str, int], deque[Any]] = {}

    def advance(self, version: int) -> None:
        """The trainer's policy is now `version`: forget successes more than max_age versions behind."""
        self.version = version
        for key, eps in list(self._episodes.items()):
            kept = [ep for ep in eps if self._young(ep)]
            if kept:
                self._episodes[key] = deque(kept, maxlen=self.capacity)
            else:
                del self._episodes[key]

    def _young(self, episode: Any) -> bool:
        return self.version - int(episode.policy_version) <= self.max_age

    def add(self, episode: Any) -> None:
        """Keep `episode` if it succeeded with turns to learn from, and is young enough (episodes
        injected from the pool are already in it)."""
        if (
            not episode.success
            or not episode.turns
            or getattr(episode, "injected", False)
            or self.capacity == 0
            or not self._young(episode)
        ):
            return
        key = (episode.task_id, episode.seed)
        self._episodes.setdefault(key, deque(maxlen=self.capacity)).append(episode)

    def inject(self, group: list[Any]) -> tuple[list[Any], bool]:
        """If every rollout of the group failed and its instance has a young enough pooled success, that
        success replaces the group's last rollout."""
        if not group or any(ep.success for ep in group):
            return group, False
        pooled = [ep for ep in self._episodes.get((group[0].task_id, group[0].seed), ()) if self._young(ep)]
        if not pooled:
            return group, False
        return [*group[:-1], dataclasses.replace(pooled[-1], injected=True)], True

    def __len__(self) -> int:
        return sum(len(eps) for eps in self._episodes.values())

    def state_dict(self) -> dict[str, Any]:
        """JSON-able state (for checkpoints): the pooled episodes as plain dicts, by task."""
        episodes: dict[str, list[dict[str, Any]]] = {}
        for (task, _), eps in self._episodes.items():
            episodes.setdefault(task, []).extend(dataclasses.asdict(ep) for ep in eps)
        return {"capacity": self.capacity, "episodes": episodes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what `state_dict` returned, rebuilding RLEpisode / RLTurn objects (each under its
        instance, so an older checkpoint's pool, kept by task, loads too)."""
        self._episodes = {}
        for eps in state["episodes"].values():
            for data in eps:
                self.add(_episode_from_dict(data))


def _episode_from_dict(data: dict[str, Any]) -> RLEpisode:
    turns = tuple(
        RLTurn(
            messages=t["messages"],
            a11y=t["a11y"],
            response_ids=tuple(t["response_ids"]),
            rollout_logprobs=tuple(t["rollout_logprobs"]),
            parsed=t.get("parsed", True),
        )
        for t in data["turns"]
    )
    return RLEpisode(**{**data, "turns": turns})


def top_entropy_mask(entropies: Sequence[float], frac: float) -> list[bool]:
    """Mark the ceil(frac * n) highest-entropy entries (ties: lower index first)."""
    if not 0.0 <= frac <= 1.0:
        raise ValueError(f"frac must be in [0, 1], got {frac}")
    n = len(entropies)
    # The epsilon keeps float noise (0.7 * 10 = 7.000000000000001) from keeping one entry too many.
    k = min(n, math.ceil(frac * n - 1e-9))
    order = sorted(range(n), key=lambda i: (-entropies[i], i))
    keep = set(order[:k])
    return [i in keep for i in range(n)]


def latest_k(
    episodes: Iterable[Any], *, current_version: int, k: int, versions_seen: Sequence[int]
) -> list[Any]:
    """Episodes whose policy_version is among the k newest of `versions_seen` (and current_version)."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    newest = set(sorted({*versions_seen, current_version})[-k:])
    return [ep for ep in episodes if ep.policy_version in newest]


def within_lag(version: int, current: int, max_lag: int) -> bool:
    """Whether a policy `version` is at most `max_lag` published versions behind `current`."""
    return current - version <= max_lag


def group_by_task(episodes: Iterable[Any]) -> dict[str, list[Any]]:
    """Episodes grouped by task_id, tasks and episodes in their first-seen order."""
    groups: dict[str, list[Any]] = {}
    for ep in episodes:
        groups.setdefault(ep.task_id, []).append(ep)
    return groups
