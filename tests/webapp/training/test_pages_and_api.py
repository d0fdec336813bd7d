"""The run page (status, log tail, checkpoints, stop / resume / promote), the compare page, and their API."""

from __future__ import annotations

import pytest
from django.urls import reverse

from tests.webapp.api.helpers import bearer_client, send
from tests.webapp.pages.html import count_testid, text
from tests.webapp.training.test_execution import run_task
from webapp.policies.models import PolicyVersion
from webapp.training.models import Checkpoint, MetricPoint, TrainingRun
from webapp.training.promotion import checkpoint_promote
from webapp.training.services import TrainingRunError

pytestmark = pytest.mark.django_db


@pytest.fixture
def finished(launch, fake_runner) -> TrainingRun:
    """A succeeded SFT run with checkpoints at steps 2, 4 and 6."""
    run = launch()
    run_task(run)
    return run


# --- the run page ----------------------------------------------------------------------------------


def test_run_page_shows_status_config_checkpoints_log_and_a_chart_per_group(client_for, finished):
    response = client_for("researcher").get(reverse("training:run_detail", args=[finished.pk]))
    body = text(response)
    assert response.status_code == 200
    assert 'data-testid="run-status">finished<' in body
    assert count_testid(response, "checkpoint-row") == 3
    assert count_testid(response, "chart") == 16  # one canvas per metric group; others are added by JS
    assert 'data-group="loss"' in body and 'data-group="task-success"' in body
    assert "fake training: 6 steps" in body
    assert "<th><code>max_steps</code></th><td>6</td>" in body
    assert f'"{reverse("api:training_run_series", args=[finished.pk])}"' in body
    # A researcher views; the buttons are the launchers'.
    assert 'data-testid="promote"' not in body and 'data-testid="run-stop"' not in body
    assert 'hx-trigger="every 2s"' not in body  # the run has ended: nothing polls


def test_admin_sees_promote_on_each_checkpoint_and_stop_while_active(client_for, launch, finished):
    body = text(client_for("admin").get(reverse("training:run_detail", args=[finished.pk])))
    assert body.count('data-testid="promote"') == 3 and 'data-testid="run-stop"' not in body
    pending = launch(name="next")
    body = text(client_for("admin").get(reverse("training:run_detail", args=[pending.pk])))
    assert 'data-testid="run-stop"' in body and body.count('hx-trigger="every 2s"') == 2  # status + log


def test_log_fragment_polls_while_active_and_tells_htmx_to_stop_after(client_for, launch, finished):
    client = client_for("researcher")
    pending = launch(name="waiting")
    live = client.get(reverse("training:run_log", args=[pending.pk]), headers={"HX-Request": "true"})
    assert live.status_code == 200 and 'data-testid="run-log-empty"' in text(live)  # no log file yet
    done = client.get(reverse("training:run_log", args=[finished.pk]), headers={"HX-Request": "true"})
    assert done.status_code == 286 and "finished at step 6" in text(done)
    status = client.get(reverse("training:run_status", args=[finished.pk]), headers={"HX-Request": "true"})
    assert status.status_code == 286 and 'data-status="finished"' in text(status)


def test_log_shows_only_the_last_200_lines(client_for, finished):
    path = finished.path(finished.log_file)
    with path.open("a") as f:
        f.writelines(f"line {i}\n" for i in range(500))
    body = text(client_for("researcher").get(reverse("training:run_log", args=[finished.pk])))
    assert "line 499" in body and "line 300\n" in body and "line 299\n" not in body


def test_missing_run_is_not_found(client_for):
    assert client_for("admin").get(reverse("training:run_detail", args=[999])).status_code == 404


def test_stop_and_resume_buttons(client_for, launch, fake_runner, personas):
    client = client_for("admin")
    run = launch(config={"max_steps": 10, "checkpoint_every": 2})
    fake_runner.on_step = lambda step: step == 3 and client.post(reverse("training:run_stop", args=[run.pk]))
    run_task(run)
    assert (run.status, run.step) == ("cancelled", 3)
    page = text(client.get(reverse("training:run_detail", args=[run.pk])))
    assert 'data-testid="run-resume"' in page
    response = client.post(reverse("training:run_resume", args=[run.pk]))
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == "pending"
    again = client.post(reverse("training:run_resume", args=[run.pk]), follow=True)
    assert "only a cancelled or failed run resumes" in text(again)
    assert client_for("researcher").post(reverse("training:run_stop", args=[run.pk])).status_code == 403
    assert client_for("researcher").post(reverse("training:run_resume", args=[run.pk])).status_code == 403


# --- promotion -------------------------------------------------------------------------------------


def test_promote_makes_a_local_policy_with_the_base_policy_config_and_lineage(finished, personas):
    checkpoint = finished.checkpoints.get(step=4)
    policy = checkpoint_promote(checkpoint=checkpoint, by=personas.admin)
    assert (policy.name, policy.backend, policy.checkpoint, policy.is_active) == (
        "sft-round-1-step-4",
        "local",
        checkpoint,
        True,
    )
    assert policy.config == {"max_new_tokens": 32}
    assert policy.lineage["run"] == finished.pk and policy.lineage["step"] == 4
    assert (
        policy.lineage["base_policy"] == "tiny-base"
        and policy.lineage["dataset_version"] == "flywheel-sft@v1"
    )
    assert policy.model_dir() == finished.path(checkpoint.path)
    with pytest.raises(TrainingRunError, match="already policy sft-round-1-step-4"):
        checkpoint_promote(checkpoint=checkpoint, by=personas.admin)


def test_promoted_name_is_unique_and_a_given_name_must_be_a_free_slug(finished, personas):
    PolicyVersion.objects.create(name="sft-round-1-step-2", backend="random")
    policy = checkpoint_promote(checkpoint=finished.checkpoints.get(step=2), by=personas.admin)
    assert policy.name == "sft-round-1-step-2-2"
    six = finished.checkpoints.get(step=6)
    with pytest.raises(TrainingRunError, match="^name: 'Not A Slug' is not a slug"):
        checkpoint_promote(checkpoint=six, name="Not A Slug", by=personas.admin)
    with pytest.raises(TrainingRunError, match="^name: a policy called 'tiny-base' exists already"):
        checkpoint_promote(checkpoint=six, name="tiny-base", by=personas.admin)
    assert checkpoint_promote(checkpoint=six, name="sft-best", by=personas.admin).name == "sft-best"


def test_promote_button_then_the_policy_shows_and_a_run_can_start_from_it(client_for, finished):
    client = client_for("admin")
    checkpoint = finished.checkpoints.get(step=6)
    response = client.post(
        reverse("training:checkpoint_promote", args=[checkpoint.pk]), {"name": ""}, follow=True
    )
    body = text(response)
    assert "Checkpoint step 6 is now policy sft-round-1-step-6." in body
    assert 'data-testid="checkpoint-policy">sft-round-1-step-6<' in body
    listing = text(client.get(reverse("training:run_list")))
    assert 'data-policy="sft-round-1-step-6"' in listing
    policy = PolicyVersion.objects.get(name="sft-round-1-step-6")
    assert f'<option value="{policy.pk}">sft-round-1-step-6</option>' in listing  # a base for the next run
    twice = client.post(reverse("training:checkpoint_promote", args=[checkpoint.pk]), follow=True)
    assert "already policy sft-round-1-step-6" in text(twice)


def test_promote_needs_launch_permission(client_for, finished):
    checkpoint = finished.checkpoints.first()
    assert (
        client_for("researcher")
        .post(reverse("training:checkpoint_promote", args=[checkpoint.pk]))
        .status_code
        == 403
    )
    assert not PolicyVersion.objects.filter(checkpoint=checkpoint).exists()


# --- compare ---------------------------------------------------------------------------------------


@pytest.fixture
def two_runs(launch, fake_runner) -> tuple[TrainingRun, TrainingRun]:
    a = launch(name="small lr", config={"max_steps": 4, "checkpoint_every": 2, "lr": 1e-4})
    b = launch(name="big lr", config={"max_steps": 6, "checkpoint_every": 3, "lr": 1e-2})
    run_task(a)
    run_task(b)
    MetricPoint.objects.create(run=b, name="train/only_b", step=1, value=1.0)
    return a, b


def test_compare_page_marks_the_differing_fields_and_lists_final_metrics(client_for, two_runs):
    a, b = two_runs
    response = client_for("researcher").get(reverse("training:run_compare"), {"a": a.pk, "b": b.pk})
    body = text(response)
    assert response.status_code == 200
    assert f">#{a.pk} small lr</a>" in body and f">#{b.pk} big lr</a>" in body
    for field in ("lr", "max_steps", "checkpoint_every"):
        assert f'data-field="{field}" data-differs="1" class="differs"' in body
    assert 'data-field="batch_size" data-differs="0"' in body
    assert "3 config fields differ: checkpoint_every, lr, max_steps." in body
    assert 'data-metric="train/loss"><th><code>train/loss</code></th><td>0.25</td><td>0.1667</td>' in body
    assert 'data-metric="train/only_b"' in body
    assert f'"{reverse("api:training_compare")}?a={a.pk}&b={b.pk}"' in body


def test_compare_page_without_a_choice_asks_for_two_runs(client_for, two_runs):
    response = client_for("researcher").get(reverse("training:run_compare"))
    assert response.status_code == 200 and 'data-testid="compare-error"' in text(response)
    assert client_for("researcher").get(reverse("training:run_compare"), {"a": "x"}).status_code == 400
    assert (
        client_for("researcher").get(reverse("training:run_compare"), {"a": 1, "b": 999}).status_code == 404
    )


def test_compare_api_overlays_only_the_shared_series(personas, two_runs):
    a, b = two_runs
    body = send(bearer_client(personas.researcher), "GET", f"/training-compare?a={a.pk}&b={b.pk}").json()
    assert (body["a"]["name"], body["b"]["name"]) == ("small lr", "big lr")
    assert body["shared_metrics"] == ["train/loss", "train/lr", "train/tokens_per_s"]
    assert body["series"]["a"]["train/loss"] == {"steps": [1, 2, 3, 4], "values": [1.0, 0.5, 1 / 3, 0.25]}
    assert "train/only_b" not in body["series"]["b"]
    assert body["differing"] == ["checkpoint_every", "lr", "max_steps"]


# --- the run's API ---------------------------------------------------------------------------------


def test_series_api_returns_every_series_with_non_finite_values_as_null(personas, finished):
    MetricPoint.objects.create(run=finished, name="train/grad_norm", step=1, value=float("inf"))
    body = send(bearer_client(personas.researcher), "GET", f"/training-runs/{finished.pk}/series").json()
    assert (body["run"], body["status"], body["step"]) == (finished.pk, "finished", 6)
    assert set(body["series"]) == {"train/loss", "train/lr", "train/tokens_per_s", "train/grad_norm"}
    assert body["series"]["train/grad_norm"] == {"steps": [1], "values": [None]}
    assert body["series"]["train/loss"]["steps"] == [1, 2, 3, 4, 5, 6]


def test_series_api_with_a_cursor_gives_only_the_points_recorded_since(personas, finished):
    client = bearer_client(personas.researcher)
    url = f"/training-runs/{finished.pk}/series"
    first = send(client, "GET", url).json()
    cursor = first["cursor"]
    assert cursor == MetricPoint.objects.filter(run=finished).latest("pk").pk
    nothing = send(client, "GET", f"{url}?after={cursor}").json()
    assert nothing["series"] == {} and nothing["cursor"] == cursor  # nothing new: the cursor stays
    MetricPoint.objects.create(run=finished, name="train/loss", step=7, value=0.125)
    MetricPoint.objects.create(run=finished, name="rl/success", step=7, value=1.0)
    new = send(client, "GET", f"{url}?after={cursor}").json()
    assert new["series"] == {
        "train/loss": {"steps": [7], "values": [0.125]},
        "rl/success": {"steps": [7], "values": [1.0]},
    }
    assert new["cursor"] > cursor
    assert send(client, "GET", f"{url}?after=-1").status_code == 400


def test_log_api_returns_the_tail(personas, finished):
    body = send(bearer_client(personas.researcher), "GET", f"/training-runs/{finished.pk}/log?tail=2").json()
    assert body["run"] == finished.pk and len(body["lines"]) == 2
    assert "finished at step 6" in body["lines"][-1]
    assert (
        send(
            bearer_client(personas.researcher), "GET", f"/training-runs/{finished.pk}/log?tail=0"
        ).status_code
        == 400
    )


def test_api_stop_resume_and_promote(personas, launch, fake_runner):
    admin = bearer_client(personas.admin)
    run = launch(config={"max_steps": 10, "checkpoint_every": 2})
    fake_runner.on_step = lambda step: step == 3 and send(admin, "POST", f"/training-runs/{run.pk}/stop")
    run_task(run)
    assert run.status == "cancelled"
    again = send(admin, "POST", f"/training-runs/{run.pk}/stop")
    assert again.status_code == 409
    assert again.json()["detail"] == f"run #{run.pk} has already ended (cancelled)"
    resumed = send(admin, "POST", f"/training-runs/{run.pk}/resume")
    assert resumed.status_code == 202 and resumed.json()["status"] == "pending"
    checkpoint = Checkpoint.objects.get(run=run, step=2)
    promoted = send(admin, "POST", f"/checkpoints/{checkpoint.pk}/promote", {"name": "from-api"})
    assert promoted.status_code == 201
    assert promoted.json()["name"] == "from-api" and promoted.json()["checkpoint"] == checkpoint.pk
    assert promoted.json()["lineage"]["step"] == 2
    twice = send(admin, "POST", f"/checkpoints/{checkpoint.pk}/promote", {})
    assert twice.status_code == 409 and twice.json()["field"] == "checkpoint"
    bad = send(
        admin, "POST", f"/checkpoints/{Checkpoint.objects.get(run=run, step=3).pk}/promote", {"name": "A B"}
    )
    assert bad.status_code == 400 and bad.json()["field"] == "name"
    assert send(admin, "POST", "/checkpoints/999999/promote", {}).status_code == 404


def test_api_resume_without_checkpoint_is_a_conflict(personas, launch):
    admin = bearer_client(personas.admin)
    run = launch()
    send(admin, "POST", f"/training-runs/{run.pk}/stop")
    response = send(admin, "POST", f"/training-runs/{run.pk}/resume")
    assert response.status_code == 409
    assert response.json()["field"] == "checkpoint"
