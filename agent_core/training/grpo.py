"""Step-level GRPO with DART's curation: group-relative advantages, no critic.

A group is the rollouts of one request (one instance of a task); every turn of an episode gets the
episode's advantage within its group, a group that all agrees teaches nothing (past successes are
injected into all-failed groups first), only the highest-entropy turns are trained on, and the policy
loss is importance-weighted by π_old / π_rollout, truncated at `is_cap`, with an optional dual clip.

The reward an episode is compared by within its group is the checker's plus `format_reward` for each
of its turns whose action did not parse: with advantages per episode, not per token, the penalty can
only act through the episode, so of two episodes with the same outcome the one with more unparsable
turns gets the lower advantage on all its turns (PPO puts it on the unparsable turn's last token).
The importance ratio of the clipped loss is per token, or with `ratio_level` "sequence" per turn
(GSPO, see losses.gspo_policy_loss): every token of a turn carries its episode's advantage, as GSPO
needs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_core.rl.advantages import group_advantages
from agent_core.rl.curation import Curator, latest_k, top_entropy_mask
from agent_core.rl.episodes import RLEpisode
from agent_core.training.algorithm import Learner
from agent_core.training.batching import Sample
from agent_core.training.errors import TrainingError
from agent_core.training.importance import rollout_is_weights


class GRPO:
    """Step-level GRPO; the curator sets each task's rollouts per request and their step cap."""

    critic: bool = False

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = cfg
        dual = float(cfg.get("dual_clip", 0))
        if 0 < dual <= 1:  # validate_config refuses it too; a saved config may predate that
            raise TrainingError(f"dual_clip must exceed 1 (or be 0 for off), got {dual:g}")
        self.dual_clip: float | None = dual or None

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
            advs = group_advantages([self.reward(ep) for ep in group])
            if not any(advs):
                solved = all(ep.success for ep in group)
                learner.untrained["agreed_solved" if solved else "agreed_failed"] += 1
            for ep, adv in zip(group, advs, strict=True):
                if adv == 0.0:
                    continue  # nothing to learn from a group that all agrees
                for turn in ep.turns:
                    s = learner.encode_turn(turn, version=ep.policy_version)
                    if s is None:
                        continue  # too long for max_seq_len (counted)
                    s.advantages = [adv] * len(s.response)
                    samples.append(s)
        metrics["rl/injected"] = float(injected)
        learner.score(samples, values=False)
        return samples

    def reward(self, ep: RLEpisode) -> float:
        """The episode's reward plus `format_reward` for each of its turns whose action did not parse."""
        unparsed = sum(not turn.parsed for turn in ep.turns)
        return float(ep.reward) + float(self.cfg["format_reward"]) * unparsed

    def informative(self, group: list[RLEpisode], learner: Learner) -> bool:
        """Whether the group has something to teach: not every advantage 0 once the pool injected what
        `samples` will inject (a group that all agrees does not fill an iteration: DAPO samples on)."""
        group, _ = learner.pool.inject(group)
        return any(group_advantages([self.reward(ep) for ep in group]))

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
        return rollout_is_weights(mb, old, mask, prompt_lens, float(self.cfg["is_cap"]), stats)
