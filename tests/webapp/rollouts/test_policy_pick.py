"""Which version an episode runs (the newest ready of its line, when its batch follows it), and waiting
for a policy server: unit tests over the database, with servers as rows (their heartbeats' mirror).
The real engine, worker and promotion are in tests/webapp/policies/test_served_rollouts_real.py."""

from __future__ import annotations

import pytest
from django.test import override_settings

from tests.factories import make_task
from tests.webapp.policies.helpers import served_version, server
from webapp.catalog.services import suite_get_or_create
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.policies.runtime import PolicyUnavailable
from webapp.policies.selectors import line_of, newest_ready
from webapp.rollouts.policy_pick import rollout_policy, rollout_version
from webapp.rollouts.services import batch_create, episode_run

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def line():
    """A served base and two adapters promoted from it (v2 newer than v1)."""
    base = served_version("tiny-served", kind="base", model_name="tiny", base="tiny", path="/m/tiny")
    v1 = served_version("tiny-v1", base="tiny", lineage={"line": "tiny-served"})
    v2 = served_version("tiny-v2", base="tiny", lineage={"line": "tiny-served"})
    return base, v1, v2


@pytest.fixture
def suite():
    s = suite_get_or_create(slug="mini", name="Mini")
    spec = {
        "id": "mini/t0",
        "instruction": "Say hi",
        "platform": "desktop",
        "checker": {"checks": [{"probe": {"op": "answer"}, "metric": "exact_match", "expected": "hi"}]},
    }
    t = make_task(slug="mini/t0", spec=spec, platform="desktop", env_profile="desktop")
    t.suites.add(s)
    s.tasks.update(is_published=True)
    return s


def test_the_newest_version_a_server_has_loaded_is_picked(line):
    base, v1, v2 = line
    assert line_of(v2) == line_of(base) == "tiny-served"
    server("s1", models=["tiny"])
    assert newest_ready(base) == base  # no adapter loaded anywhere yet: stay
    server("s2", models=["tiny", "tiny-v1"])
    assert newest_ready(base) == v1
    server("s3", models=["tiny", "tiny-v1", "tiny-v2"])
    assert newest_ready(base) == v2 and newest_ready(v1) == v2
    # Never backwards, never a retired version, never another line.
    assert newest_ready(v2) == v2
    PolicyVersion.objects.filter(pk=v2.pk).update(is_active=False)
    assert newest_ready(base) == v1
    other = served_version("other-v9", base="tiny", lineage={"line": "other"})
    server("s4", models=["tiny", other.model_name])
    assert newest_ready(base) == v1


def test_a_server_that_went_silent_does_not_make_a_version_ready(line):
    base, v1, _ = line
    server("s1", models=["tiny", "tiny-v1"], age_s=120)
    assert newest_ready(base) == base


def test_an_episode_moves_to_the_newest_ready_only_when_its_batch_follows(line, suite, personas, enqueued):
    base, v1, _ = line
    server("s1", models=["tiny", "tiny-v1"])
    plain = batch_create(
        suite=suite, policy_version=base, episodes_per_task=1, concurrency=1, created_by=personas.researcher
    )
    follows = batch_create(
        suite=suite,
        policy_version=base,
        episodes_per_task=1,
        concurrency=1,
        created_by=personas.researcher,
        follow_newest=True,
    )
    assert follows.config == {"follow_newest": True}
    ep_plain = Episode.objects.select_related("batch", "policy_version").get(batch=plain)
    ep_follow = Episode.objects.select_related("batch", "policy_version").get(batch=follows)
    assert rollout_version(ep_plain) == base
    assert rollout_version(ep_follow) == v1
    assert Episode.objects.get(pk=ep_follow.pk).policy_version == v1  # recorded on the episode


@override_settings(ROLLOUT_POLICY_WAIT_SECONDS=0)
def test_no_server_for_the_version_is_policy_unavailable_not_a_policy_error_of_the_agent(
    line, suite, personas, enqueued
):
    base, _, _ = line
    batch = batch_create(
        suite=suite, policy_version=base, episodes_per_task=1, concurrency=1, created_by=personas.researcher
    )
    episode = Episode.objects.select_related("batch", "policy_version", "task").get(batch=batch)
    with pytest.raises(PolicyUnavailable, match="no policy server serves tiny"):
        rollout_policy(episode)
    # Through the rollout service: an environment error, re-run (another attempt is queued).
    ran = episode_run(episode_id=episode.pk, worker="w1")
    assert ran is not None and ran.status == "failed" and ran.env_error
    assert "no policy server serves tiny" in ran.error
    assert Episode.objects.filter(retry_of=ran).count() == 1


def test_a_server_that_comes_up_while_the_episode_waits_is_used(line, suite, personas, enqueued, monkeypatch):
    base, _, _ = line
    batch = batch_create(
        suite=suite, policy_version=base, episodes_per_task=1, concurrency=1, created_by=personas.researcher
    )
    episode = Episode.objects.select_related("batch", "policy_version").get(batch=batch)
    sleeps: list[float] = []

    def sleep(s: float) -> None:  # the server registers during the first wait
        sleeps.append(s)
        server("s1", models=["tiny"], url="http://s1.internal:8200/v1")

    monkeypatch.setattr("webapp.rollouts.policy_pick.time.sleep", sleep)
    policy, observation = rollout_policy(episode)
    assert len(sleeps) == 1
    assert policy.base_urls == ("http://s1.internal:8200/v1",) and policy.model == "tiny"  # type: ignore[attr-defined]


def test_the_batch_page_shows_each_episodes_version_and_what_a_following_batch_runs_now(
    line, suite, personas, enqueued, client
):
    base, v1, _ = line
    server("s1", models=["tiny", "tiny-v1"])
    follows = batch_create(
        suite=suite, policy_version=base, episodes_per_task=1, concurrency=1, created_by=personas.researcher,
        follow_newest=True,
    )  # fmt: skip
    client.force_login(personas.researcher)
    page = client.get(f"/rollouts/{follows.pk}/").content.decode()
    assert 'data-testid="newest-ready">tiny-v1<' in page
    assert 'data-testid="episode-policy">tiny-served<' in page  # not started yet: still the base
