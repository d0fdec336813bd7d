"""Step-level GRPO with DART's curation: group-relative advantages, no critic.

A group is the rollouts of one request (one instance of a task); every turn of an episode gets the
episode's advantage within its group, a group that all agrees teaches nothing (past successes are
injected into all-failed groups first), only the highest-entropy turns are trained on, and the policy
loss is importance-weighted by π_old / π_rollout, truncated at `is_cap`, with an optional dual clip.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_core.rl.advantages import group_advantages
from agent_core.rl.curation import Curator, latest_k, top_entropy_mask
from agent_core.rl.episodes import RLEpisode
from agent_core.rl.losses import truncated_is_weights
from agent_core.training.algorithm import Learner
from agent_core.training.batching import Sample, scatter
from agent_core.training.errors import lazy


class GRPO:
    """Step-level GRPO; the curator sets each task's rollouts per request and their step cap."""

    critic: bool = False

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = cfg
        self.dual_clip: float | None = float(cfg["dual_clip"]) if float(cfg.get("dual_clip", 0)) > 1 else None

    def rollouts(self, task: str, curator: Curator) -> tuple[int, int]:
        return max(2, curator.rollouts(task)), curator.length_cap(task)

    def fresh(self, kept: list[RLEpisode], *, version: int, versions_seen: Sequence[int]) -> list[RLEpisode]:
        """Only episodes from the latest K policy versions."""
        return latest_k(
            kept, current_version=version, k=int(self.cfg["latest_k"]), versions_seen=versions_seen
        )

    def samples(
        self, groups: list[list[RLEpisode]], metrics: dict[str, float], learner: Learner
    ) -> list[Sample]:
        """Every turn of an episode with the episode's group-relative advantage, scored by π_old."""
        samples: list[Sample] = []
        injected = 0
        for group in groups:
            group, used = learner.pool.inject(group)
            injected += int(used)
            advs = group_advantages([ep.reward for ep in group])
            if not any(advs):
                solved = all(ep.success for ep in group)
                learner.untrained["agreed_solved" if solved else "agreed_failed"] += 1
            for ep, adv in zip(group, advs, strict=True):
                if adv == 0.0:
                    continue  # nothing to learn from a group that all agrees
                for turn in ep.turns:
                    s = learner.encode_turn(turn)
                    if s is None:
                        continue  # too long for max_seq_len (counted)
                    s.advantages = [adv] * len(s.response)
                    samples.append(s)
        metrics["rl/injected"] = float(injected)
        learner.score(samples, values=False)
        return samples

    def pretraining(self, value_pretrained: int) -> bool:
        return False

    def train_on(self, samples: list[Sample]) -> list[Sample]:
        """The highest-entropy `entropy_top` share of the samples."""
        if not samples:
            return samples
        keep = top_entropy_mask([s.entropy for s in samples], float(self.cfg["entropy_top"]))
        return [s for s, k in zip(samples, keep, strict=True) if k]

    def is_weights(
        self,
        mb: Sequence[Sample],
        old: Any,
        mask: Any,
        prompt_lens: Sequence[int],
        stats: dict[str, list[float]],
    ) -> Any:
        """π_old / π_rollout per token, truncated at `is_cap` (the rollout engine's drift corrected)."""
        torch = lazy("torch")
        cap = float(self.cfg["is_cap"])
        rollout = scatter([s.rollout_logprobs for s in mb], mask, prompt_lens)
        weights = truncated_is_weights(old, rollout, cap)
        m = mask.bool()
        raw = torch.exp(old - rollout)[m]
        if raw.numel():
            stats["is_weight_mean"].append(float(weights[m].mean()))
            stats["is_weight_max"].append(float(raw.max()))
            stats["is_weight_min"].append(float(raw.min()))
            stats["is_truncated_frac"].append(float((raw > cap).float().mean()))
        return weights
