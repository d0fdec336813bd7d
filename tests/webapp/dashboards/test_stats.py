"""Success per task and policy over time, and annotation throughput, from rows built through the ORM."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from tests.conftest import PASSWORD, Personas
from tests.factories import make_episode, make_task
from tests.webapp.dashboards.conftest import ended
from webapp.accounts.roles import Role
from webapp.accounts.services import user_create
from webapp.dashboards.stats import (
    MAX_BUCKETS,
    annotation_throughput,
    bucket_labels,
    success_by_policy_and_task,
    success_over_time,
)
from webapp.episodes.services import episode_abort, episode_create, episode_start
from webapp.policies.models import PolicyVersion
from webapp.reviews.services import review_assign, review_decide

pytestmark = pytest.mark.django_db

NOW = datetime(2025, 3, 10, 15, 30, tzinfo=UTC)


def by(rows: list[dict], key: str) -> dict[str, dict]:
    return {r[key]: r for r in rows}


def test_no_episodes_gives_empty_tables_and_every_bucket() -> None:
    data = success_over_time(bucket="day", count=7, now=NOW)
    assert data["tasks"] == [] and data["policies"] == []
    assert data["total"]["attempts"] == 0 and data["total"]["rate"] is None
    assert data["total"]["rate_series"] == [None] * 7
    assert data["labels"][0] == "2025-03-04T00:00:00+00:00"
    assert data["labels"][-1] == "2025-03-10T00:00:00+00:00"


def test_env_error_is_counted_apart_never_as_a_failure() -> None:
    task = make_task(slug="t/one")
    ended(task, at=NOW - timedelta(hours=1), reward=1.0)
    ended(task, at=NOW - timedelta(hours=1), reward=0.0)
    ended(task, at=NOW - timedelta(hours=1), env_error=True)
    ended(task, at=NOW - timedelta(hours=1), env_error=True)
    row = success_over_time(count=1, now=NOW)["tasks"][0]
    assert (row["attempts"], row["successes"], row["env_errors"], row["rate"]) == (2, 1, 2, 0.5)


def test_partial_reward_fails_and_aborted_or_running_episodes_are_not_attempts() -> None:
    task = make_task(slug="t/partial")
    ended(task, at=NOW - timedelta(minutes=5), reward=0.99)
    aborted = episode_create(task=task, source="agent")
    episode_start(episode=aborted)
    episode_abort(episode=aborted, reason="stopped by a researcher")
    aborted.__class__.objects.filter(pk=aborted.pk).update(finished_at=NOW - timedelta(minutes=4))
    make_episode(task=task, steps=1, finish=False)  # running: not ended, not counted
    row = success_over_time(count=1, now=NOW)["tasks"][0]
    assert (row["attempts"], row["successes"], row["aborted"], row["env_errors"]) == (1, 0, 1, 0)
    assert row["rate"] == 0.0


def test_day_buckets_put_episodes_on_the_utc_day_they_ended() -> None:
    task = make_task(slug="t/days")
    ended(task, at=datetime(2025, 3, 10, 0, 0, 1, tzinfo=UTC), reward=1.0)
    ended(task, at=datetime(2025, 3, 10, 9, 0, tzinfo=UTC), reward=0.0)
    ended(task, at=datetime(2025, 3, 8, 23, 59, 59, tzinfo=UTC), reward=1.0)
    ended(task, at=datetime(2025, 3, 3, 23, 0, tzinfo=UTC), reward=1.0)  # before the 7-day window
    data = success_over_time(bucket="day", count=7, now=NOW)
    row = by(data["tasks"], "task")["t/days"]
    assert row["attempts_series"] == [0, 0, 0, 0, 1, 0, 2]
    assert row["rate_series"] == [None, None, None, None, 1.0, None, 0.5]
    assert row["attempts"] == 3 and row["successes"] == 2


def test_hour_buckets() -> None:
    task = make_task(slug="t/hours")
    ended(task, at=datetime(2025, 3, 10, 15, 10, tzinfo=UTC), reward=1.0)
    ended(task, at=datetime(2025, 3, 10, 13, 59, tzinfo=UTC), reward=0.0)
    ended(task, at=datetime(2025, 3, 10, 13, 0, tzinfo=UTC), env_error=True)
    data = success_over_time(bucket="hour", count=3, now=NOW)
    assert data["labels"] == [
        "2025-03-10T13:00:00+00:00",
        "2025-03-10T14:00:00+00:00",
        "2025-03-10T15:00:00+00:00",
    ]
    row = data["tasks"][0]
    assert row["attempts_series"] == [1, 0, 1]
    assert row["successes_series"] == [0, 0, 1]
    assert row["env_errors_series"] == [1, 0, 0]


def test_per_policy_version_and_the_source_filter(personas: Personas) -> None:
    task, other = make_task(slug="t/a"), make_task(slug="t/b")
    good = PolicyVersion.objects.create(name="good", backend="oracle")
    weak = PolicyVersion.objects.create(name="weak", backend="noop")
    at = NOW - timedelta(hours=2)
    ended(task, at=at, reward=1.0, policy=good)
    ended(other, at=at, reward=1.0, policy=good)
    ended(task, at=at, reward=0.0, policy=weak)
    ended(task, at=at, env_error=True, policy=weak)
    ended(task, at=at, reward=1.0, annotator=personas.annotator)  # a human demonstration: no policy
    data = success_over_time(count=1, now=NOW)
    policies = by(data["policies"], "policy")
    assert (policies["good"]["attempts"], policies["good"]["rate"]) == (2, 1.0)
    assert (policies["weak"]["attempts"], policies["weak"]["rate"], policies["weak"]["env_errors"]) == (
        1,
        0.0,
        1,
    )
    assert by(data["tasks"], "task")["t/a"]["attempts"] == 3
    agents = success_over_time(count=1, source="agent", now=NOW)
    assert by(agents["tasks"], "task")["t/a"]["attempts"] == 2
    assert success_over_time(count=1, source="human", now=NOW)["policies"] == []


def test_outcome_counts_per_task_and_policy_for_the_counters() -> None:
    task = make_task(slug="t/c")
    p = PolicyVersion.objects.create(name="p", backend="oracle")
    for reward in (1.0, 1.0, 0.0):
        ended(task, reward=reward, policy=p)
    ended(task, env_error=True, policy=p)
    rows = success_by_policy_and_task()
    assert rows == [{"task": "t/c", "policy": "p", "success": 2, "failure": 1, "env_error": 1, "aborted": 0}]


def test_bucket_arguments_are_checked() -> None:
    with pytest.raises(ValueError, match="unknown bucket"):
        bucket_labels(bucket="week", count=2, now=NOW)
    with pytest.raises(ValueError, match="count"):
        success_over_time(count=MAX_BUCKETS + 1, now=NOW)
    with pytest.raises(ValueError, match="unknown source"):
        success_over_time(count=1, source="robot", now=NOW)


# --- annotation ----------------------------------------------------------------------------------


def test_annotation_throughput_per_annotator_and_reviewer(personas: Personas) -> None:
    frank = user_create(username="frank", password=PASSWORD, roles=[Role.ANNOTATOR, Role.REVIEWER])
    task = make_task(slug="t/demo")
    alice = personas.annotator
    day = NOW - timedelta(days=1)
    a1 = ended(task, at=day, started=day - timedelta(seconds=60), reward=1.0, annotator=alice, steps=3)
    a2 = ended(task, at=NOW - timedelta(minutes=1), started=NOW - timedelta(minutes=3), reward=0.0,
               annotator=alice, steps=1)  # fmt: skip
    ended(task, at=NOW - timedelta(days=30), reward=1.0, annotator=alice, steps=5)  # outside the window
    ended(task, at=NOW - timedelta(minutes=1), reward=1.0, annotator=frank, source="mixed", steps=2)
    ended(task, at=NOW - timedelta(minutes=1), reward=1.0, steps=4)  # an agent rollout: not a demonstration
    ended(
        task, at=NOW - timedelta(minutes=1), env_error=True, annotator=frank, source="human"
    )  # not finished

    bob = personas.reviewer
    for episode, verdict, kwargs in ((a1, "accept", {"quality": 4}), (a2, "send_back", {"comment": "redo"})):
        review = review_assign(episode=episode, reviewer=bob, assigned_by=personas.admin)
        review_decide(review=review, actor=bob, verdict=verdict, **kwargs)
    second = review_assign(episode=a1, reviewer=frank, assigned_by=personas.admin)
    review_decide(review=second, actor=frank, verdict="reject", reason="wrong field")

    # Decisions are dated now (real time): measure from a moment after them.
    from django.utils import timezone

    data = annotation_throughput(days=3, now=timezone.now() + timedelta(seconds=1))
    demos_now = annotation_throughput(days=3, now=NOW)
    annotators = by(demos_now["annotators"], "annotator")
    assert set(annotators) == {"alice", "frank"}
    assert (annotators["alice"]["demonstrations"], annotators["alice"]["steps"]) == (2, 4)
    assert annotators["alice"]["median_seconds"] == 90.0  # median of 60 s and 120 s
    assert annotators["alice"]["per_day"] == [0, 1, 1]
    assert annotators["frank"]["demonstrations"] == 1
    assert demos_now["totals"]["demonstrations"] == 3 and demos_now["totals"]["steps"] == 6

    reviewers = by(data["reviewers"], "reviewer")
    assert {k: reviewers["bob"][k] for k in ("decisions", "accepted", "rejected", "sent_back")} == {
        "decisions": 2, "accepted": 1, "rejected": 0, "sent_back": 1,
    }  # fmt: skip
    assert reviewers["bob"]["per_day"][-1] == 2
    assert reviewers["frank"]["rejected"] == 1
    # bob accepted a1, frank rejected it: one shared trajectory, full disagreement.
    pairs = data["agreement"]["reviews"]["pairs"]
    assert [(p["first"], p["second"], p["n"], p["kappa"]["observed"]) for p in pairs] == [
        ("bob", "frank", 1, 0.0)
    ]


def test_annotation_throughput_with_nothing_recorded() -> None:
    data = annotation_throughput(days=5, now=NOW)
    assert data["annotators"] == [] and data["reviewers"] == []
    assert data["totals"] == {"demonstrations": 0, "steps": 0, "decisions": 0}
    assert data["agreement"]["reviews"] == {"pairs": [], "overall": None}
    assert len(data["labels"]) == 5
