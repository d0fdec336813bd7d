"""Which checkpoints a run's `keep_checkpoints` pruning must leave alone, told to the trainer by marker
files (agent_core.training.checkpoints.keep_mark): the trainer prunes in its own process and cannot ask
the database, and a file in the directory holds across processes and restarts.

- promoted: a checkpoint promoted to a policy version is kept for good. The version names it (and
  rollouts, annotation, merges and servers load it); no service deletes a version, episodes keep it.
- rollouts: a directory an RL run published (rollout_source.publish) is kept while rollouts may still
  load it: its version is active (the newest published, and a served run's previous one until the
  newest is loaded), the run's running batch names it, or an unfinished (pending or running) episode
  runs it. Each publish re-checks the run's earlier versions and releases the rest. Workers claim an
  episode before reading its version, so a version no unfinished episode names is not about to load.
"""

from __future__ import annotations

from pathlib import Path

from django.db.models import Q, QuerySet

from agent_core.training.checkpoints import keep_mark, keep_unmark
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.rollouts.models import RolloutBatch

PROMOTED = "promoted"
ROLLOUTS = "rollouts"


def promoted_keep(*, path: Path, policy_name: str) -> None:
    """Mark a checkpoint as promoted (before its version exists); FileNotFoundError when it is gone."""
    keep_mark(path, PROMOTED, f"promoted to policy {policy_name}")


def promoted_release(*, path: Path) -> None:
    """Undo `promoted_keep` of a promotion that did not happen."""
    keep_unmark(path, PROMOTED)


def rollouts_keep(*, path: Path, policy_name: str) -> None:
    """Mark a directory published to rollouts (before rollouts can pick it up)."""
    keep_mark(path, ROLLOUTS, f"published to rollouts as {policy_name}")


def rollouts_release(*, versions: QuerySet[PolicyVersion]) -> int:
    """Unmark the directories of a run's published `versions` that rollouts can no longer load (see the
    module doc); how many were unmarked. A directory another of them still needs stays marked."""
    needed_q = (
        Q(is_active=True)
        | Q(episodes__status__in=Episode.ACTIVE)
        | Q(rollout_batches__status=RolloutBatch.Status.RUNNING)
    )
    needed = {v.model_dir() for v in versions.filter(needed_q).distinct()}
    released = 0
    for version in versions.exclude(pk__in=versions.filter(needed_q).values("pk")):
        path = version.model_dir()
        if path is not None and path not in needed and keep_unmark(path, ROLLOUTS):
            released += 1
    return released
