"""Who may call what: every persona against every endpoint, by API token."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest
from django.contrib.auth.models import Permission

from tests.webapp.api.conftest import World
from tests.webapp.api.helpers import bearer_client, send, task_body
from webapp.catalog.models import Task

PERSONAS = ("annotator", "reviewer", "researcher", "admin", "outsider")


@dataclass(frozen=True)
class Endpoint:
    method: str
    path: str  # formatted with the World's ids
    allowed: frozenset[str]  # personas that get `ok`; the rest get 403
    ok: int = 200
    needs: str = ""  # the permission a 403 names
    body: Any = None

    def url(self, world: World) -> str:
        return self.path.format(
            task=world.task.pk,
            episode=world.alice_episode.pk,
            dataset=world.dataset.pk,
            version=world.v2.pk,
            run=world.run.pk,
            checkpoint=world.run.checkpoints.get(step=200).pk,
        )

    def __str__(self) -> str:
        return f"{self.method} {self.path}"


EVERYONE_BUT_OUTSIDER = frozenset({"annotator", "reviewer", "researcher", "admin"})
RESEARCH = frozenset({"researcher", "admin"})

ENDPOINTS = [
    Endpoint("GET", "/tasks", EVERYONE_BUT_OUTSIDER, needs="catalog.view_task"),
    Endpoint("GET", "/tasks/{task}", EVERYONE_BUT_OUTSIDER, needs="catalog.view_task"),
    Endpoint("POST", "/tasks", RESEARCH, ok=201, needs="catalog.add_task", body=task_body()),
    Endpoint("PATCH", "/tasks/{task}", RESEARCH, needs="catalog.change_task", body={"title": "Renamed"}),
    # The episode is the annotator's own and is assigned to the reviewer, so both may see it.
    Endpoint("GET", "/episodes", EVERYONE_BUT_OUTSIDER, needs="episodes.annotate"),
    Endpoint("GET", "/episodes/{episode}", EVERYONE_BUT_OUTSIDER, needs="episodes.view_all_episodes"),
    Endpoint("GET", "/episodes/{episode}/steps", EVERYONE_BUT_OUTSIDER, needs="reviews.review_episodes"),
    Endpoint("GET", "/datasets", RESEARCH, needs="datasets.view_dataset"),
    Endpoint("GET", "/datasets/{dataset}/versions", RESEARCH, needs="datasets.view_datasetversion"),
    Endpoint("GET", "/dataset-versions/{version}", RESEARCH, needs="datasets.view_datasetversion"),
    Endpoint("GET", "/dataset-versions/{version}/members", RESEARCH, needs="datasets.view_datasetversion"),
    Endpoint(
        "POST",
        "/dataset-versions/{version}/exports",
        RESEARCH,
        ok=202,
        needs="datasets.export_dataset",
        body={"kind": "sft", "fmt": "jsonl"},
    ),
    Endpoint("GET", "/flywheel/rounds", RESEARCH, needs="datasets.view_flywheeliteration"),
    Endpoint(
        "POST",
        "/flywheel/rounds",
        frozenset({"admin"}),
        ok=202,
        needs="datasets.close_flywheel_round",
        body={},
    ),
    Endpoint("GET", "/training-runs", RESEARCH, needs="training.view_trainingrun"),
    Endpoint("GET", "/training-runs/{run}", RESEARCH, needs="training.view_trainingrun"),
    Endpoint("GET", "/training-runs/{run}/metrics/train/loss", RESEARCH, needs="training.view_trainingrun"),
    Endpoint("GET", "/training-runs/{run}/series", RESEARCH, needs="training.view_trainingrun"),
    Endpoint("GET", "/training-runs/{run}/log", RESEARCH, needs="training.view_trainingrun"),
    Endpoint("GET", "/training-compare?a={run}&b={run}", RESEARCH, needs="training.view_trainingrun"),
    Endpoint(
        "POST",
        "/training-runs",
        frozenset({"admin"}),
        ok=202,
        needs="training.launch_training",
        body={"algorithm": "sft", "name": "r2", "dataset": "sft-main@v2", "base_policy": "sft-r1-100"},
    ),
    Endpoint("POST", "/training-runs/{run}/stop", frozenset({"admin"}), needs="training.launch_training"),
    # The world's run is running, so resuming it is refused (409), but only after the permission check.
    Endpoint(
        "POST", "/training-runs/{run}/resume", frozenset({"admin"}), ok=409, needs="training.launch_training"
    ),
    Endpoint(
        "POST",
        "/checkpoints/{checkpoint}/promote",
        frozenset({"admin"}),
        ok=201,
        needs="training.launch_training",
        body={},
    ),
    Endpoint("GET", "/policies", RESEARCH, needs="policies.view_policyversion"),
    Endpoint("GET", "/sandbox-hosts", RESEARCH, needs="sandboxes.view_sandboxhost"),
    Endpoint("GET", "/sandboxes", RESEARCH, needs="sandboxes.view_sandbox"),
    Endpoint("GET", "/policy-servers", RESEARCH, needs="policies.view_policyserver"),
    Endpoint("GET", "/dashboards/rollouts", RESEARCH, needs="episodes.view_all_episodes"),
    Endpoint("GET", "/dashboards/success", RESEARCH, needs="episodes.view_all_episodes"),
    Endpoint("GET", "/dashboards/health", RESEARCH, needs="sandboxes.view_sandbox"),
    Endpoint("GET", "/dashboards/health/series", RESEARCH, needs="sandboxes.view_sandbox"),
    Endpoint("GET", "/dashboards/annotation", RESEARCH, needs="reviews.view_review"),
    Endpoint("GET", "/me", frozenset(PERSONAS)),
]

MATRIX = [pytest.param(e, p, id=f"{p}-{e}") for e in ENDPOINTS for p in PERSONAS]


@pytest.mark.django_db
@pytest.mark.parametrize(("endpoint", "persona"), MATRIX)
def test_each_persona_gets_what_its_permissions_allow(world, token_client_for, endpoint, persona):
    response = send(token_client_for(persona), endpoint.method, endpoint.url(world), endpoint.body)
    if persona in endpoint.allowed:
        assert response.status_code == endpoint.ok, response.content
    else:
        assert response.status_code == 403, response.content
        detail = response.json()["detail"]
        assert detail.startswith("not allowed: needs")
        assert endpoint.needs in detail


@pytest.mark.django_db
@pytest.mark.parametrize("endpoint", ENDPOINTS, ids=str)
def test_anonymous_caller_gets_401_on_every_endpoint(world, client, endpoint):
    response = send(client, endpoint.method, endpoint.url(world), endpoint.body)
    assert response.status_code == 401
    assert response.json()["detail"].startswith("authentication required")
    assert response["WWW-Authenticate"].startswith("Bearer")


@pytest.mark.django_db
def test_outsider_gets_403_on_task_list(token_client_for):
    response = send(token_client_for("outsider"), "GET", "/tasks")
    assert response.status_code == 403
    assert response.json() == {"detail": "not allowed: needs catalog.view_task"}


@pytest.mark.django_db
def test_annotator_cannot_create_a_task_and_nothing_is_written(token_client_for):
    response = send(token_client_for("annotator"), "POST", "/tasks", task_body())
    assert response.status_code == 403
    assert "catalog.add_task" in response.json()["detail"]
    assert not Task.objects.filter(slug=task_body()["slug"]).exists()


@pytest.mark.django_db
def test_reviewer_cannot_edit_a_task_and_it_keeps_its_title(world, token_client_for):
    response = send(token_client_for("reviewer"), "PATCH", f"/tasks/{world.task.pk}", {"title": "Hijacked"})
    assert response.status_code == 403
    assert "catalog.change_task" in response.json()["detail"]
    world.task.refresh_from_db()
    assert world.task.title == "Click the button"


@pytest.mark.django_db
def test_researcher_needs_checkpoint_permission_too_for_run_detail(world, personas):
    """The detail lists checkpoints, so it asks for both permissions (like the dataset page does)."""
    personas.researcher.groups.first().permissions.remove(
        Permission.objects.get(codename="view_checkpoint", content_type__app_label="training")
    )
    response = send(bearer_client(personas.researcher), "GET", f"/training-runs/{world.run.pk}")
    assert response.status_code == 403
    assert response.json()["detail"] == "not allowed: needs training.view_checkpoint"
