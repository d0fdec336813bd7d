"""Launching a rollout batch on some tasks of a suite and on chosen seeds, from the page and the API;
a bad choice is refused naming the field. Celery is replaced at its boundary (webapp.common.queue)."""

from __future__ import annotations

import json

import pytest
from django.urls import reverse

from tests.factories import make_task
from tests.webapp.api.helpers import bearer_client
from webapp.catalog.services import suite_get_or_create
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.rollouts.launch import batch_seeds, seeds_parse
from webapp.rollouts.models import RolloutBatch
from webapp.rollouts.services import RolloutError, batch_create

pytestmark = pytest.mark.django_db(transaction=True)

SPEC = {
    "instruction": "Say hi",
    "platform": "desktop",
    "checker": {"checks": [{"probe": {"op": "answer"}, "metric": "exact_match", "expected": "hi"}]},
}
API = "/api/v1/rollout-batches"


@pytest.fixture
def world(queued):
    suite = suite_get_or_create(slug="mix", name="Mix")
    for slug in ("mix/click-a", "mix/click-b", "mix/type-a", "mix/draft"):
        task = make_task(slug=slug, spec={**SPEC, "id": slug}, platform="desktop", env_profile="desktop")
        task.suites.add(suite)
    suite.tasks.exclude(slug="mix/draft").update(is_published=True)
    make_task(slug="other/click-c", spec={**SPEC, "id": "other/click-c"}, platform="desktop").suites.add(
        suite_get_or_create(slug="other", name="Other")
    )
    policy = PolicyVersion.objects.create(name="oracle-mix", backend="oracle")
    return suite, policy


def episodes(batch: RolloutBatch) -> list[tuple[str, int]]:
    return sorted(Episode.objects.filter(batch=batch).values_list("task__slug", "seed"))


def test_seeds_parse_reads_lists_and_ranges_and_refuses_the_rest():
    assert seeds_parse("0, 3 7;100-102") == [0, 3, 7, 100, 101, 102]
    for bad, why in (("", "no seed"), ("1.5", "not a seed"), ("-3", "not a seed"), ("9-2", "backwards"),
                     ("0-5000", "more than 1000")):  # fmt: skip
        with pytest.raises(RolloutError, match=why) as caught:
            seeds_parse(bad)
        assert caught.value.field == "seeds"
    assert batch_seeds(seeds=None, episodes_per_task=3, first_seed=40) == [40, 41, 42]
    assert batch_seeds(seeds=None, episodes_per_task=None, first_seed=None) == [0]
    with pytest.raises(RolloutError, match="not both") as caught:
        batch_seeds(seeds=[1, 2], episodes_per_task=2, first_seed=None)
    assert caught.value.field == "seeds"


def test_a_batch_runs_the_chosen_tasks_once_per_chosen_seed(world, personas):
    suite, policy = world
    batch = batch_create(suite=suite, policy_version=policy, tasks=suite.tasks.filter(slug="mix/type-a"),
                         seeds=[5, 9, 1000], concurrency=2, created_by=personas.researcher)  # fmt: skip
    assert episodes(batch) == [("mix/type-a", 5), ("mix/type-a", 9), ("mix/type-a", 1000)]
    assert batch.seeds == [5, 9, 1000] and batch.episodes_per_task == 3 and batch.seeds_label == "5, 9, 1000"
    for bad, field in (({"seeds": [1, 1]}, "seeds"), ({"seeds": [-1]}, "seeds"), ({"seeds": []}, "seeds"),
                       ({"tasks": suite.tasks.filter(slug="mix/draft")}, "tasks")):  # fmt: skip
        with pytest.raises(RolloutError) as caught:
            batch_create(suite=suite, policy_version=policy, concurrency=1, created_by=personas.researcher,
                         **{"seeds": [0], **bad})  # fmt: skip
        assert caught.value.field == field, bad


def test_researcher_launches_on_some_tasks_and_seeds_from_the_page(world, client_for):
    suite, policy = world
    client = client_for("researcher")
    form = {"suite": suite.pk, "policy": policy.pk, "concurrency": 2, "history_images": 3}
    launch = reverse("rollouts:batch_launch")
    resp = client.post(launch, {**form, "tasks": "mix/click-*", "seeds": "7, 20-21"})
    batch = RolloutBatch.objects.get()
    assert resp.status_code == 302, resp.content.decode()[:2000]
    assert episodes(batch) == [(t, s) for t in ("mix/click-a", "mix/click-b") for s in (7, 20, 21)]
    assert "seeds 7, 20–21" in client.get(resp["Location"]).content.decode()
    # A count from a first seed: the other way to say which seeds.
    client.post(reverse("rollouts:batch_launch"),
                {**form, "tasks": "mix/type-a", "episodes_per_task": 2, "first_seed": 100})  # fmt: skip
    assert episodes(RolloutBatch.objects.latest("pk")) == [("mix/type-a", 100), ("mix/type-a", 101)]
    # Bad choices come back on the form, beside the field at fault, and nothing is launched.
    for bad, field, message in (
        ({"seeds": "3, x"}, "seeds", "&#x27;x&#x27; is not a seed"),
        ({"seeds": "1, 2", "episodes_per_task": 5}, "seeds", "not both"),
        ({"tasks": "mix/nope-*"}, "tasks", "matches no published task of suite mix"),
        ({"tasks": "mix/draft"}, "tasks", "not published"),
        ({"tasks": "other/click-c"}, "tasks", "suite mix has no task"),
    ):
        resp = client.post(reverse("rollouts:batch_launch"), {**form, "episodes_per_task": 1, **bad})
        body = resp.content.decode()
        assert resp.status_code == 400 and message in body, (bad, body[-3000:])
        assert f'id="id_{field}"' in body and body.index(message) < body.index(f'id="id_{field}"'), bad
    assert RolloutBatch.objects.count() == 2


def test_the_api_launches_on_some_tasks_and_seeds(world, personas):
    suite, policy = world
    client = bearer_client(personas.researcher)
    resp = client.post(API, {"suite": "mix", "policy": "oracle-mix", "tasks": ["mix/click-b", "mix/type-*"],
                             "seeds": [3, 4], "concurrency": 2}, content_type="application/json")  # fmt: skip
    assert resp.status_code == 202, resp.content
    data = resp.json()
    assert data["tasks"] == ["mix/click-b", "mix/type-a"] and data["seeds"] == [3, 4]
    assert data["progress"]["total"] == 4 and data["status"] == "running"
    batch = RolloutBatch.objects.get(pk=data["id"])
    assert episodes(batch) == [(t, s) for t in ("mix/click-b", "mix/type-a") for s in (3, 4)]
    resp = client.post(API, {"suite": "mix", "policy": policy.pk, "episodes_per_task": 2, "first_seed": 50},
                       content_type="application/json")  # fmt: skip
    assert resp.status_code == 202 and resp.json()["seeds"] == [50, 51]
    assert resp.json()["tasks"] == ["mix/click-a", "mix/click-b", "mix/type-a"]
    assert client.get(f"{API}/{data['id']}").json()["seeds"] == [3, 4]
    assert client.get(API).json()["count"] == 2
    cancelled = client.post(f"{API}/{data['id']}/cancel")
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"


@pytest.mark.parametrize(
    ("body", "fields"),
    [
        ({"suite": "nope", "policy": "missing", "seeds": [1, 1]}, {"suite", "policy", "seeds"}),
        ({"seeds": [2], "first_seed": 4}, {"seeds"}),
        ({"seeds": [-1]}, {"seeds"}),
        ({"seeds": "0-3"}, {"seeds"}),
        ({"episodes_per_task": 0}, {"episodes_per_task"}),
        ({"tasks": ["mix/draft"]}, {"tasks"}),
        ({"tasks": ["mix/zzz*"]}, {"tasks"}),
        ({"concurrency": 0, "name": "x" * 300}, {"concurrency", "name"}),
    ],
)
def test_the_api_names_each_bad_field(world, personas, body, fields):
    client = bearer_client(personas.researcher)
    resp = client.post(API, json.dumps({"suite": "mix", "policy": "oracle-mix", **body}),
                       content_type="application/json")  # fmt: skip
    assert resp.status_code == 400, resp.content
    assert {e["field"] for e in resp.json()["errors"]} == fields, resp.json()
    assert not RolloutBatch.objects.exists()


def test_only_who_may_run_rollouts_launches_them(world, personas):
    for persona in (personas.annotator, personas.reviewer):
        resp = bearer_client(persona).post(API, {"suite": "mix", "policy": "oracle-mix"},
                                           content_type="application/json")  # fmt: skip
        assert resp.status_code == 403
        assert bearer_client(persona).get(API).status_code == 403
    assert not RolloutBatch.objects.exists()
