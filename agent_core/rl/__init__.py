"""Reinforcement-learning algorithms as pure functions: advantages, losses, DART curation, interpolation.

The trainers in agent_core.training compose these; nothing here touches a model, a rollout or a
database, so every estimator and loss is unit-tested on hand-computed toy inputs. torch is imported
inside the functions that need it: importing this package does not load torch.
"""

from agent_core.rl.advantages import (
    adaptive_lambda,
    decoupled_gae,
    gae,
    group_advantages,
    mc_returns,
    whiten,
)
from agent_core.rl.curation import (
    Curator,
    ExperiencePool,
    group_by_task,
    latest_k,
    top_entropy_mask,
    within_lag,
)
from agent_core.rl.interpolate import InterpolationError, interpolate_checkpoints, interpolate_state_dicts
from agent_core.rl.losses import (
    entropy_from_logits,
    explained_variance,
    kl_penalty,
    masked_mean,
    ppo_policy_loss,
    truncated_is_weights,
    value_loss,
)

__all__ = [
    "Curator",
    "ExperiencePool",
    "InterpolationError",
    "adaptive_lambda",
    "decoupled_gae",
    "entropy_from_logits",
    "explained_variance",
    "gae",
    "group_advantages",
    "group_by_task",
    "interpolate_checkpoints",
    "interpolate_state_dicts",
    "kl_penalty",
    "latest_k",
    "masked_mean",
    "mc_returns",
    "ppo_policy_loss",
    "top_entropy_mask",
    "truncated_is_weights",
    "value_loss",
    "whiten",
    "within_lag",
]
