"""The API's door: integers past 64 bits, NUL characters and bodies over the limit are 4xx naming
what was wrong, never 500s."""

from __future__ import annotations

import json

import pytest

from tests.webapp.api.helpers import send, task_body
from webapp.catalog.models import Task

pytestmark = pytest.mark.django_db

HUGE = str(2**70)


@pytest.mark.parametrize(
    "path",
    ["/tasks", "/episodes", "/datasets", "/training-runs", "/policies", "/episodes/{episode}/steps"],
)
def test_api_offsets_past_64_bits_are_400_naming_offset(token_client_for, world, path):
    response = token_client_for("admin").get(
        "/api/v1" + path.format(episode=world.alice_episode.pk) + f"?offset={HUGE}"
    )
    assert response.status_code == 400, response.content
    assert [e["field"] for e in response.json()["errors"]] == ["offset"]


@pytest.mark.parametrize("name", ["task", "policy"])
def test_api_episode_filters_past_64_bits_are_400_naming_them(token_client_for, world, name):
    response = token_client_for("admin").get(f"/api/v1/episodes?{name}={HUGE}")
    assert response.status_code == 400, response.content
    assert [e["field"] for e in response.json()["errors"]] == [name]


def test_a_nul_anywhere_in_a_json_body_is_400_naming_the_field(token_client_for, world):
    client = token_client_for("researcher")
    for body, field in [
        (task_body(title="Enter\x00text"), "title"),
        (task_body(spec={"setup": [{"op": "exec", "command": "echo \x00"}]}), "spec.setup.0.command"),
        ({**task_body(), "ti\x00tle": "x"}, "ti\x00tle"),
    ]:
        response = send(client, "POST", "/tasks", body)
        assert response.status_code == 400, response.content
        assert response.json()["errors"] == [
            {"field": field, "message": f"{field} may not contain NUL characters"}
        ]
    assert not Task.objects.filter(slug=task_body()["slug"]).exists()


def test_a_body_over_the_limit_is_413(token_client_for, world, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    response = token_client_for("researcher").post(
        "/api/v1/tasks", json.dumps({"slug": "x" * 20_000}), content_type="application/json"
    )
    assert response.status_code == 413
    assert response.json() == {"detail": "the request body is larger than the 10000 bytes accepted"}
