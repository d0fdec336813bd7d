"""Writes of what a rollout episode waits for, where its own row cannot say it (`EpisodeWait`).

A pending episode waits for its turn in the batch (not queued yet) or for a free rollout worker (queued):
both read off the episode (`selectors.episode_waits`). What is noted here is what only the worker
knows: that the episode was given back to the queue because no sandbox of its profile was free (and
the host's words why), or that no policy server serves its version yet. The batch page shows it beside
the episode; a note ends when the episode has its sandbox.
"""

from __future__ import annotations

from django.utils import timezone

from webapp.rollouts.models import EpisodeWait

MAX_DETAIL = 2000


def episode_wait_note(*, episode_id: int, kind: str, detail: str) -> None:
    """Say that the episode waits for `kind` (EpisodeWait.Kind) and why; a wait of the same kind keeps
    when it began."""
    if kind not in EpisodeWait.Kind.values:
        raise ValueError(f"unknown wait {kind!r}; valid: {', '.join(EpisodeWait.Kind.values)}")
    detail = detail.replace("\x00", "\\x00")[:MAX_DETAIL]
    updated = EpisodeWait.objects.filter(episode_id=episode_id, kind=kind).update(detail=detail)
    if not updated:
        EpisodeWait.objects.update_or_create(
            episode_id=episode_id, defaults={"kind": kind, "detail": detail, "since": timezone.now()}
        )


def episode_wait_end(*, episode_id: int) -> None:
    """The episode waits for nothing the worker noted (it has its sandbox)."""
    EpisodeWait.objects.filter(episode_id=episode_id).delete()
