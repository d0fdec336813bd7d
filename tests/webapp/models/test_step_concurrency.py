"""Concurrent writers of one episode get unique, gapless step indices (the row lock queues them)."""

from __future__ import annotations

import threading

from django.db import connection

from tests.factories import make_episode
from webapp.episodes.models import Episode
from webapp.episodes.services import step_record


def test_two_writers_of_one_episode_get_gapless_indices(transactional_db):
    episode = make_episode(finish=False)
    errors: list[BaseException] = []

    def writer(name: str) -> None:
        try:
            for i in range(15):
                mine = Episode.objects.get(pk=episode.pk)
                step_record(episode=mine, actor="agent", action={"type": "wait"}, thought=f"{name}-{i}")
        except BaseException as exc:  # noqa: BLE001 (reported below)
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=writer, args=(n,)) for n in ("a", "b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert errors == []
    indices = sorted(episode.steps.values_list("index", flat=True))
    assert indices == list(range(30))
    episode.refresh_from_db()
    assert episode.num_steps == 30
