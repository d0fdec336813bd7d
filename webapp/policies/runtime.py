"""The agent_core policy a PolicyVersion row stands for, and how its rollouts observe the screen.

A version's config holds the policy's own settings (passed to `make_policy`) plus rollout settings
that are not the policy's (ROLLOUT_KEYS): `observation` picks what the sandbox adds to each
screenshot: "screenshot" (nothing, the default), "a11y" (the accessibility tree) or "elements" (the
page's visible elements with their screen centres, which a text-only model can click).

An openai version without an endpoint_url is served by the platform's policy servers: its requests go
to every alive server that serves its model now (the policy spreads them, fewest in flight first).
"""

from __future__ import annotations

import hashlib
from typing import Any

from agent_core.policies.base import Policy, PolicyError, make_policy
from sandbox_workers.agent_env import A11yMode
from webapp.policies.models import PolicyVersion
from webapp.policies.selectors import server_urls_for

OBSERVATIONS: dict[str, A11yMode] = {"screenshot": False, "a11y": True, "elements": "elements"}
ROLLOUT_KEYS = ("observation",)


def policy_for(version: PolicyVersion, *, episode: int | None = None) -> Policy:
    """A fresh policy instance for one episode (its id: `episode`); a misconfigured version raises
    PolicyError.

    A sampling policy's `seed` is the version's seed mixed with the episode id (`episode_seed`): with the
    same seed for every episode, a GRPO group's rollouts of one task instance would all sample the same
    response and teach nothing, while a re-run of one episode still draws what it drew before."""
    config: dict[str, Any] = {k: v for k, v in (version.config or {}).items() if k not in ROLLOUT_KEYS}
    if episode is not None and isinstance(config.get("seed"), int) and not isinstance(config["seed"], bool):
        config["seed"] = episode_seed(config["seed"], episode)
    backend = version.backend
    if backend == PolicyVersion.Backend.OPENAI:
        if version.is_platform_served():
            return _served_policy(version, config)
        return make_policy("openai", base_url=version.endpoint_url, model=version.model_name, **config)
    if backend == PolicyVersion.Backend.LOCAL:
        if version.checkpoint is not None and not version.checkpoint.path:
            raise PolicyError(f"policy {version.name}: its checkpoint has no model files")
        # A checkpoint's directory, else model_name (a model directory); relative paths live under
        # the var dir, which every process of the platform shares.
        path = version.model_dir()
        if path is None:
            raise PolicyError(f"policy {version.name}: no checkpoint and no model directory")
        return make_policy("local", model_path=str(path), **config)
    if backend in (PolicyVersion.Backend.ORACLE, PolicyVersion.Backend.RANDOM, PolicyVersion.Backend.NOOP):
        return make_policy(backend, **config)
    raise PolicyError(f"policy {version.name}: backend {backend!r} cannot run unattended")


def episode_seed(seed: int, episode: int) -> int:
    """The seed of one episode's policy: the version's `seed` and the episode id, mixed (stable across
    processes and Python versions, unlike hash())."""
    digest = hashlib.sha256(f"{seed}:{episode}".encode()).digest()
    return int.from_bytes(digest[:4], "big") & 0x7FFF_FFFF


class PolicyUnavailable(PolicyError):
    """No server serves the version right now (starting, restarting, or not loaded yet): not the policy's
    fault; a rollout waits for one and, past its wait, ends as an environment error and re-runs."""


def _served_policy(version: PolicyVersion, config: dict[str, Any]) -> Policy:
    """An openai policy on the platform's alive servers of its model (and any base_urls its config adds)."""
    model = version.served_model_id()
    urls = server_urls_for(model)
    if not urls:
        raise PolicyUnavailable(f"policy {version.name}: no policy server serves {model} right now")
    extra = config.pop("base_urls", None) or []
    if isinstance(extra, str) or not isinstance(extra, list | tuple):
        raise PolicyError(f"policy {version.name}: base_urls must be a list of URLs, got {extra!r}")
    if "base_url" in config:  # one more server of the model, after the platform's
        extra = [config.pop("base_url"), *extra]
    return make_policy("openai", base_url=urls[0], base_urls=[*urls, *extra], model=model, **config)


def observation_for(version: PolicyVersion | None) -> A11yMode:
    """What the sandbox adds to each screenshot for this version's rollouts (its `observation`)."""
    name = (version.config or {}).get("observation", "screenshot") if version is not None else "screenshot"
    if not isinstance(name, str) or name not in OBSERVATIONS:
        raise PolicyError(
            f"policy {version.name if version else '?'}: observation must be one of "
            f"{', '.join(OBSERVATIONS)}, got {name!r}"
        )
    return OBSERVATIONS[name]
