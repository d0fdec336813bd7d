"""limit/offset on every list endpoint: defaults, bounds, and {"count", "items"}."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.factories import make_episode, make_task
from tests.webapp.api.helpers import send
from webapp.datasets.services import dataset_version_create
from webapp.policies.models import PolicyVersion
from webapp.training.models import TrainingRun

pytestmark = pytest.mark.django_db

LISTS = [
    "/tasks",
    "/episodes",
    "/episodes/{episode}/steps",
    "/datasets",
    "/datasets/{dataset}/versions",
    "/training-runs",
    "/policies",
]


def url(path: str, world) -> str:
    return path.format(episode=world.alice_episode.pk, dataset=world.dataset.pk)


@pytest.mark.parametrize("path", LISTS)
def test_every_list_answers_count_and_items(world, token_client_for, path):
    body = send(token_client_for("admin"), "GET", url(path, world)).json()
    assert set(body) == {"count", "items"}
    assert body["count"] == len(body["items"]) > 0


@pytest.mark.parametrize("path", LISTS)
@pytest.mark.parametrize(
    ("query", "field", "message"),
    [
        ("limit=0", "limit", "greater than or equal to 1"),
        ("limit=201", "limit", "less than or equal to 200"),
        ("limit=ten", "limit", "valid integer"),
        ("offset=-1", "offset", "greater than or equal to 0"),
    ],
)
def test_out_of_range_page_params_get_400(world, token_client_for, path, query, field, message):
    response = send(token_client_for("admin"), "GET", f"{url(path, world)}?{query}")
    assert response.status_code == 400
    body = response.json()
    assert [e["field"] for e in body["errors"]] == [field]
    assert f"{field}: " in body["detail"] and message in body["detail"]


def test_limit_defaults_to_50_and_may_go_up_to_200(world, token_client_for):
    for n in range(60):
        make_task(slug=f"bulk/task-{n:03d}")
    researcher = token_client_for("researcher")
    default = send(researcher, "GET", "/tasks").json()
    assert (default["count"], len(default["items"])) == (62, 50)
    most = send(researcher, "GET", "/tasks?limit=200").json()
    assert len(most["items"]) == 62


def test_offset_walks_the_list_without_gaps_or_repeats(world, token_client_for):
    for n in range(7):
        make_task(slug=f"bulk/task-{n}")
    researcher = token_client_for("researcher")
    seen: list[str] = []
    for offset in range(0, 9, 3):
        page = send(researcher, "GET", f"/tasks?limit=3&offset={offset}").json()
        seen += [t["slug"] for t in page["items"]]
    assert seen == sorted(seen) and len(set(seen)) == len(seen) == 9
    past_the_end = send(researcher, "GET", "/tasks?offset=100").json()
    assert past_the_end == {"count": 9, "items": []}


def queries_for(client, path: str) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert send(client, "GET", path).status_code == 200
    return len(queries)


def test_list_queries_do_not_grow_with_the_number_of_items(world, personas, token_client_for):
    """Each list costs the same number of queries for 1 item as for many (no query per row)."""
    admin = token_client_for("admin")
    send(admin, "GET", "/me")  # the token's first use writes last_used_at; keep that out of the counts
    paths = [
        "/tasks",
        "/episodes",
        f"/episodes/{world.alice_episode.pk}/steps",
        "/training-runs",
        "/policies",
    ]
    paths += ["/datasets", f"/datasets/{world.dataset.pk}/versions"]
    one = {path: queries_for(admin, f"{path}?limit=1") for path in paths}
    for _ in range(3):
        make_episode(task=make_task(suites=[world.suite]), annotator=personas.annotator, steps=0)
        TrainingRun.objects.create(
            name="more",
            algorithm="ppo",
            created_by=personas.admin,
            base_policy=world.policy,
            dataset_version=world.v1,
        )
        PolicyVersion.objects.create(name=f"more-{PolicyVersion.objects.count()}", backend="random")
        dataset_version_create(dataset=world.dataset, episodes=[world.alice_episode], parent=world.v2)
    many = {path: queries_for(admin, f"{path}?limit=200") for path in paths}
    assert many == one
