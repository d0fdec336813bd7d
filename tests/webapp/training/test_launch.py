"""Launching a run: validation that names the field (service, page, API), queueing, permissions."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.api.helpers import bearer_client, send
from tests.webapp.pages.html import text
from webapp.common.queue import TRAINING_RUN
from webapp.policies.models import PolicyVersion
from webapp.training.models import TrainingRun
from webapp.training.services import TrainingRunError, training_run_launch

pytestmark = pytest.mark.django_db


# --- the service -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("config", "field", "words"),
    [
        ({"lr": -1}, "lr", "at least"),
        ({"batch_size": "many"}, "batch_size", "whole number"),
        ({"learning_rate": 0.1}, "learning_rate", "unknown field"),
        ({"dtype": "float8"}, "dtype", "one of"),
    ],
)
def test_bad_config_is_refused_with_a_message_that_names_the_field(launch, config, field, words):
    with pytest.raises(TrainingRunError) as caught:
        launch(config=config)
    assert caught.value.field == field
    assert str(caught.value).startswith(f"{field}: ")
    assert words in str(caught.value)
    assert not TrainingRun.objects.exists()


def test_ppo_refuses_eps_high_below_eps_low(launch, suite):
    with pytest.raises(TrainingRunError) as caught:
        launch(algorithm="ppo", dataset_pin=None, suite=suite, config={"eps_low": 0.3, "eps_high": 0.1})
    assert caught.value.field == "eps_high"


def test_sft_needs_a_dataset_pin_and_the_pin_errors_come_through(launch):
    with pytest.raises(TrainingRunError) as missing:
        launch(dataset_pin="")
    assert missing.value.field == "dataset"
    with pytest.raises(TrainingRunError) as unknown:
        launch(dataset_pin="nope@v1")
    assert unknown.value.field == "dataset"
    assert "no dataset called 'nope'" in str(unknown.value)
    with pytest.raises(TrainingRunError) as gone:
        launch(dataset_pin="flywheel-sft@v9")
    assert "has no version 9" in str(gone.value)


def test_base_policy_must_be_an_active_local_model(launch, base_policy):
    oracle = PolicyVersion.objects.create(name="oracle", backend="oracle")
    with pytest.raises(TrainingRunError, match="base_policy: oracle is a Scripted oracle policy"):
        launch(base_policy=oracle)
    base_policy.is_active = False
    base_policy.save()
    with pytest.raises(TrainingRunError, match="retired"):
        launch()
    with pytest.raises(TrainingRunError) as none:
        launch(base_policy=None)
    assert none.value.field == "base_policy"


def test_rl_needs_a_suite_with_published_tasks_and_names_a_bad_task(launch, suite):
    with pytest.raises(TrainingRunError) as no_suite:
        launch(algorithm="grpo", dataset_pin=None, suite=None)
    assert no_suite.value.field == "suite"
    with pytest.raises(TrainingRunError) as draft:
        launch(
            algorithm="grpo",
            dataset_pin=None,
            suite=suite,
            config={"tasks": "miniwob/click-a, miniwob/draft"},
        )
    assert draft.value.field == "tasks"
    assert "'miniwob/draft' is not a published task of suite miniwob" in str(draft.value)
    with pytest.raises(TrainingRunError) as with_data:
        launch(algorithm="ppo", suite=suite)
    assert with_data.value.field == "dataset"

    run = launch(algorithm="grpo", dataset_pin=None, suite=suite, config={"tasks": "miniwob/click-b"})
    assert (run.suite, run.config["suite"], run.config["tasks"]) == (suite, "miniwob", "miniwob/click-b")
    assert run.dataset_version is None


def test_launch_creates_a_pending_run_with_defaults_and_queues_it_after_commit(
    launch, sft_version, queued, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        run = launch(config={"lr": "0.01"})
    run.refresh_from_db()
    assert queued.of(TRAINING_RUN) == [(run.pk,)]  # the fixture checks they survive the JSON serializer
    assert (run.status, run.dataset_version, run.step, run.attempt) == ("pending", sft_version, 0, 0)
    assert run.config["lr"] == 0.01 and run.config["epochs"] == 3.0  # coerced, defaults filled in
    assert (run.out_dir, run.log_file) == (f"training/run-{run.pk}", f"training/run-{run.pk}/run.log")
    assert run.celery_task_id == "task-1"


def test_broker_down_fails_the_run_saying_so(launch, queued, django_capture_on_commit_callbacks):
    queued.down = ConnectionError("redis is down")
    with django_capture_on_commit_callbacks(execute=True):
        run = launch()
    run.refresh_from_db()
    assert run.status == "failed" and run.finished_at is not None
    assert "task queue is unavailable" in run.error


# --- the page --------------------------------------------------------------------------------------


def _form(base_policy, **overrides):
    data = {
        "algorithm": "sft",
        "name": "from the page",
        "dataset": "flywheel-sft@v1",
        "base_policy": str(base_policy.pk),
        "cfg_lr": "0.001",
        "cfg_max_steps": "4",
    }
    data.update(overrides)
    return data


def test_page_refuses_a_bad_config_beside_the_field_and_keeps_the_values(
    client_for, base_policy, sft_version
):
    response = client_for("admin").post(reverse("training:run_launch"), _form(base_policy, cfg_lr="-3"))
    assert response.status_code == 400
    body = text(response)
    assert 'data-testid="launch-error" data-field="lr"' in body
    assert "Not launched: lr: must be at least" in body
    assert 'class="field-error" data-testid="field-error" data-field="lr">must be at least' in body
    assert 'value="from the page"' in body and 'name="cfg_lr" value="-3"' in body
    assert 'name="cfg_max_steps" value="4"' in body
    assert not TrainingRun.objects.exists()


def test_page_names_the_dataset_field_for_a_bad_pin(client_for, base_policy, sft_version):
    response = client_for("admin").post(
        reverse("training:run_launch"), _form(base_policy, dataset="flywheel-sft")
    )
    assert response.status_code == 400
    assert 'data-testid="field-error" data-field="dataset"' in text(response)
    assert "is not a dataset pin" in text(response)


def test_page_launch_redirects_to_the_new_run(client_for, base_policy, sft_version):
    response = client_for("admin").post(reverse("training:run_launch"), _form(base_policy))
    run = TrainingRun.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("training:run_detail", args=[run.pk])
    assert (run.name, run.config["max_steps"], run.created_by.get_username()) == ("from the page", 4, "dave")


def test_launch_form_shows_every_config_field_with_its_default_and_usable_pins(
    client_for, base_policy, sft_version
):
    body = text(client_for("admin").get(reverse("training:run_list")))
    assert 'data-testid="launch-form"' in body
    assert 'name="cfg_history_images" value="3"' in body and 'name="cfg_epochs" value="3.0"' in body
    assert '<option value="flywheel-sft@v1">' in body
    assert f'<option value="{base_policy.pk}">tiny-base</option>' in body


def test_algorithm_switch_swaps_in_the_rl_fields(client_for, suite):
    response = client_for("admin").get(reverse("training:launch_fields"), {"algorithm": "grpo"})
    body = text(response)
    assert response.status_code == 200
    assert body.lstrip().startswith('<div id="algorithm-fields" data-algorithm="grpo">')
    assert 'name="cfg_eps_high" value="0.28"' in body and 'name="cfg_group_size"' in body
    assert 'name="cfg_suite"' not in body  # the suite has its own select
    assert f'<option value="{suite.pk}">miniwob (2 published)</option>' in body
    assert 'name="dataset"' not in body


def test_researcher_sees_runs_but_no_launch_form_and_cannot_post(client_for, base_policy, sft_version):
    client = client_for("researcher")
    page = client.get(reverse("training:run_list"))
    assert page.status_code == 200 and 'data-testid="launch-form"' not in text(page)
    assert client.post(reverse("training:run_launch"), _form(base_policy)).status_code == 403
    assert client.get(reverse("training:launch_fields")).status_code == 403
    assert not TrainingRun.objects.exists()


@pytest.mark.parametrize("persona", ["annotator", "outsider"])
def test_annotator_and_outsider_cannot_open_or_launch(client_for, persona, base_policy, sft_version):
    client = client_for(persona)
    assert client.get(reverse("training:run_list")).status_code == 403
    assert client.post(reverse("training:run_launch"), _form(base_policy)).status_code == 403


# --- the API ---------------------------------------------------------------------------------------


def _body(**overrides):
    body = {"algorithm": "sft", "name": "api run", "dataset": "flywheel-sft@v1", "base_policy": "tiny-base"}
    body.update(overrides)
    return body


def test_api_refuses_a_bad_config_naming_the_field(personas, base_policy, sft_version):
    response = send(
        bearer_client(personas.admin), "POST", "/training-runs", _body(config={"warmup_steps": -1})
    )
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "warmup_steps"
    assert body["detail"].startswith("warmup_steps: must be at least 0")
    assert body["errors"] == [{"field": "warmup_steps", "message": body["detail"].split(": ", 1)[1]}]


def test_api_names_an_unknown_policy_and_suite(personas, base_policy, sft_version):
    admin = bearer_client(personas.admin)
    assert send(admin, "POST", "/training-runs", _body(base_policy="ghost")).json()["field"] == "base_policy"
    response = send(admin, "POST", "/training-runs", _body(algorithm="ppo", dataset=None, suite="ghost"))
    assert response.json() == {
        "detail": "suite: there is no task suite 'ghost'",
        "field": "suite",
        "errors": [{"field": "suite", "message": "there is no task suite 'ghost'"}],
    }


def test_api_launch_answers_202_with_the_run(personas, base_policy, sft_version):
    response = send(
        bearer_client(personas.admin),
        "POST",
        "/training-runs",
        _body(base_policy=base_policy.pk, config={"seed": 3}),
    )
    assert response.status_code == 202
    body = response.json()
    run = TrainingRun.objects.get()
    assert (body["id"], body["status"], body["dataset_version"], body["base_policy"]) == (
        run.pk,
        "pending",
        "flywheel-sft@v1",
        "tiny-base",
    )
    assert body["config"]["seed"] == 3 and body["step"] == 0 and body["checkpoints"] == []


def test_api_researcher_cannot_launch(personas, base_policy, sft_version):
    response = send(bearer_client(personas.researcher), "POST", "/training-runs", _body())
    assert response.status_code == 403
    assert response.json()["detail"] == "not allowed: needs training.launch_training"


def test_api_launch_validates_the_algorithm(personas, base_policy):
    response = send(bearer_client(personas.admin), "POST", "/training-runs", _body(algorithm="dpo"))
    assert response.status_code == 400
    assert response.json()["errors"][0]["field"] == "algorithm"


def test_service_refuses_unknown_algorithm_and_blank_name(personas, base_policy):
    with pytest.raises(TrainingRunError, match="^algorithm: unknown algorithm 'dpo'"):
        training_run_launch(
            algorithm="dpo", name="x", config={}, created_by=personas.admin, dataset_pin=None,
            base_policy=base_policy, suite=None,
        )  # fmt: skip
    with pytest.raises(TrainingRunError, match="^name: "):
        training_run_launch(
            algorithm="sft", name="  ", config={}, created_by=personas.admin, dataset_pin=None,
            base_policy=base_policy, suite=None,
        )  # fmt: skip


# --- every error at once ---------------------------------------------------------------------------


def test_service_names_every_input_at_fault_at_once(launch):
    with pytest.raises(TrainingRunError) as caught:
        launch(name=" ", dataset_pin="", config={"lr": -1, "batch_size": "many", "warmup": 2})
    fields = [f for f, _ in caught.value.errors]
    assert sorted(fields) == ["batch_size", "dataset", "lr", "name", "warmup"]
    assert "lr: must be at least" in str(caught.value) and "dataset: an SFT run" in str(caught.value)
    assert not TrainingRun.objects.exists()


def test_page_shows_each_error_beside_its_field_at_once(client_for, base_policy, sft_version):
    form = _form(base_policy, name="", dataset="nope", cfg_lr="-3", cfg_batch_size="many", cfg_dtype="x")
    response = client_for("admin").post(reverse("training:run_launch"), form)
    assert response.status_code == 400
    body = text(response)
    for field in ("name", "dataset", "lr", "batch_size", "dtype"):
        assert f'data-testid="field-error" data-field="{field}"' in body, field
    assert "Not launched: 5 fields need fixing, each says why beside it." in body
    assert 'name="cfg_lr" value="-3"' in body and 'name="cfg_batch_size" value="many"' in body


def test_api_lists_every_input_at_fault(personas, base_policy, sft_version):
    body = _body(base_policy="ghost", config={"warmup_steps": -1, "epochs": "lots"}, dataset="")
    response = send(bearer_client(personas.admin), "POST", "/training-runs", body)
    assert response.status_code == 400
    got = response.json()
    assert got["field"] == "base_policy"
    assert [e["field"] for e in got["errors"]] == ["base_policy", "epochs", "warmup_steps", "dataset"]
    assert got["errors"][0]["message"] == "there is no policy 'ghost'"
