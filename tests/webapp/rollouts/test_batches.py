"""Rollout batches: creation rules, rollout-wise enqueueing, idempotent claims, the reaper and re-runs.

Celery is replaced at one boundary (what services enqueue by name, webapp.common.queue); the real
worker path is covered by test_rollouts_real.py.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import override_settings
from django.utils import timezone

from tests.factories import make_task
from webapp.catalog.services import suite_get_or_create
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.rollouts.models import RolloutBatch
from webapp.rollouts.selectors import batch_progress, batch_task_table
from webapp.rollouts.services import (
    RolloutError,
    batch_advance,
    batch_cancel,
    batch_create,
    episode_run,
    rollouts_reap,
)

pytestmark = pytest.mark.django_db(transaction=True)

SPEC = {
    "id": "test/echo",
    "instruction": "Say hi",
    "platform": "desktop",
    "checker": {"checks": [{"probe": {"op": "answer"}, "metric": "exact_match", "expected": "hi"}]},
}


@pytest.fixture
def suite():
    s = suite_get_or_create(slug="mini", name="Mini")
    for i in range(3):
        t = make_task(
            slug=f"mini/t{i}", spec={**SPEC, "id": f"mini/t{i}"}, platform="desktop", env_profile="desktop"
        )
        t.suites.add(s)
    s.tasks.update(is_published=True)
    return s


@pytest.fixture
def oracle_policy():
    return PolicyVersion.objects.create(name="oracle-t", backend="oracle")


def test_batch_has_n_episodes_per_published_task_and_enqueues_up_to_concurrency(
    suite, oracle_policy, personas, enqueued
):
    batch = batch_create(
        suite=suite,
        policy_version=oracle_policy,
        episodes_per_task=2,
        concurrency=4,
        created_by=personas.researcher,
    )
    episodes = Episode.objects.filter(batch=batch)
    assert episodes.count() == 6
    assert sorted(episodes.values_list("seed", flat=True)) == [0, 0, 0, 1, 1, 1]
    assert len(enqueued) == 4 and len(set(enqueued)) == 4
    assert episodes.filter(queued_at__isnull=False).count() == 4
    # Nothing more goes out while four are in flight; advancing again is harmless.
    assert batch_advance(batch_id=batch.pk) == 0
    assert len(enqueued) == 4


def test_finished_episode_makes_room_for_the_next(suite, oracle_policy, personas, enqueued):
    batch = batch_create(
        suite=suite,
        policy_version=oracle_policy,
        episodes_per_task=1,
        concurrency=1,
        created_by=personas.researcher,
    )
    first = Episode.objects.get(pk=enqueued[0])
    Episode.objects.filter(pk=first.pk).update(
        status="finished", reward=1.0, finished_at=timezone.now(), queued_at=None
    )
    assert batch_advance(batch_id=batch.pk) == 1
    assert len(enqueued) == 2 and enqueued[1] != enqueued[0]


def test_batch_rules(suite, oracle_policy, personas, enqueued):
    empty = suite_get_or_create(slug="empty", name="Empty")
    with pytest.raises(RolloutError, match="no published tasks"):
        batch_create(suite=empty, policy_version=oracle_policy, episodes_per_task=1, concurrency=1,
                     created_by=personas.researcher)  # fmt: skip
    human = PolicyVersion.objects.create(name="h", backend="human")
    with pytest.raises(RolloutError, match="human policy"):
        batch_create(suite=suite, policy_version=human, episodes_per_task=1, concurrency=1,
                     created_by=personas.researcher)  # fmt: skip
    draft = make_task(slug="mini/draft", spec=SPEC)
    with pytest.raises(RolloutError, match="not in suite mini: mini/draft"):
        batch_create(suite=suite, policy_version=oracle_policy, episodes_per_task=1, concurrency=1,
                     created_by=personas.researcher, tasks=[draft])  # fmt: skip
    draft.suites.add(suite)
    with pytest.raises(RolloutError, match="not published"):
        batch_create(suite=suite, policy_version=oracle_policy, episodes_per_task=1, concurrency=1,
                     created_by=personas.researcher, tasks=[draft])  # fmt: skip
    with pytest.raises(RolloutError, match="unknown agent setting"):
        batch_create(suite=suite, policy_version=oracle_policy, episodes_per_task=1, concurrency=1,
                     created_by=personas.researcher, config={"temperature": 2})  # fmt: skip
    assert not RolloutBatch.objects.exists()


def test_a_second_delivery_of_an_episode_does_nothing(suite, oracle_policy, personas, enqueued):
    batch_create(suite=suite, policy_version=oracle_policy, episodes_per_task=1, concurrency=1,
                 created_by=personas.researcher)  # fmt: skip
    episode = Episode.objects.get(pk=enqueued[0])
    Episode.objects.filter(pk=episode.pk).update(
        status="running", started_at=timezone.now(), heartbeat_at=timezone.now()
    )
    assert episode_run(episode_id=episode.pk, worker="w2") is None
    assert Episode.objects.get(pk=episode.pk).worker == ""


@override_settings(ROLLOUT_STALE_SECONDS=30)
def test_reaper_ends_a_silent_episode_once_and_reruns_it(suite, oracle_policy, personas, enqueued):
    batch = batch_create(suite=suite, policy_version=oracle_policy, episodes_per_task=1, concurrency=3,
                         created_by=personas.researcher)  # fmt: skip
    silent = Episode.objects.get(pk=enqueued[0])
    old = timezone.now() - timedelta(seconds=60)
    Episode.objects.filter(pk=silent.pk).update(
        status="running", started_at=old, heartbeat_at=old, worker="w1"
    )
    assert rollouts_reap()["reaped"] == 1
    assert rollouts_reap()["reaped"] == 0  # safe to run twice
    silent.refresh_from_db()
    assert silent.status == "failed" and silent.env_error and silent.reward is None
    assert "w1 went silent" in silent.error
    retry = Episode.objects.get(retry_of=silent)
    assert (retry.attempt, retry.seed, retry.task_id, retry.batch_id) == (
        2,
        silent.seed,
        silent.task_id,
        batch.pk,
    )
    assert retry.pk in enqueued  # the freed slot went to the re-run at once
    progress = batch_progress(batch=batch)
    assert progress.total == 3 and progress.env_errors == 1 and progress.finished == 0


@override_settings(ROLLOUT_STALE_SECONDS=30)
def test_reruns_stop_at_max_attempts(suite, oracle_policy, personas, enqueued):
    batch = batch_create(suite=suite, policy_version=oracle_policy, episodes_per_task=1, concurrency=1,
                         created_by=personas.researcher)  # fmt: skip
    RolloutBatch.objects.filter(pk=batch.pk).update(max_attempts=2)
    old = timezone.now() - timedelta(seconds=60)
    for _ in range(2):
        ep = Episode.objects.filter(batch=batch, status="pending", queued_at__isnull=False).get()
        Episode.objects.filter(pk=ep.pk).update(status="running", started_at=old, heartbeat_at=old)
        rollouts_reap()
    task_rows = {r["task__slug"]: r for r in batch_task_table(batch=batch)}
    failed_task = Episode.objects.filter(batch=batch, attempt=2).get().task.slug
    assert task_rows[failed_task]["env_errors"] == 2
    assert not Episode.objects.filter(batch=batch, attempt=3).exists()
    # The given-up episode counts as done (with an env error), never as a success or a failure.
    progress = batch_progress(batch=batch)
    assert progress.finished == 1 and progress.successes == 0


@override_settings(ROLLOUT_REQUEUE_SECONDS=5)
def test_queued_episode_nobody_started_is_enqueued_again(suite, oracle_policy, personas, enqueued):
    batch_create(suite=suite, policy_version=oracle_policy, episodes_per_task=1, concurrency=1,
                 created_by=personas.researcher)  # fmt: skip
    Episode.objects.filter(pk=enqueued[0]).update(queued_at=timezone.now() - timedelta(seconds=60))
    assert rollouts_reap()["requeued"] == 1
    assert enqueued.count(enqueued[0]) == 2


def test_cancel_drops_pending_and_finishes_batch(suite, oracle_policy, personas, enqueued):
    batch = batch_create(suite=suite, policy_version=oracle_policy, episodes_per_task=2, concurrency=1,
                         created_by=personas.researcher)  # fmt: skip
    assert batch_cancel(batch=batch) == 6
    batch.refresh_from_db()
    assert batch.status == "cancelled"
    assert batch_advance(batch_id=batch.pk) == 0


@override_settings(SANDBOX_HOST_TOKEN="t" * 20)
def test_no_free_sandbox_gives_the_episode_back_instead_of_failing_it(
    suite, oracle_policy, personas, enqueued
):
    batch_create(suite=suite, policy_version=oracle_policy, episodes_per_task=1, concurrency=1,
                 created_by=personas.researcher)  # fmt: skip
    episode = episode_run(episode_id=enqueued[0], worker="w1")
    assert episode is not None
    episode.refresh_from_db()
    assert episode.status == "pending" and not episode.env_error and episode.queued_at is not None
    assert enqueued.later == [(episode.pk,)]


def test_a_games_row_shows_its_mean_raw_score_beside_the_reward(oracle_policy, personas, enqueued):
    """A game's reward is its score normalised; the batch's table gives the raw score beside it."""
    from agent_core.suites import games
    from webapp.catalog.models import Task

    doc = games.task_doc("snake")
    game = make_task(slug=doc["id"], title=doc["title"], platform="browser", spec=doc)
    other = make_task(slug="miniwob/click-button", title="Click")
    suite = suite_get_or_create(slug="mixed", name="Mixed")
    suite.tasks.add(game, other)
    Task.objects.filter(pk__in=[game.pk, other.pk]).update(is_published=True)
    batch = batch_create(suite=suite, policy_version=oracle_policy, episodes_per_task=2, concurrency=4,
                         created_by=personas.researcher)  # fmt: skip
    for n, episode in enumerate(Episode.objects.filter(batch=batch, task=game).order_by("pk")):
        details = [{"check": "game", "metric": "game_score", "score": 1.0, "artifact": 10 + 2 * n}]
        Episode.objects.filter(pk=episode.pk).update(
            status="finished", reward=1.0, check_details=details, finished_at=timezone.now()
        )
    rows = {r["task__slug"]: r for r in batch_task_table(batch=batch)}
    assert rows["games/snake"]["raw_score"] == 11.0
    assert rows["miniwob/click-button"]["raw_score"] is None
