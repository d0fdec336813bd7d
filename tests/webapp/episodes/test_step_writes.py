"""A step costs one commit: the episode row's claim, its heartbeat and the step row travel together.

On PostgreSQL at durable settings every commit waits for a WAL flush, so the statements and commits
per step bound how many steps a worker can persist (bench/bench_step_persist.py measures it).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from agent_core.actions import Click
from agent_core.data.trajectory import StepRecord
from agent_core.env import Obs
from tests.factories import PNG_1X1, make_episode
from webapp.episodes.models import Episode, Step
from webapp.episodes.services import EpisodeStateError, step_record
from webapp.rollouts.services import _sink

EPISODE_TABLE = Episode._meta.db_table
STEP_TABLE = Step._meta.db_table


def _writes(queries: list[dict[str, str]]) -> list[str]:
    """The statements that wrote (transaction control left out)."""
    return [q["sql"] for q in queries if re.match(r"\s*(WITH|UPDATE|INSERT|DELETE)\b", q["sql"], re.I)]


def _touching(sql_list: list[str], verb: str, table: str) -> list[str]:
    return [s for s in sql_list if re.search(rf'{verb}\s+(INTO\s+)?"?{table}"?\b', s, re.I)]


def test_a_rollout_step_writes_the_episode_row_once(transactional_db):
    # The rollout sink used to commit the step, then commit a second UPDATE of the episode for its
    # heartbeat: two WAL flushes per step on a durable PostgreSQL.
    episode = make_episode(finish=False)
    Episode.objects.filter(pk=episode.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=5))
    record = StepRecord(
        index=0,
        observation=Obs(screenshot=PNG_1X1, width=1, height=1),
        thought="the button is at the top left",
        action=Click(x=1, y=1),
        action_text="click(start_box='(1,1)')",
        observed_at=timezone.now().timestamp(),
    )
    before = timezone.now()
    with CaptureQueriesContext(connection) as ctx:
        _sink(episode)(record)
    writes = _writes(ctx.captured_queries)
    assert len(_touching(writes, "UPDATE", EPISODE_TABLE)) == 1, writes
    assert len(_touching(writes, "INSERT", STEP_TABLE)) == 1, writes
    episode.refresh_from_db()
    assert episode.heartbeat_at is not None and episode.heartbeat_at >= before  # the step is a sign of life
    assert episode.num_steps == 1 and episode.steps.get().thought == "the button is at the top left"


def test_a_step_moves_the_heartbeat_of_its_episode(db):
    episode = make_episode(finish=False)
    Episode.objects.filter(pk=episode.pk).update(heartbeat_at=None)
    step_record(episode=episode, actor="agent", action={"type": "wait"})
    episode.refresh_from_db()
    assert episode.heartbeat_at is not None


def test_the_recorded_step_is_the_stored_row(db):
    episode = make_episode(finish=False, steps=2)
    step = step_record(
        episode=episode,
        actor="agent",
        action={"type": "click", "x": 3, "y": 4},
        action_text="click(start_box='(3,4)')",
        thought="third",
        screenshot_png=PNG_1X1,
        screen_size=(1280, 720),
        token_ids=[1, 2],
        info={"k": [1, "v"]},
    )
    assert (step.index, episode.num_steps) == (2, 3)
    stored = Step.objects.get(pk=step.pk)
    assert (stored.episode_id, stored.index, stored.thought) == (episode.pk, 2, "third")
    assert stored.action == {"type": "click", "x": 3, "y": 4} and stored.info == {"k": [1, "v"]}
    assert (stored.screen_width, stored.screen_height, stored.token_ids) == (1280, 720, [1, 2])
    assert stored.screenshot.name == step.screenshot.name and stored.screenshot.name.startswith("screens/")
    assert stored.created_at == step.created_at and stored.observed_at == step.observed_at
    # Absent JSON is SQL NULL, as the ORM writes it, not a JSON null.
    assert Step.objects.filter(pk=step.pk, proposed_action__isnull=True, logprobs__isnull=True).exists()
    assert not step._state.adding


def test_a_step_of_an_ended_episode_writes_nothing(db):
    episode = make_episode(finish=True, steps=1, reward=1.0)
    heartbeat = episode.heartbeat_at
    with pytest.raises(EpisodeStateError, match="is finished, not running"):
        step_record(episode=episode, actor="agent", action={"type": "wait"})
    episode.refresh_from_db()
    assert (episode.num_steps, episode.heartbeat_at, episode.steps.count()) == (1, heartbeat, 1)


@pytest.mark.postgres
def test_a_step_is_one_statement_on_postgresql(transactional_db):
    if connection.vendor != "postgresql":
        pytest.skip("needs DATABASE_URL=postgres://… (make test runs this pass on PostgreSQL)")
    episode = make_episode(finish=False)
    with CaptureQueriesContext(connection) as ctx:
        step_record(episode=episode, actor="agent", action={"type": "wait"}, screenshot_png=PNG_1X1)
    # One round trip, committed on its own (autocommit): no BEGIN, no separate COMMIT.
    assert len(ctx.captured_queries) == 1, [q["sql"] for q in ctx.captured_queries]
    assert connection.get_autocommit()
    episode.refresh_from_db()
    assert episode.num_steps == 1 and episode.steps.get().index == 0
