"""Datasets with their versions, training runs with checkpoints and metric series, and policies."""

from __future__ import annotations

import pytest

from tests.webapp.api.helpers import send
from webapp.policies.models import PolicyVersion
from webapp.training.models import MetricPoint

pytestmark = pytest.mark.django_db


@pytest.fixture
def researcher(world, token_client_for):
    return token_client_for("researcher")


# --- datasets -------------------------------------------------------------------------------------


def test_dataset_list_shows_kind_and_latest_version(researcher):
    body = send(researcher, "GET", "/datasets").json()
    assert body["count"] == 1
    (dataset,) = body["items"]
    assert (dataset["name"], dataset["kind"], dataset["num_versions"], dataset["latest_version"]) == (
        "sft-main",
        "sft",
        2,
        2,
    )


def test_dataset_versions_are_newest_first_with_parent_number_and_lineage(researcher, world):
    body = send(researcher, "GET", f"/datasets/{world.dataset.pk}/versions").json()
    assert body["count"] == 2
    v2, v1 = body["items"]
    assert (v2["number"], v2["parent_number"], v2["num_episodes"], v2["num_steps"]) == (2, 1, 2, 4)
    assert (v1["number"], v1["parent_number"], v1["num_episodes"], v1["num_steps"]) == (1, None, 1, 3)
    assert v2["lineage"]["policy_versions"] == [world.policy.pk]
    assert v2["sealed_at"] is not None


def test_dataset_versions_page(researcher, world):
    body = send(researcher, "GET", f"/datasets/{world.dataset.pk}/versions?limit=1&offset=1").json()
    assert body["count"] == 2
    assert [v["number"] for v in body["items"]] == [1]


def test_versions_of_unknown_dataset_get_404(researcher):
    response = send(researcher, "GET", "/datasets/999999/versions")
    assert response.status_code == 404
    assert response.json() == {"detail": "no dataset with id 999999"}


# --- training runs --------------------------------------------------------------------------------


def test_training_run_list_shows_data_policy_and_checkpoint_count(researcher, world):
    body = send(researcher, "GET", "/training-runs").json()
    assert body["count"] == 1
    (run,) = body["items"]
    assert run["id"] == world.run.pk
    assert (run["algorithm"], run["status"], run["dataset_version"], run["base_policy"]) == (
        "sft",
        "running",
        "sft-main@v2",
        "oracle-v1",
    )
    assert (run["created_by"], run["num_checkpoints"]) == ("dave", 2)


def test_training_run_detail_has_checkpoints_in_step_order_and_metric_names(researcher, world):
    body = send(researcher, "GET", f"/training-runs/{world.run.pk}").json()
    assert body["config"] == {"lr": 1e-5}
    assert [(c["step"], c["path"], c["policy"]) for c in body["checkpoints"]] == [
        (100, "ckpt/100", "sft-r1-100"),
        (200, "ckpt/200", None),
    ]
    assert body["metrics"] == ["lr", "train/loss"]


def test_metric_series_is_in_step_order_even_with_a_slash_in_its_name(researcher, world):
    response = send(researcher, "GET", f"/training-runs/{world.run.pk}/metrics/train/loss")
    assert response.status_code == 200
    assert response.json() == [
        {"step": 10, "value": 0.9},
        {"step": 20, "value": 0.5},
        {"step": 30, "value": 0.3},
    ]


def test_infinite_metric_value_comes_back_as_null_so_the_body_stays_json(researcher, world):
    MetricPoint.objects.create(run=world.run, name="grad_norm", step=1, value=float("inf"))
    response = send(researcher, "GET", f"/training-runs/{world.run.pk}/metrics/grad_norm")
    assert response.json() == [{"step": 1, "value": None}]


def test_unknown_metric_gets_404_listing_the_known_ones(researcher, world):
    response = send(researcher, "GET", f"/training-runs/{world.run.pk}/metrics/accuracy")
    assert response.status_code == 404
    assert response.json() == {
        "detail": f"run {world.run.pk} has no metric 'accuracy'; it has: lr, train/loss"
    }


@pytest.mark.parametrize("suffix", ["", "/metrics/lr"])
def test_unknown_training_run_gets_404(researcher, suffix):
    response = send(researcher, "GET", f"/training-runs/999999{suffix}")
    assert response.status_code == 404
    assert response.json() == {"detail": "no training run with id 999999"}


# --- policies -------------------------------------------------------------------------------------


def test_policy_list_is_newest_first_and_filters_by_active(researcher, world):
    PolicyVersion.objects.create(name="random", backend="random", is_active=False)
    every = send(researcher, "GET", "/policies").json()
    assert [p["name"] for p in every["items"]] == ["random", "sft-r1-100", "oracle-v1"]
    active = send(researcher, "GET", "/policies?active=true").json()
    assert [p["name"] for p in active["items"]] == ["sft-r1-100", "oracle-v1"]
    retired = send(researcher, "GET", "/policies?active=false").json()
    assert [p["name"] for p in retired["items"]] == ["random"]
    local = every["items"][1]
    assert (local["backend"], local["checkpoint"]) == ("local", world.run.checkpoints.get(step=100).pk)


def test_policy_filter_must_be_a_boolean(researcher):
    response = send(researcher, "GET", "/policies?active=sometimes")
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "active"
