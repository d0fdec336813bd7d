"""Routing hand-built trajectories through a flywheel round: each lands where it should, nothing lost."""

from __future__ import annotations

import pytest

from tests.conftest import Personas, Queued
from tests.factories import make_task
from tests.webapp.datasets.conftest import GOOD, LOOP, build_episode, click
from webapp.catalog.models import TaskSuite
from webapp.datasets.models import DatasetMembership, DatasetVersion, FlywheelIteration, ImmutableVersionError
from webapp.datasets.rounds import (
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
    assert iteration.status == FlywheelIteration.Status.FINISHED and iteration.number == 1
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
    assert closed.number == 1 and closed.status == "finished"


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
    queued: Queued, django_capture_on_commit_callbacks
) -> None:
    from webapp.datasets.rounds import round_enqueue

    queued.down = ConnectionError("Connection refused")
    with (
        pytest.raises(RoundError, match="task queue is unavailable"),
        django_capture_on_commit_callbacks(execute=True),
    ):
        round_enqueue()
    assert not FlywheelIteration.objects.exists()


# --- review states and forks through a real round ------------------------------------------------


def test_every_review_state_routes_as_the_readme_says(personas: Personas) -> None:
    """The table in the README: a send-back (until an accept) and a corrected fork keep a trajectory out
    of SFT; an open review that was never sent back leaves the decision to the other checks."""
    from webapp.reviews.services import review_resubmit, review_start

    def reviewed(*verdicts: str, reviewer=None) -> Episode:  # type: ignore[no-untyped-def]
        episode = build_episode(steps=GOOD, reward=1.0, annotator=personas.annotator)
        review = review_assign(
            episode=episode, reviewer=reviewer or personas.reviewer, assigned_by=personas.admin
        )
        for verdict in verdicts:
            if verdict == "open":
                review_start(review=review, actor=personas.reviewer)
            elif verdict == "resubmit":
                review = review_resubmit(review=review, actor=personas.annotator, comment="fixed it")
            else:
                review = review_decide(
                    review=review,
                    actor=personas.admin,
                    verdict=verdict,
                    quality=4,
                    reason="wrong",
                    comment="redo step 1",
                )
        return episode

    unreviewed = build_episode(steps=GOOD, reward=1.0, annotator=personas.annotator)
    assigned = reviewed()
    in_progress = reviewed("open")
    accepted = reviewed("accept")
    rejected = reviewed("reject")
    sent_back = reviewed("send_back")
    resubmitted = reviewed("send_back", "resubmit")
    fixed_and_accepted = reviewed("send_back", "resubmit", "accept")
    split = reviewed("accept")  # a second reviewer sends it back
    review_decide(
        review=review_assign(episode=split, reviewer=personas.admin, assigned_by=personas.admin),
        actor=personas.admin, verdict="send_back", comment="step 2 is wrong",
    )  # fmt: skip
    # The sent-back demonstration's annotator forks it and demonstrates the rest again.
    original = reviewed("send_back")
    fork = build_episode(steps=GOOD, reward=1.0, annotator=personas.annotator)
    broken_fork = build_episode(steps=GOOD, annotator=personas.annotator, env_error=True)
    forked_unreviewed = build_episode(steps=GOOD, reward=1.0, annotator=personas.annotator)
    Episode.objects.filter(pk=fork.pk).update(forked_from=original, fork_step=1)
    Episode.objects.filter(pk=broken_fork.pk).update(forked_from=accepted, fork_step=1)
    later_fork = build_episode(steps=GOOD, reward=1.0, annotator=personas.annotator)
    Episode.objects.filter(pk=later_fork.pk).update(forked_from=forked_unreviewed, fork_step=2)

    flywheel_round_close(created_by=personas.admin)

    sft, ct = _members(SFT_DATASET), _members(CT_DATASET)
    assert set(sft) == {
        unreviewed.pk,
        assigned.pk,
        in_progress.pk,
        accepted.pk,
        fixed_and_accepted.pk,
        fork.pk,
        later_fork.pk,
    }
    assert set(ct) == {rejected.pk, sent_back.pk, resubmitted.pk, split.pk, original.pk, forked_unreviewed.pk}
    why = {pk: " ".join(v["reasons"]) for pk, v in ct.items()}
    for pk in (sent_back.pk, resubmitted.pk, split.pk, original.pk):
        assert "sent back by a reviewer" in why[pk], why[pk]
    assert f"superseded by its corrected fork, episode {fork.pk}" in why[original.pk]
    assert why[forked_unreviewed.pk] == f"superseded by its corrected fork, episode {later_fork.pk}"
    assert (ct[sent_back.pk]["checks"]["review"], ct[sent_back.pk]["checks"]["checker"]) == (False, True)


def test_sending_back_moves_an_episode_out_of_sft_in_the_next_round(personas: Personas) -> None:
    demo = build_episode(steps=GOOD, reward=1.0, annotator=personas.annotator)
    flywheel_round_close()
    assert set(_members(SFT_DATASET)) == {demo.pk}
    review = review_assign(episode=demo, reviewer=personas.reviewer, assigned_by=personas.admin)
    review_decide(review=review, actor=personas.reviewer, verdict="send_back", comment="step 1 is wrong")
    second = flywheel_round_close()
    assert demo.pk not in _members(SFT_DATASET) and demo.pk in _members(CT_DATASET)
    assert second.stats["moved"] == {"sft_to_ct": 1, "ct_to_sft": 0}
