"""A small world for the API tests: tasks in suites, episodes of two annotators and an agent,
a dataset with two versions, a training run with checkpoints and metrics, and token clients."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client
from django.utils import timezone

from tests.conftest import PASSWORD, Personas
from tests.factories import make_episode, make_task
from tests.webapp.api.helpers import bearer_client
from webapp.accounts.roles import Role
from webapp.accounts.services import user_create
from webapp.catalog.models import Task, TaskSuite
from webapp.catalog.services import suite_get_or_create
from webapp.datasets.models import Dataset, DatasetVersion
from webapp.datasets.services import dataset_version_create
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.reviews.services import review_assign
from webapp.training.models import Checkpoint, MetricPoint, TrainingRun


@dataclass
class World:
    suite: TaskSuite
    task: Task
    other_task: Task
    other_annotator: AbstractBaseUser
    alice_episode: Episode  # the annotator's own, assigned to the reviewer
    frank_episode: Episode  # another annotator's, reviewed by nobody
    agent_episode: Episode  # an agent rollout of `other_task` under `policy`
    policy: PolicyVersion
    dataset: Dataset
    v1: DatasetVersion
    v2: DatasetVersion
    run: TrainingRun


@pytest.fixture
def world(personas: Personas) -> World:
    suite = suite_get_or_create(slug="miniwob", name="MiniWoB++")
    task = make_task(slug="miniwob/click-button", title="Click the button", suites=[suite])
    other_task = make_task(slug="desktop/open-terminal", title="Open a terminal", platform="desktop")
    frank = user_create(username="frank", password=PASSWORD, roles=[Role.ANNOTATOR])
    alice_episode = make_episode(task=task, annotator=personas.annotator, steps=3, reward=1.0)
    review_assign(episode=alice_episode, reviewer=personas.reviewer, assigned_by=personas.admin)
    frank_episode = make_episode(task=task, annotator=frank, steps=2, reward=0.0)
    policy = PolicyVersion.objects.create(name="oracle-v1", backend="oracle")
    agent_episode = make_episode(task=other_task, steps=1, reward=1.0)
    Episode.objects.filter(pk=agent_episode.pk).update(policy_version=policy)
    agent_episode.refresh_from_db()

    dataset = Dataset.objects.create(name="sft-main", kind="sft")
    v1 = dataset_version_create(dataset=dataset, episodes=[alice_episode])
    v2 = dataset_version_create(dataset=dataset, episodes=[alice_episode, agent_episode], parent=v1)

    run = TrainingRun.objects.create(
        name="sft round 1",
        algorithm="sft",
        status="running",
        config={"lr": 1e-5},
        dataset_version=v2,
        base_policy=policy,
        created_by=personas.admin,
        started_at=timezone.now(),
    )
    # Checkpoint directories on disk (relative to the var dir): promotion checks they are still there.
    for step in (100, 200):
        (Path(settings.VAR_DIR) / "ckpt" / str(step)).mkdir(parents=True, exist_ok=True)
        (Path(settings.VAR_DIR) / "ckpt" / str(step) / "config.json").write_text("{}")
    Checkpoint.objects.create(run=run, step=200, path="ckpt/200")
    first = Checkpoint.objects.create(run=run, step=100, path="ckpt/100", metrics={"loss": 0.5})
    PolicyVersion.objects.create(name="sft-r1-100", backend="local", checkpoint=first)
    for step, value in [(30, 0.3), (10, 0.9), (20, 0.5)]:
        MetricPoint.objects.create(run=run, name="train/loss", step=step, value=value)
    MetricPoint.objects.create(run=run, name="lr", step=10, value=1e-5)
    return World(
        suite=suite,
        task=task,
        other_task=other_task,
        other_annotator=frank,
        alice_episode=alice_episode,
        frank_episode=frank_episode,
        agent_episode=agent_episode,
        policy=policy,
        dataset=dataset,
        v1=v1,
        v2=v2,
        run=run,
    )


@pytest.fixture
def token_client_for(personas: Personas) -> Callable[[str], Client]:
    """token_client_for("researcher") -> a Client authenticating with that persona's API token."""
    return lambda name: bearer_client(getattr(personas, name))
