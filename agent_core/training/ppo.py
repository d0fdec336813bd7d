"""Multi-turn PPO (the UI-TARS-2 recipe): one sequence per episode, a critic, decoupled GAE.

Each episode's turns are one token sequence: format penalties on the last token of each turn that
did not parse, the episode's reward on its last token, and GAE with separate λ for the critic and
for the policy (the policy's λ adapts to the sequence's length). The critic may train alone for the
first `value_pretrain_steps` updates.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_core.rl.advantages import adaptive_lambda, decoupled_gae
from agent_core.rl.curation import Curator
from agent_core.rl.episodes import RLEpisode
from agent_core.training.algorithm import Learner
from agent_core.training.batching import Sample
from agent_core.training.errors import lazy


class PPO:
    """Multi-turn PPO with a critic; every request is one rollout capped at max_steps_per_episode."""

    critic: bool = True
    dual_clip: float | None = None

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = cfg

    def rollouts(self, task: str, curator: Curator) -> tuple[int, int]:
        return 1, int(self.cfg["max_steps_per_episode"])

    def fresh(self, kept: list[RLEpisode], *, version: int, versions_seen: Sequence[int]) -> list[RLEpisode]:
        return kept

    def samples(
        self, groups: list[list[RLEpisode]], metrics: dict[str, float], learner: Learner
    ) -> list[Sample]:
        """Each episode's turns with decoupled-GAE advantages and returns over the episode's sequence."""
        kept = _encode_whole(groups, learner)
        learner.score([s for _, turns in kept for s in turns], values=True)
        samples: list[Sample] = []
        lambdas = []
        for ep, turns in kept:
            rewards = self._rewards(ep, turns)
            if not rewards:
                continue
            lambdas.append(self._advantages(rewards, turns))
            samples += turns
        if lambdas:
            metrics["rl/lambda_policy"] = sum(lambdas) / len(lambdas)
        return samples

    def _rewards(self, ep: RLEpisode, turns: list[Sample]) -> list[float]:
        """Per response token: format penalties on unparsable turns' last tokens, the episode's reward
        on its last token; empty for an episode without a response token."""
        rewards: list[float] = []
        for t, s in zip(ep.turns, turns, strict=True):
            r = [0.0] * len(s.response)
            if not t.parsed and r:
                r[-1] += float(self.cfg["format_reward"])
            rewards += r
        if rewards:
            rewards[-1] += float(ep.reward)
        return rewards

    def _advantages(self, rewards: list[float], turns: list[Sample]) -> float:
        """Set the turns' advantages and returns from decoupled GAE over the episode; the policy's λ."""
        torch = lazy("torch")
        values = [v for s in turns for v in s.old_values]
        lam = adaptive_lambda(len(rewards), float(self.cfg["alpha"]))
        adv, ret = decoupled_gae(
            torch.tensor(rewards),
            torch.tensor(values),
            gamma=float(self.cfg["gamma"]),
            lambda_value=float(self.cfg["lambda_value"]),
            lambda_policy=lam,
        )
        pos = 0
        for s in turns:
            s.advantages = adv[pos : pos + len(s.response)].tolist()
            s.returns = ret[pos : pos + len(s.response)].tolist()
            pos += len(s.response)
        return lam

    def pretraining(self, value_pretrained: int) -> bool:
        return value_pretrained < int(self.cfg["value_pretrain_steps"])

    def train_on(self, samples: list[Sample]) -> list[Sample]:
        return samples

    def is_weights(
        self,
        mb: Sequence[Sample],
        old: Any,
        mask: Any,
        prompt_lens: Sequence[int],
        stats: dict[str, list[float]],
    ) -> Any:
        return None


def _encode_whole(groups: list[list[RLEpisode]], learner: Learner) -> list[tuple[RLEpisode, list[Sample]]]:
    """Each episode with its turns as samples; an episode with a turn too long for max_seq_len is left
    out whole, since its turns are one sequence (every turn is still encoded, so each is counted)."""
    kept: list[tuple[RLEpisode, list[Sample]]] = []
    for group in groups:
        for ep in group:
            encoded = [learner.encode_turn(t) for t in ep.turns]
            if all(s is not None for s in encoded):
                kept.append((ep, [s for s in encoded if s is not None]))
    return kept
