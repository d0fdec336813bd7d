"""Invariants the database itself enforces, so no code path can write a contradiction."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import IntegrityError, transaction
from django.utils import timezone

from tests.factories import make_episode, make_task
from webapp.catalog.models import Task
from webapp.episodes.models import Episode, Step
from webapp.policies.models import PolicyVersion
from webapp.reviews.models import Review
from webapp.sandboxes.models import Lease, Sandbox, SandboxHost

pytestmark = pytest.mark.django_db


def _violates(fn) -> bool:
    try:
        with transaction.atomic():
            fn()
    except IntegrityError:
        return True
    return False


def test_episode_reward_must_lie_in_0_1():
    task = make_task()
    assert _violates(lambda: Episode.objects.create(task=task, source="agent", reward=1.5))
    assert _violates(lambda: Episode.objects.create(task=task, source="agent", reward=-0.1))


def test_human_episode_needs_an_annotator():
    assert _violates(lambda: Episode.objects.create(task=make_task(), source="human"))


def test_ended_episode_has_a_finish_time():
    assert _violates(lambda: Episode.objects.create(task=make_task(), source="agent", status="finished"))


def test_env_error_episode_carries_no_reward():
    now = timezone.now()
    task = make_task()
    assert _violates(
        lambda: Episode.objects.create(
            task=task, source="agent", status="failed", finished_at=now, env_error=True, reward=0.0
        )
    )


def test_step_indices_are_unique_within_an_episode(personas):
    episode = make_episode(annotator=personas.annotator, steps=1, reward=0.0)
    assert _violates(
        lambda: Step.objects.create(
            episode=episode, index=0, actor="human", action={"type": "wait"}, observed_at=timezone.now()
        )
    )


def test_task_successes_never_exceed_attempts():
    task = make_task()
    assert _violates(lambda: Task.objects.filter(pk=task.pk).update(attempts=1, successes=2))


def test_a_sandbox_has_at_most_one_active_lease():
    host = SandboxHost.objects.create(name="h1", api_url="http://127.0.0.1:9/")
    sandbox = Sandbox.objects.create(
        host=host, external_id="s1", provider="xdesktop", profile="p", state="leased"
    )
    now = timezone.now()

    def lease() -> Lease:
        return Lease.objects.create(
            sandbox=sandbox,
            holder="x",
            acquired_at=now,
            heartbeat_at=now,
            expires_at=now + timedelta(seconds=30),
        )

    lease()
    assert _violates(lease)


def test_lease_expires_after_it_was_acquired():
    host = SandboxHost.objects.create(name="h1", api_url="http://127.0.0.1:9/")
    sandbox = Sandbox.objects.create(host=host, external_id="s1", provider="xdesktop", profile="p")
    now = timezone.now()
    assert _violates(
        lambda: Lease.objects.create(
            sandbox=sandbox, holder="x", acquired_at=now, heartbeat_at=now, expires_at=now
        )
    )


def test_rejected_review_has_a_reason(personas):
    episode = make_episode(annotator=personas.annotator, reward=0.0)
    assert _violates(
        lambda: Review.objects.create(
            episode=episode, reviewer=personas.reviewer, state="rejected", decided_at=timezone.now()
        )
    )


def test_one_review_per_reviewer_and_episode(personas):
    episode = make_episode(annotator=personas.annotator, reward=0.0)
    Review.objects.create(episode=episode, reviewer=personas.reviewer)
    assert _violates(lambda: Review.objects.create(episode=episode, reviewer=personas.reviewer))


def test_openai_policy_needs_an_endpoint():
    assert _violates(lambda: PolicyVersion.objects.create(name="p", backend="openai"))
    assert _violates(lambda: PolicyVersion.objects.create(name="q", backend="local"))
