"""The error contract: every 4xx from the API is JSON with a "detail" string."""

from __future__ import annotations

import pytest
from django.test import Client

from tests.webapp.api.helpers import send, task_body

pytestmark = pytest.mark.django_db

ERRORS = [
    ("anonymous", "GET", "/tasks", None, 401),
    ("outsider", "GET", "/datasets", None, 403),
    ("researcher", "GET", "/tasks?limit=0", None, 400),
    ("researcher", "POST", "/tasks", task_body(platform="windows"), 400),
    ("researcher", "POST", "/tasks", "{broken", 400),
    ("researcher", "GET", "/tasks/abc", None, 400),
    ("researcher", "GET", "/tasks/999999", None, 404),
    ("annotator", "GET", "/episodes/999999", None, 404),
    ("researcher", "GET", "/no-such-endpoint", None, 404),
    ("anonymous", "POST", "/no/such/endpoint", None, 404),
]


@pytest.mark.parametrize(
    ("persona", "method", "path", "body", "status"), ERRORS, ids=[f"{e[4]}-{e[1]} {e[2]}" for e in ERRORS]
)
def test_every_error_is_json_with_a_detail_string(
    world, token_client_for, persona, method, path, body, status
):
    client = Client() if persona == "anonymous" else token_client_for(persona)
    response = send(client, method, path, body)
    assert response.status_code == status
    assert response["Content-Type"].startswith("application/json")
    detail = response.json()["detail"]
    assert isinstance(detail, str) and detail


def test_unknown_path_under_the_api_gets_json_404_naming_it(token_client_for, world):
    response = send(token_client_for("researcher"), "GET", "/training-runs/1/metrics/")
    assert response.status_code == 404
    assert response.json() == {"detail": "no endpoint at /api/v1/training-runs/1/metrics/"}
