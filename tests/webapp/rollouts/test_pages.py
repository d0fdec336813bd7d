"""The researcher pages: launching a batch from the form, its progress page, and who may do what."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.factories import make_task
from webapp.catalog.services import suite_get_or_create
from webapp.common.queue import EPISODE_ROLLOUT
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.rollouts.models import RolloutBatch

pytestmark = pytest.mark.django_db(transaction=True)
SPEC = {
    "id": "p/t",
    "instruction": "Say hi",
    "platform": "desktop",
    "checker": {"checks": [{"probe": {"op": "answer"}, "metric": "exact_match", "expected": "hi"}]},
}


@pytest.fixture
def setup(queued):
    suite = suite_get_or_create(slug="pages", name="Pages")
    task = make_task(slug="p/t", spec=SPEC, platform="desktop", env_profile="desktop")
    task.suites.add(suite)
    suite.tasks.update(is_published=True)
    policy = PolicyVersion.objects.create(name="oracle-p", backend="oracle")
    return suite, policy, queued


def form(suite, policy, **over):
    data = {
        "suite": suite.pk,
        "policy": policy.pk,
        "episodes_per_task": 3,
        "concurrency": 2,
        "history_images": 3,
    }
    return {**data, **over}


def test_researcher_launches_a_batch_and_follows_it(setup, client_for):
    suite, policy, sent = setup
    client = client_for("researcher")
    page = client.get(reverse("rollouts:batch_list"))
    assert b'data-testid="launch-form"' in page.content
    resp = client.post(reverse("rollouts:batch_launch"), form(suite, policy, name="first try"))
    batch = RolloutBatch.objects.get()
    assert resp.status_code == 302 and resp["Location"] == reverse("rollouts:batch_detail", args=[batch.pk])
    assert batch.name == "first try" and batch.config == {"history_images": 3}
    assert Episode.objects.filter(batch=batch).count() == 3 and len(sent.of(EPISODE_ROLLOUT)) == 2
    detail = client.get(resp["Location"])
    assert b"0 / 3 done" in detail.content and b"p/t" in detail.content
    # The poll answers the fragment, and 286 (stop polling) once the batch is over.
    frag = client.get(resp["Location"], headers={"HX-Request": "true"})
    assert frag.status_code == 200 and b'id="live"' in frag.content and b"<html" not in frag.content
    client.post(reverse("rollouts:batch_cancel", args=[batch.pk]))
    assert client.get(resp["Location"], headers={"HX-Request": "true"}).status_code == 286


def test_bad_launch_shows_why(setup, client_for):
    suite, policy, _ = setup
    client = client_for("researcher")
    resp = client.post(reverse("rollouts:batch_launch"), form(suite, policy, episodes_per_task=0))
    assert resp.status_code == 400 and b"greater than or equal to 1" in resp.content
    empty = suite_get_or_create(slug="empty", name="Empty")
    resp = client.post(reverse("rollouts:batch_launch"), form(empty, policy))
    assert resp.status_code == 400 and b"no published tasks" in resp.content
    assert not RolloutBatch.objects.exists()


@pytest.mark.parametrize("persona", ["annotator", "reviewer", "outsider"])
def test_only_researchers_and_admins_launch_or_cancel(setup, client_for, personas, persona):
    suite, policy, _ = setup
    client = client_for(persona)
    assert client.post(reverse("rollouts:batch_launch"), form(suite, policy)).status_code == 403
    batch = RolloutBatch.objects.create(suite=suite, policy_version=policy, created_by=personas.researcher)
    assert client.get(reverse("rollouts:batch_detail", args=[batch.pk])).status_code == 403
    assert client.post(reverse("rollouts:batch_cancel", args=[batch.pk])).status_code == 403
    assert RolloutBatch.objects.get(pk=batch.pk).status == "running"
