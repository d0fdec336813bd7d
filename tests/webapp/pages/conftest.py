"""Rows and types the page tests share."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pytest
from django.test import Client

from tests.conftest import Personas
from tests.factories import make_episode, make_task
from webapp.catalog.models import Task
from webapp.datasets.models import Dataset
from webapp.datasets.services import dataset_version_create
from webapp.episodes.models import Episode
from webapp.training.models import TrainingRun

# The `client_for` fixture: client_for("annotator") is logged in as that persona, client_for(None) anonymous.
ClientFor = Callable[[str | None], Client]


@dataclass
class World:
    task: Task
    episode: Episode  # the annotator's own, finished, one step with a screenshot, nobody reviewing it
    dataset: Dataset
    run: TrainingRun  # a pending SFT run on the dataset's version


@pytest.fixture
def world(personas: Personas) -> World:
    task = make_task(title="Book a calendar slot")
    episode = make_episode(task=task, annotator=personas.annotator, steps=1, reward=1.0)
    dataset = Dataset.objects.create(name="sft-main", kind=Dataset.Kind.SFT)
    version = dataset_version_create(dataset=dataset, episodes=[episode], created_by=personas.admin)
    run = TrainingRun.objects.create(
        name="sft", algorithm="sft", dataset_version=version, created_by=personas.admin
    )
    return World(task=task, episode=episode, dataset=dataset, run=run)
