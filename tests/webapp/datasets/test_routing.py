"""Routing hand-built trajectories through a flywheel round: each lands where it should, nothing lost."""

from __future__ import annotations

import pytest

from tests.conftest import Personas
from tests.factories import make_task
from tests.webapp.datasets.conftest import GOOD, LOOP, build_episode, click
from webapp.catalog.models import TaskSuite
from webapp.datasets.models import DatasetMembership, DatasetVersion, FlywheelIteration, ImmutableVersionError
from webapp.datasets.routing import (
    CT_DATASET,
    SFT_DATASET,
    RoundError,
    flywheel_round_close,
    flywheel_round_start,
    flywheel_rounds_reap,
)
from webapp.episodes.models import Episode
from webapp.reviews.services import review_assign, review_decide

pytestmark = pytest.mark.django_db


def _members(name: str) -> dict[int, dict]:
    version = DatasetVersion.objects.filter(dataset__name=name).order_by("-number").first()
    return dict(version.memberships.values_list("episode_id", "validator")) if version else {}


def _reject(episode: Episode, personas: Personas) -> None:
    review = review_assign(episode=episode, reviewer=personas.reviewer, assigned_by=personas.admin)
    review_decide(review=review, actor=personas.reviewer, verdict="reject", reason="clicked the wrong thing")


def test_each_kind_of_trajectory_lands_where_it_should(personas: Personas) -> None:
    good = build_episode(steps=GOOD, reward=1.0)
    failed = build_episode(steps=GOOD, reward=0.0)
    looping = build_episode(steps=[*LOOP, {"action": {"type": "finished", "content": ""}}], reward=1.0)
    over = build_episode(steps=[{"action": click(i)} for i in range(7)], reward=1.0)  # budget 6
    unparsed = build_episode(steps=[{"action": click(1)}, {"action": None, "invalid": "no Action: line"}])
    rejected = build_episode(steps=GOOD, reward=1.0, annotator=personas.annotator)
    _reject(rejected, personas)
    broken = build_episode(steps=GOOD, env_error=True)

    iteration = flywheel_round_close(created_by=personas.admin)

    sft, ct = _members(SFT_DATASET), _members(CT_DATASET)
    assert set(sft) == {good.pk}
    assert set(ct) == {failed.pk, looping.pk, over.pk, unparsed.pk, rejected.pk}
    assert broken.pk not in sft and broken.pk not in ct  # an infrastructure failure says nothing
    assert sft[good.pk]["v"] == 1 and sft[good.pk]["reasons"] == []
    reasons = {pk: " ".join(v["reasons"]) for pk, v in ct.items()}
    assert "checker" in reasons[failed.pk]
    assert "loop" in reasons[looping.pk]
    assert "budget" in reasons[over.pk]
    assert "parse" in reasons[unparsed.pk]
    assert "reject" in reasons[rejected.pk]
    assert ct[failed.pk]["checks"]["checker"] is False
    assert ct[rejected.pk]["checks"]["checker"] is True  # the reject overrides a checker's success

    stats = iteration.stats
    assert iteration.status == FlywheelIteration.Status.CLOSED and iteration.number == 1
    assert stats["episodes"] == 6 and stats["v1"] == 1
    assert stats["p_v1"] == pytest.approx(1 / 6, abs=1e-4)
    assert stats["by_source"]["human"] == {"n": 1, "v1": 0, "p_v1": 0.0}
    assert stats["by_source"]["agent"]["n"] == 5
    assert stats["excluded"]["env_error"] == 1
    assert stats["failed_checks"]["no_loop"] == 1 and stats["failed_checks"]["review"] == 1
    assert stats["total"] == {"episodes": 6, "sft": 1, "ct": 5}


def test_a_later_review_moves_an_episode_and_the_round_says_so(personas: Personas) -> None:
    demo = build_episode(steps=GOOD, reward=1.0, annotator=personas.annotator)
    first = flywheel_round_close()
    assert set(_members(SFT_DATASET)) == {demo.pk}
    v1 = DatasetVersion.objects.get(dataset__name=SFT_DATASET, number=1)

    _reject(demo, personas)
    newer = build_episode(steps=GOOD, reward=1.0)
    second = flywheel_round_close()

    assert second.number == first.number + 1
    assert set(_members(SFT_DATASET)) == {newer.pk}
    assert set(_members(CT_DATASET)) == {demo.pk}
    assert second.stats["moved"] == {"sft_to_ct": 1, "ct_to_sft": 0}
    assert second.stats["episodes"] == 1  # only `newer` finished inside round 2's window
    v2 = DatasetVersion.objects.get(dataset__name=SFT_DATASET, number=2)
    assert v2.parent_id == v1.pk and v2.iteration_id == second.pk
    assert v2.lineage["added"] == 1 and v2.lineage["removed"] == 1 and v2.lineage["round"] == 2
    # v1 still holds exactly what it held: versions never change.
    assert list(v1.memberships.values_list("episode_id", flat=True)) == [demo.pk]


def test_a_written_version_never_changes(personas: Personas) -> None:
    episode = build_episode(steps=GOOD, reward=1.0)
    flywheel_round_close()
    version = DatasetVersion.objects.get(dataset__name=SFT_DATASET, number=1)
    other = build_episode(steps=GOOD, reward=1.0)
    with pytest.raises(ImmutableVersionError):
        DatasetMembership.objects.create(version=version, episode=other)
    with pytest.raises(ImmutableVersionError):
        version.memberships.get(episode=episode).delete()
    version.notes = "edited"
    with pytest.raises(ImmutableVersionError):
        version.save()
    with pytest.raises(ImmutableVersionError):
        version.delete()
    fresh = DatasetVersion.objects.get(pk=version.pk)
    assert fresh.notes != "edited" and fresh.num_episodes == 1


def test_stats_per_suite_and_task(personas: Personas) -> None:
    suite = TaskSuite.objects.create(slug="forms", name="Forms")
    task = make_task(platform="desktop", env_profile="desktop", max_steps=6)
    task.suites.add(suite)
    build_episode(task=task, steps=GOOD, reward=1.0)
    build_episode(task=task, steps=GOOD, reward=0.0)
    iteration = flywheel_round_close()
    assert iteration.stats["by_suite"]["forms"] == {"n": 2, "v1": 1, "p_v1": 0.5}
    assert iteration.stats["by_task"][task.slug]["n"] == 2


def test_only_one_round_closes_at_a_time_and_a_dead_one_is_reaped(personas: Personas) -> None:
    build_episode(steps=GOOD, reward=1.0)
    claimed = flywheel_round_start(created_by=personas.admin)
    with pytest.raises(RoundError, match="is closing now"):
        flywheel_round_start(created_by=personas.admin)
    # Its job died: once silent long enough the reaper frees the flywheel, and nothing was written.
    FlywheelIteration.objects.filter(pk=claimed.pk).update(heartbeat_at="2000-01-01T00:00:00Z")
    assert flywheel_rounds_reap() == 1
    assert not DatasetVersion.objects.exists()
    closed = flywheel_round_close()
    assert closed.number == 1 and closed.status == "closed"


def test_closing_a_closed_round_again_changes_nothing(personas: Personas) -> None:
    build_episode(steps=GOOD, reward=1.0)
    iteration = flywheel_round_close()
    again = flywheel_round_close(iteration=iteration)
    assert again.pk == iteration.pk
    assert DatasetVersion.objects.count() == 2  # one SFT and one CT, not four


def test_a_round_with_no_episodes_writes_empty_versions() -> None:
    iteration = flywheel_round_close()
    assert iteration.stats["episodes"] == 0 and iteration.stats["p_v1"] is None
    assert DatasetVersion.objects.get(dataset__name=SFT_DATASET).num_episodes == 0


def test_a_round_asked_for_while_the_broker_is_down_is_not_left_claimed(
    monkeypatch: pytest.MonkeyPatch, django_capture_on_commit_callbacks
) -> None:
    from webapp.datasets import tasks
    from webapp.datasets.routing import round_enqueue

    def down(*args: object, **kwargs: object) -> None:
        raise ConnectionError("Connection refused")

    monkeypatch.setattr(tasks.flywheel_round_task, "delay", down)
    with (
        pytest.raises(RoundError, match="task queue is unavailable"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        round_enqueue()
    assert not FlywheelIteration.objects.exists()
