"""The OpenAPI description scripts generate clients from."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.django_db

OPERATIONS = {
    ("get", "/api/v1/me"),
    ("get", "/api/v1/tasks"),
    ("post", "/api/v1/tasks"),
    ("get", "/api/v1/tasks/{task_id}"),
    ("patch", "/api/v1/tasks/{task_id}"),
    ("get", "/api/v1/episodes"),
    ("get", "/api/v1/episodes/{episode_id}"),
    ("get", "/api/v1/episodes/{episode_id}/steps"),
    ("get", "/api/v1/episodes/{episode_id}/steps/{index}/screenshot"),
    ("get", "/api/v1/episodes/{episode_id}/final-screenshot"),
    ("get", "/api/v1/rollout-batches"),
    ("post", "/api/v1/rollout-batches"),
    ("get", "/api/v1/rollout-batches/{batch_id}"),
    ("post", "/api/v1/rollout-batches/{batch_id}/cancel"),
    ("get", "/api/v1/datasets"),
    ("get", "/api/v1/datasets/{dataset_id}/versions"),
    ("get", "/api/v1/dataset-versions/{version_id}"),
    ("get", "/api/v1/dataset-versions/{version_id}/members"),
    ("post", "/api/v1/dataset-versions/{version_id}/exports"),
    ("get", "/api/v1/dataset-diff"),
    ("post", "/api/v1/dataset-pins"),
    ("get", "/api/v1/dataset-exports/{export_id}"),
    ("post", "/api/v1/dataset-exports/{export_id}/cancel"),
    ("get", "/api/v1/dataset-exports/{export_id}/files"),
    ("get", "/api/v1/dataset-exports/{export_id}/files/{relpath}"),
    ("get", "/api/v1/dataset-exports/{export_id}/archive"),
    ("get", "/api/v1/flywheel/rounds"),
    ("post", "/api/v1/flywheel/rounds"),
    ("get", "/api/v1/training-runs"),
    ("get", "/api/v1/training-runs/{run_id}"),
    ("get", "/api/v1/training-runs/{run_id}/metrics/{name}"),
    ("post", "/api/v1/training-runs"),
    ("post", "/api/v1/training-runs/{run_id}/stop"),
    ("post", "/api/v1/training-runs/{run_id}/resume"),
    ("get", "/api/v1/training-runs/{run_id}/log"),
    ("get", "/api/v1/training-runs/{run_id}/series"),
    ("get", "/api/v1/training-compare"),
    ("post", "/api/v1/checkpoints/{checkpoint_id}/promote"),
    ("get", "/api/v1/policies"),
    ("post", "/api/v1/policy-merges"),
    ("get", "/api/v1/policy-merges/{merge_id}"),
    ("get", "/api/v1/sandbox-hosts"),
    ("get", "/api/v1/sandboxes"),
    ("get", "/api/v1/policy-servers"),
    ("get", "/api/v1/dashboards/rollouts"),
    ("get", "/api/v1/dashboards/success"),
    ("get", "/api/v1/dashboards/health"),
    ("get", "/api/v1/dashboards/health/series"),
    ("get", "/api/v1/dashboards/annotation"),
}


@pytest.fixture
def schema(client) -> dict:
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    return json.loads(response.content)


def test_openapi_json_lists_every_operation(schema):
    assert schema["openapi"].startswith("3.")
    listed = {(method, path) for path, ops in schema["paths"].items() for method in ops}
    assert listed == OPERATIONS


def test_every_operation_requires_bearer_token_or_session(schema):
    assert schema["components"]["securitySchemes"]["BearerToken"] == {"type": "http", "scheme": "bearer"}
    for path, ops in schema["paths"].items():
        for method, op in ops.items():
            assert {"BearerToken": []} in op["security"], (method, path)


def test_every_data_operation_documents_its_error_bodies(schema):
    for path, ops in schema["paths"].items():
        if path == "/api/v1/me":
            continue
        for method, op in ops.items():
            assert {"401", "403"} <= set(op["responses"]), (method, path)
            error = op["responses"]["403"]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/ErrorOut"}, (method, path)


def test_enums_of_different_models_get_different_names(schema):
    """Episode.Status and TrainingRun.Status must not collapse into one "Status" schema."""
    schemas = schema["components"]["schemas"]
    assert schemas["EpisodeStatus"]["enum"] == ["pending", "running", "finished", "failed", "cancelled"]
    assert schemas["TrainingRunStatus"]["enum"] == ["pending", "running", "finished", "failed", "cancelled"]
    assert "Status" not in schemas


def test_task_body_schema_states_limits_and_required_fields(schema):
    task_in = schema["components"]["schemas"]["TaskIn"]
    assert set(task_in["required"]) == {"slug", "title", "instruction", "platform", "env_profile"}
    assert (task_in["properties"]["max_steps"]["minimum"], task_in["properties"]["max_steps"]["maximum"]) == (
        1,
        1000,
    )
    assert task_in["additionalProperties"] is False


def test_list_parameters_are_typed(schema):
    params = {p["name"]: p for p in schema["paths"]["/api/v1/episodes"]["get"]["parameters"]}
    assert {"task", "status", "source", "policy", "limit", "offset"} <= set(params)
    assert params["limit"]["schema"]["maximum"] == 200
    assert {"type": "integer", "minimum": 1, "maximum": 2**63 - 1} in params["task"]["schema"]["anyOf"]
