"""An annotator's finished demonstration with a review assigned to the reviewer persona."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from tests.conftest import Personas
from tests.factories import make_episode, make_task
from webapp.episodes.models import Episode
from webapp.reviews.models import Review
from webapp.reviews.services import review_assign


@dataclass
class ReviewWorld:
    episode: Episode  # alice's, 3 steps: click(0,5), click(10,5), click(20,5); reward 1
    review: Review  # assigned to bob by dave


@pytest.fixture
def world(personas: Personas) -> ReviewWorld:
    episode = make_episode(
        task=make_task(platform="desktop"), annotator=personas.annotator, steps=3, reward=1.0
    )
    review = review_assign(episode=episode, reviewer=personas.reviewer, assigned_by=personas.admin)
    return ReviewWorld(episode=episode, review=review)
