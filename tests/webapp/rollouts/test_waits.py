"""The batch page says what each waiting episode waits for: its turn in the batch, a free rollout worker,
a sandbox of its profile (with the host's reason) or a policy server (issue 34: a batch waited half an
hour and its page did not say why).

Celery is replaced at one boundary (what services enqueue by name); the real worker path, and a batch
that starts at once while the catalog's checks are queued, are in test_queues_real.py.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.urls import reverse
from django.utils import timezone

from tests.factories import make_task
from webapp.catalog.services import suite_get_or_create
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.policies.runtime import PolicyUnavailable
from webapp.rollouts import policy_pick
from webapp.rollouts.models import EpisodeWait
from webapp.rollouts.selectors import batch_waiting, episode_waits
from webapp.rollouts.services import batch_create, episode_run

pytestmark = pytest.mark.django_db(transaction=True)

SPEC = {
    "id": "w/t",
    "instruction": "Say hi",
    "platform": "desktop",
    "checker": {"checks": [{"probe": {"op": "answer"}, "metric": "exact_match", "expected": "hi"}]},
}


@pytest.fixture
def batch(personas: Any, enqueued: Any) -> Any:
    """Three tasks, one seed each, one at a time: one episode queued, two waiting for their turn."""
    suite = suite_get_or_create(slug="waits", name="Waits")
    for i in range(3):
        task = make_task(
            slug=f"w/t{i}", spec={**SPEC, "id": f"w/t{i}"}, platform="desktop", env_profile="desktop"
        )
        task.suites.add(suite)
    suite.tasks.update(is_published=True)
    policy = PolicyVersion.objects.create(name="oracle-w", backend="oracle")
    return batch_create(
        suite=suite, policy_version=policy, episodes_per_task=1, concurrency=1, created_by=personas.researcher
    )


def waits_of(batch: Any) -> dict[int, Any]:
    episodes = list(Episode.objects.filter(batch=batch).select_related("task"))
    return episode_waits(batch=batch, episodes=episodes)


def test_queued_and_not_yet_queued_episodes_say_what_they_wait_for(batch: Any, enqueued: Any) -> None:
    waits = waits_of(batch)
    queued = enqueued[0]
    assert waits[queued].kind == "worker"
    assert waits[queued].text.startswith("a free rollout worker (queued ")
    assert (
        "running on the rollout workers" in waits[queued].text
        and "queued on 'rollouts'" in waits[queued].text
    )
    others = [w for pk, w in waits.items() if pk != queued]
    assert [w.text for w in others] == ["its turn: the batch runs 1 at once"] * 2
    assert batch_waiting(batch=batch) == [("their turn", 2), ("a free rollout worker", 1)]


@override_settings(SANDBOX_HOST_TOKEN="t" * 20)
def test_an_episode_given_back_for_want_of_a_sandbox_says_so_with_the_reason(
    batch: Any, enqueued: Any, client_for: Any
) -> None:
    # No host serves the profile: the episode is given back to the queue, not failed; the page says why.
    episode_run(episode_id=enqueued[0], worker="w1")
    episode = Episode.objects.get(pk=enqueued[0])
    assert episode.status == "pending" and enqueued.later == [(episode.pk,)]
    wait = waits_of(batch)[episode.pk]
    assert wait.kind == "sandbox"
    assert wait.text.startswith("a 'desktop' sandbox (")
    assert "no live host serves this profile" in wait.text and wait.text.endswith("it asks again shortly")
    assert batch_waiting(batch=batch) == [("their turn", 2), ("a sandbox", 1)]

    page = client_for("researcher").get(reverse("rollouts:batch_detail", args=[batch.pk])).content.decode()
    assert 'data-testid="waiting"' in page and "2 for their turn" in page and "1 for a sandbox" in page
    assert 'data-wait="sandbox"' in page and "no live host serves this profile" in page
    assert page.count('data-wait="turn"') == 2


def test_an_episode_leasing_its_sandbox_says_so(batch: Any, enqueued: Any) -> None:
    Episode.objects.filter(pk=enqueued[0]).update(status="running", started_at=timezone.now())
    wait = waits_of(batch)[enqueued[0]]
    assert wait.kind == "sandbox" and wait.text.startswith(
        "a 'desktop' sandbox: leasing one (it waits up to "
    )


@override_settings(ROLLOUT_POLICY_WAIT_SECONDS=30)
def test_waiting_for_a_policy_server_is_said_while_it_lasts(
    batch: Any, enqueued: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    episode = Episode.objects.select_related("policy_version", "batch").get(pk=enqueued[0])
    Episode.objects.filter(pk=episode.pk).update(status="running", started_at=timezone.now())
    seen: list[Any] = []
    answers = iter(
        [PolicyUnavailable("no policy server serves oracle-w yet"), PolicyUnavailable("still none")]
    )

    def policy_for(version: Any, *, episode: int | None = None) -> Any:
        seen.append(waits_of(batch).get(enqueued[0]))
        answer = next(answers, None)
        if answer is not None:
            raise answer
        return object()

    monkeypatch.setattr(policy_pick, "policy_for", policy_for)
    monkeypatch.setattr(policy_pick, "WAIT_POLL_S", 0.01)
    policy_pick.rollout_policy(episode)
    assert seen[0].kind == "sandbox"  # before the first refusal: it was about to lease
    assert seen[2].kind == "policy" and "no policy server serves oracle-w yet" in seen[2].text
    assert seen[2].text.startswith("a policy server (") and "(it waits up to 30 s)" in seen[2].text
    # It has its policy: the note is gone.
    assert not EpisodeWait.objects.filter(episode_id=episode.pk).exists()


def test_a_long_wait_with_no_episode_running_anywhere_asks_whether_a_worker_serves_the_queue(
    batch: Any, enqueued: Any
) -> None:
    Episode.objects.filter(pk=enqueued[0]).update(queued_at=timezone.now() - timedelta(minutes=5))
    wait = waits_of(batch)[enqueued[0]]
    assert wait.text.startswith("a free rollout worker (queued 5 min ago; 0 episodes running")
    assert wait.text.endswith("is a worker serving the 'rollouts' queue running?")
