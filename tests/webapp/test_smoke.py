import pytest

from tests.factories import make_episode


@pytest.mark.django_db
def test_episode_with_steps_round_trips(personas):
    episode = make_episode(annotator=personas.annotator, steps=3, reward=1.0)
    assert episode.num_steps == 3
    assert [s.index for s in episode.steps.order_by("index")] == [0, 1, 2]
