"""The write services: state machines, immutability, atomic claims, content-addressed files."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from tests.factories import PNG_1X1, make_episode, make_task
from webapp.catalog.models import Task
from webapp.catalog.services import suite_get_or_create
from webapp.datasets.models import Dataset, DatasetMembership, DatasetVersion, ImmutableVersionError
from webapp.datasets.services import dataset_version_create
from webapp.episodes.models import Episode
from webapp.episodes.services import (
    EpisodeStateError,
    episode_create,
    episode_finish,
    episode_start,
    step_record,
    task_stats_refresh,
)
from webapp.reviews.models import Review
from webapp.reviews.services import ReviewTransitionError, review_assign, review_transition
from webapp.sandboxes.models import Lease, Sandbox, SandboxHost
from webapp.sandboxes.services import SandboxUnavailable, lease_acquire, leases_expire

pytestmark = pytest.mark.django_db


# --- episodes and steps -----------------------------------------------------------------------------
def test_steps_are_numbered_in_order_and_counted(personas):
    episode = make_episode(annotator=personas.annotator, steps=4, reward=1.0)
    assert list(episode.steps.values_list("index", flat=True)) == [0, 1, 2, 3]
    assert episode.num_steps == 4


def test_a_step_cannot_be_added_to_an_episode_that_is_not_running(personas):
    episode = make_episode(annotator=personas.annotator, reward=1.0)
    with pytest.raises(EpisodeStateError, match="not running"):
        step_record(episode=episode, actor="human", action={"type": "wait"})
    assert episode.steps.count() == 0


def test_a_step_needs_a_structured_action(personas):
    episode = make_episode(annotator=personas.annotator, finish=False)
    with pytest.raises(ValueError, match="structured action"):
        step_record(episode=episode, actor="human", action="pyautogui.click(1, 2)")  # type: ignore[arg-type]


def test_a_step_whose_model_text_holds_nul_characters_is_recorded(personas):
    # A sampling policy can emit a NUL byte; PostgreSQL text and jsonb refuse it, which aborted the
    # episode. The step is kept with a stand-in character; the token ids stay exact.
    episode = make_episode(annotator=personas.annotator, finish=False)
    step = step_record(
        episode=episode,
        actor="agent",
        action={"type": "type", "content": "a\x00b"},
        action_text="type(content='a\x00b')",
        thought="th\x00ink",
        raw_output="Thought: th\x00ink\nAction: type(content='a\x00b')",
        invalid_reason="",
        token_ids=[0, 1, 2],
        info={"note\x00": ["x\x00", 3]},
    )
    step.refresh_from_db()
    assert step.thought == "th\ufffdink" and step.action == {"type": "type", "content": "a\ufffdb"}
    assert step.raw_output == "Thought: th\ufffdink\nAction: type(content='a\ufffdb')"
    assert step.action_text == "type(content='a\ufffdb')" and step.token_ids == [0, 1, 2]
    assert step.info == {"note\ufffd": ["x\ufffd", 3]}


def test_screenshots_are_content_addressed_files(personas):
    episode = make_episode(annotator=personas.annotator, steps=2, reward=1.0)
    first, second = episode.steps.order_by("index")
    assert first.screenshot.name == second.screenshot.name  # same bytes, one file
    assert first.screenshot.name.startswith("screens/") and first.screenshot.name.endswith(".png")
    path = Path(settings.MEDIA_ROOT) / first.screenshot.name
    assert path.read_bytes() == PNG_1X1
    assert not list(path.parent.glob(".tmp-*"))


def test_an_episode_starts_once(personas):
    episode = episode_create(task=make_task(), source="agent")
    episode_start(episode=episode)
    with pytest.raises(EpisodeStateError):
        episode_start(episode=episode)


def test_env_error_finishes_without_reward_and_is_not_a_failure():
    episode = episode_create(task=make_task(), source="agent")
    episode_start(episode=episode)
    with pytest.raises(ValueError, match="no reward"):
        episode_finish(episode=episode, reward=0.0, env_error=True)
    episode_finish(episode=episode, reward=None, env_error=True, error="sandbox died")
    assert (episode.status, episode.reward, episode.env_error) == (Episode.Status.FAILED, None, True)
    task_stats_refresh()
    episode.task.refresh_from_db()
    assert episode.task.attempts == 0  # infrastructure failures never count against the agent


def test_task_stats_roll_up_from_finished_episodes():
    task = make_task()
    for reward in (1.0, 0.0, 1.0):
        make_episode(task=task, reward=reward)
    make_episode(task=task, finish=False)
    assert task_stats_refresh() >= 1
    task.refresh_from_db()
    assert (task.attempts, task.successes) == (3, 2)


def test_task_slug_is_validated_and_suites_written_with_it():
    suite = suite_get_or_create(slug="s", name="S")
    task = make_task(slug="suite-a/sub.task_1", suites=[suite])
    assert list(task.suites.all()) == [suite]
    with pytest.raises(ValidationError):
        make_task(slug="Bad Slug!")
    assert not Task.objects.filter(slug="Bad Slug!").exists()


# --- reviews ------------------------------------------------------------------------------------------
def test_review_state_machine_records_history(personas):
    episode = make_episode(annotator=personas.annotator, steps=1, reward=1.0)
    review = review_assign(episode=episode, reviewer=personas.reviewer, assigned_by=personas.admin)
    review = review_transition(review=review, actor=personas.reviewer, to_state="in_progress")
    review = review_transition(review=review, actor=personas.reviewer, to_state="accepted", quality=4)
    assert review.decided_at is not None and review.quality == 4
    assert [(e.from_state, e.to_state) for e in review.events.all()] == [
        ("", "assigned"),
        ("assigned", "in_progress"),
        ("in_progress", "accepted"),
    ]
    with pytest.raises(ReviewTransitionError, match="from accepted to rejected"):
        review_transition(review=review, actor=personas.reviewer, to_state="rejected", reject_reason="x")


def test_rejection_needs_a_reason(personas):
    episode = make_episode(annotator=personas.annotator, reward=1.0)
    review = review_assign(episode=episode, reviewer=personas.reviewer, assigned_by=personas.admin)
    with pytest.raises(ReviewTransitionError, match="needs a reason"):
        review_transition(review=review, actor=personas.reviewer, to_state="rejected", reject_reason="  ")
    review.refresh_from_db()
    assert review.state == Review.State.ASSIGNED and review.events.count() == 1


def test_only_reviewers_can_be_assigned(personas):
    episode = make_episode(annotator=personas.annotator, reward=1.0)
    with pytest.raises(PermissionError):
        review_assign(episode=episode, reviewer=personas.annotator, assigned_by=personas.admin)


def test_running_episode_cannot_be_reviewed(personas):
    episode = make_episode(annotator=personas.annotator, finish=False)
    with pytest.raises(ReviewTransitionError, match="has not ended"):
        review_assign(episode=episode, reviewer=personas.reviewer, assigned_by=personas.admin)


# --- datasets ------------------------------------------------------------------------------------------
def test_dataset_versions_are_numbered_sealed_and_carry_lineage(personas):
    dataset = Dataset.objects.create(name="sft-main", kind="sft")
    e1 = make_episode(annotator=personas.annotator, steps=2, reward=1.0)
    e2 = make_episode(steps=3, reward=1.0)
    v1 = dataset_version_create(dataset=dataset, episodes=[e1])
    v2 = dataset_version_create(dataset=dataset, episodes=[e1, e2, e2], parent=v1)
    assert (v1.number, v2.number) == (1, 2)
    assert (v2.num_episodes, v2.num_steps) == (2, 5)
    assert v2.lineage["annotators"] == [personas.annotator.pk] and v2.lineage["parent"] == v1.pk
    assert v1.is_sealed and v2.is_sealed


def test_a_sealed_version_never_changes(personas):
    dataset = Dataset.objects.create(name="ct-main", kind="ct")
    episode = make_episode(reward=0.0)
    version = dataset_version_create(dataset=dataset, episodes=[episode])
    other = make_episode(reward=0.0)
    with pytest.raises(ImmutableVersionError):
        DatasetMembership.objects.create(version=version, episode=other)
    with pytest.raises(ImmutableVersionError):
        version.memberships.first().delete()
    version.notes = "edited"
    with pytest.raises(ImmutableVersionError):
        version.save()
    with pytest.raises(ImmutableVersionError):
        version.delete()
    fresh = DatasetVersion.objects.get(pk=version.pk)
    assert fresh.notes == "" and list(fresh.episodes.all()) == [episode]


def test_parent_version_must_belong_to_the_same_dataset():
    a = Dataset.objects.create(name="a", kind="sft")
    b = Dataset.objects.create(name="b", kind="sft")
    va = dataset_version_create(dataset=a, episodes=[])
    with pytest.raises(ValueError, match="another dataset"):
        dataset_version_create(dataset=b, episodes=[], parent=va)
    assert not b.versions.exists()


# --- sandboxes and leases -------------------------------------------------------------------------------
def _sandbox(state: str = "idle") -> Sandbox:
    host, _ = SandboxHost.objects.get_or_create(name="h", defaults={"api_url": "http://127.0.0.1:9/"})
    return Sandbox.objects.create(
        host=host, external_id=f"s{Sandbox.objects.count()}", provider="xdesktop", profile="p", state=state
    )


def test_lease_claims_an_idle_sandbox_once():
    sandbox = _sandbox()
    lease = lease_acquire(sandbox=sandbox, holder="episode:1", ttl_seconds=30)
    assert lease.state == Lease.State.ACTIVE
    with pytest.raises(SandboxUnavailable):
        lease_acquire(sandbox=sandbox, holder="episode:2", ttl_seconds=30)
    assert Lease.objects.filter(sandbox=sandbox).count() == 1


def test_reaper_expires_only_overdue_leases_and_is_safe_to_rerun():
    overdue, fresh = _sandbox(), _sandbox()
    old = lease_acquire(sandbox=overdue, holder="a", ttl_seconds=1)
    new = lease_acquire(sandbox=fresh, holder="b", ttl_seconds=3600)
    later = timezone.now() + timedelta(seconds=5)
    assert leases_expire(now=later) == 1
    assert leases_expire(now=later) == 0
    old.refresh_from_db()
    new.refresh_from_db()
    overdue.refresh_from_db()
    assert (old.state, new.state) == (Lease.State.EXPIRED, Lease.State.ACTIVE)
    assert old.ended_at == later and overdue.state == Sandbox.State.RESETTING
