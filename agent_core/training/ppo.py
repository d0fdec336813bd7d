"""Multi-turn PPO (the UI-TARS-2 recipe): one sequence per episode, a critic, decoupled GAE.

Each episode's turns are one token sequence: format penalties on the last token of each turn that
did not parse, the episode's reward on its last token, and GAE with separate λ for the critic and
for the policy (the policy's λ adapts to the sequence's length, never below `lambda_policy_min`).
The advantages are whitened over the batch, and the policy loss is importance-weighted by
π_old / π_rollout, truncated at `is_cap` (episodes may come from a policy a version behind).

The critic is trusted only once it has learned something: its explained variance of the returns on
each batch's fresh episodes (measured before it trains on them) must reach `critic_min_ev`. Until
then the critic trains alone (at most `value_pretrain_steps` iterations, at the start of the run),
and the policy's advantages do not bootstrap from it: with λ = 1 they are the return minus the
critic's value, a baseline that shifts every action of a state alike and so cannot cancel the
outcome reward, where λ < 1 would hand the reward to earlier tokens through the critic's guesses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from agent_core.rl.advantages import adaptive_lambda, decoupled_gae, mc_returns, whiten
from agent_core.rl.curation import Curator
from agent_core.rl.episodes import RLEpisode
from agent_core.rl.losses import explained_variance
from agent_core.training.algorithm import Learner
from agent_core.training.batching import Sample
from agent_core.training.errors import lazy
from agent_core.training.importance import rollout_is_weights


class PPO:
    """Multi-turn PPO with a critic; every request is one rollout capped at max_steps_per_episode."""

    critic: bool = True
    dual_clip: float | None = None

    def __init__(self, cfg: Mapping[str, Any]) -> None:
        self.cfg = cfg
        self.critic_ev = 0.0
        """The critic's explained variance of the returns on the latest batch, before it trained on it."""
        self.pretrained = False
        """Whether value pre-training is over (it happens only at the start of the run)."""

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
        episodes = [(rewards, turns) for ep, turns in kept if (rewards := self._rewards(ep, turns))]
        if not episodes:
            return []
        # --- is the critic worth bootstrapping from? judged on episodes it has not trained on
        self.critic_ev = _critic_ev(episodes, float(self.cfg["gamma"]))
        trusted = self.critic_ev >= float(self.cfg["critic_min_ev"])
        metrics["rl/critic_ev"] = self.critic_ev
        metrics["rl/critic_trusted"] = float(trusted)
        # --- decoupled GAE per episode, then whitening over the batch
        lambdas = [self._advantages(rewards, turns, trusted=trusted) for rewards, turns in episodes]
        metrics["rl/lambda_policy"] = sum(lambdas) / len(lambdas)
        samples = [s for _, turns in episodes for s in turns]
        if self.cfg["whiten_advantages"] == "on":
            _whiten_advantages(samples, metrics)
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

    def _advantages(self, rewards: list[float], turns: list[Sample], *, trusted: bool) -> float:
        """Set the turns' advantages and returns from decoupled GAE over the episode; the policy's λ
        (1 where the critic is not `trusted`: the return minus the critic's value, no bootstrapping)."""
        torch = lazy("torch")
        values = [v for s in turns for v in s.old_values]
        lam = 1.0
        if trusted:
            floor = float(self.cfg["lambda_policy_min"])
            lam = adaptive_lambda(len(rewards), float(self.cfg["alpha"]), floor=floor)
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

    def informative(self, group: list[RLEpisode], learner: Learner) -> bool:
        """Always: the critic's baseline gives every episode an advantage, whatever its reward."""
        return True

    def pretraining(self, value_pretrained: int) -> bool:
        """Critic only while it is untrusted, for at most `value_pretrain_steps` updates at the start."""
        used_up = value_pretrained >= int(self.cfg["value_pretrain_steps"])
        learned = self.critic_ev >= float(self.cfg["critic_min_ev"])
        # Once over, over: a critic that slips back below the mark later does not pause the policy.
        self.pretrained = self.pretrained or used_up or learned
        return not self.pretrained

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
        """π_old / π_rollout per token, truncated at `is_cap` (episodes a version behind corrected)."""
        return rollout_is_weights(mb, old, mask, prompt_lens, float(self.cfg["is_cap"]), stats)


def _critic_ev(episodes: list[tuple[list[float], list[Sample]]], gamma: float) -> float:
    """The critic's explained variance of the Monte-Carlo returns over every token of `episodes`."""
    torch = lazy("torch")
    returns = torch.cat([mc_returns(torch.tensor(rewards), gamma) for rewards, _ in episodes])
    values = torch.tensor([v for _, turns in episodes for s in turns for v in s.old_values])
    return explained_variance(values, returns, torch.ones_like(returns))


def _whiten_advantages(samples: list[Sample], metrics: dict[str, float]) -> None:
    """Whiten the samples' advantages over all their tokens (mean 0, variance 1), as PPO does."""
    torch = lazy("torch")
    flat = torch.tensor([a for s in samples for a in s.advantages])
    metrics["rl/advantage_std"] = float(flat.std(unbiased=False))
    white = whiten(flat).tolist()
    pos = 0
    for s in samples:
        s.advantages = white[pos : pos + len(s.advantages)]
        pos += len(s.advantages)


def _encode_whole(groups: list[list[RLEpisode]], learner: Learner) -> list[tuple[RLEpisode, list[Sample]]]:
    """Each episode with its turns as samples; an episode with a turn too long for max_seq_len is left
    out whole, since its turns are one sequence (every turn is still encoded, so each is counted)."""
    kept: list[tuple[RLEpisode, list[Sample]]] = []
    for group in groups:
        for ep in group:
            encoded = [learner.encode_turn(t, version=ep.policy_version) for t in ep.turns]
            if all(s is not None for s in encoded):
                kept.append((ep, [s for s in encoded if s is not None]))
    return kept
