"""Which policy an episode runs, picked when it starts (DART's per-worker model sync).

A batch that follows its policy's line (config `follow_newest`) moves each episode, as it starts, to
the newest version of the line that a rollout could run now: a promoted or published adapter takes over
at the next episode of every worker once a policy server has loaded it, and until then rollouts go on
with the version they had. A platform-served version no server serves right now (starting,
restarting) is waited for, the episode kept alive meanwhile; past ROLLOUT_POLICY_WAIT_SECONDS it ends as
an environment error (re-run), never as the agent's failure.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings

from agent_core.policies.base import Policy
from sandbox_workers.agent_env import A11yMode
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.policies.runtime import PolicyUnavailable, observation_for, policy_for
from webapp.policies.selectors import newest_ready
from webapp.rollouts.models import EpisodeWait
from webapp.rollouts.waits import episode_wait_end, episode_wait_note

log = logging.getLogger(__name__)
WAIT_POLL_S = 1.0


def rollout_version(episode: Episode) -> PolicyVersion:
    """The episode's policy version, moved to its line's newest ready one when its batch follows it."""
    version = episode.policy_version
    assert version is not None
    batch = episode.batch
    if batch is None or not (batch.config or {}).get("follow_newest"):
        return version
    newest = newest_ready(version)
    if newest.pk != version.pk:
        Episode.objects.filter(pk=episode.pk).update(policy_version=newest)
        episode.policy_version = newest
        log.info("episode %s: %s -> %s (the newest ready of its line)", episode.pk, version.name, newest.name)
    return newest


def rollout_policy(episode: Episode) -> tuple[Policy, A11yMode]:
    """(a fresh policy, its observation mode) for the episode; waits for a policy server when none
    serves the version yet. Raises PolicyUnavailable past the wait, PolicyError when misconfigured."""
    version = rollout_version(episode)
    observation = observation_for(version)
    deadline = time.monotonic() + settings.ROLLOUT_POLICY_WAIT_SECONDS
    noted = False
    try:
        while True:
            try:
                return policy_for(version, episode=episode.pk), observation
            except PolicyUnavailable as exc:
                if time.monotonic() >= deadline:
                    raise
                if not noted:  # the batch page says what it waits for
                    why = f"{exc} (it waits up to {settings.ROLLOUT_POLICY_WAIT_SECONDS} s)"
                    episode_wait_note(episode_id=episode.pk, kind=EpisodeWait.Kind.POLICY, detail=why)
                    noted = True
            Episode.beat(episode.pk)  # waiting on a server is not a dead worker
            time.sleep(WAIT_POLL_S)
    finally:
        if noted:
            episode_wait_end(episode_id=episode.pk)
