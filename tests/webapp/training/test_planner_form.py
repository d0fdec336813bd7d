"""The launch form's memory plan: it shows the estimate against the training workers' devices, and the
form and the API refuse a run that cannot fit, naming the field to change and what would fit."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from agent_core.training.planner import GIB
from tests.agent_core.training.test_planner import QWEN2_7B
from tests.procs import celery_worker, child_db_env, wait_for
from tests.webapp.api.helpers import bearer_client, send
from webapp.policies.models import PolicyVersion
from webapp.training.models import TrainingRun, TrainingWorker
from webapp.training.workers import training_worker_report

pytestmark = pytest.mark.django_db

A100_40 = {"kind": "cuda", "name": "NVIDIA A100-SXM4-40GB", "memory": 40 * GIB}
HOST_RAM = {"kind": "cpu", "name": "cpu", "memory": 503 * GIB}
# Full fine-tuning of a 7B model in bfloat16 at one sample of 2048 tokens: about 75 GiB.
FULL = {"dtype": "bfloat16", "batch_size": 1, "max_steps": 4}


@pytest.fixture
def qwen7b(tmp_path) -> PolicyVersion:
    """A local policy whose model directory holds Qwen2-7B's config.json (the planner reads no weights)."""
    model = tmp_path / "qwen2-7b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN2_7B))
    return PolicyVersion.objects.create(name="qwen2-7b", backend="local", model_name=str(model))


@pytest.fixture
def gpu_worker() -> TrainingWorker:
    return training_worker_report(name="training@gpu-1", devices=[A100_40, HOST_RAM])


def _body(policy, **config):
    return {
        "algorithm": "sft",
        "name": "7b sft",
        "dataset": "flywheel-sft@v1",
        "base_policy": policy.pk,
        "config": {**FULL, **config},
    }


def _form(policy, **config):
    data = {"algorithm": "sft", "name": "7b sft", "dataset": "flywheel-sft@v1", "base_policy": str(policy.pk)}
    data.update({f"cfg_{k}": str(v) for k, v in {**FULL, **config}.items()})
    return data


def test_the_form_shows_the_estimate_and_whether_it_fits(client_for, qwen7b, gpu_worker):
    client = client_for("admin")
    full = client.get(reverse("training:launch_plan"), _form(qwen7b)).content.decode()
    assert 'data-fits="no"' in full
    assert "est. 75.0 GiB per process: 7,615,616,512 parameters, full, bfloat16, 1 × 2048" in full
    assert "NVIDIA A100-SXM4-40GB on training@gpu-1 (40.0 GiB)" in full
    assert "use LoRA r=16: set lora to on (est. 28.9 GiB)" in full
    assert "per optimizer step at full length (a rough estimate: 6 × parameters FLOPs" in full
    lora = client.get(reverse("training:launch_plan"), _form(qwen7b, lora="on")).content.decode()
    assert 'data-fits="yes"' in lora and "fits NVIDIA A100-SXM4-40GB on training@gpu-1" in lora
    assert "LoRA r=16 (40,370,176 trained)" in lora


def test_the_launch_page_carries_the_plan_and_asks_for_a_policy_first(client_for, qwen7b):
    page = client_for("admin").get(reverse("training:run_list")).content.decode()
    assert 'data-testid="launch-plan"' in page and "choose a base policy to see its estimate" in page
    bad = client_for("admin").get(reverse("training:launch_plan"), _form(qwen7b, lr="-1")).content.decode()
    assert "no estimate until the config is valid (lr: must be at least" in bad


def test_the_api_refuses_an_oversize_run_with_400_naming_the_field(personas, qwen7b, sft_version, gpu_worker):
    response = send(bearer_client(personas.admin), "POST", "/training-runs", _body(qwen7b))
    assert response.status_code == 400
    body = response.json()
    assert body["field"] == "lora"
    message = body["errors"][0]["message"]
    assert message.startswith("needs est. 75.0 GiB per process (full, bfloat16, 1 × 2048 tokens per forward)")
    assert "more than the largest training device, NVIDIA A100-SXM4-40GB on training@gpu-1" in message
    assert "use LoRA r=16: set lora to on (est. 28.9 GiB)" in message
    assert not TrainingRun.objects.exists()


def test_a_run_that_fits_launches(personas, qwen7b, sft_version, gpu_worker):
    response = send(bearer_client(personas.admin), "POST", "/training-runs", _body(qwen7b, lora="on"))
    assert response.status_code == 202
    assert TrainingRun.objects.get().config["lora"] == "on"


def test_the_form_post_refuses_it_beside_the_field(client_for, qwen7b, sft_version, gpu_worker):
    response = client_for("admin").post(reverse("training:run_launch"), _form(qwen7b))
    assert response.status_code == 400
    page = response.content.decode()
    assert 'data-testid="field-error" data-field="lora">needs est. 75.0 GiB per process' in page
    assert 'data-fits="no"' in page and not TrainingRun.objects.exists()


def test_without_a_live_worker_nothing_is_refused_and_the_form_says_why(
    client_for, personas, qwen7b, sft_version
):
    plan = client_for("admin").get(reverse("training:launch_plan"), _form(qwen7b)).content.decode()
    assert "no training worker has reported its devices" in plan and 'data-fits="unknown"' in plan
    # A worker silent for longer than TRAINING_WORKER_STALE_S no longer counts.
    training_worker_report(name="training@gone", devices=[A100_40])
    TrainingWorker.objects.update(reported_at=timezone.now() - timedelta(minutes=10))
    response = send(bearer_client(personas.admin), "POST", "/training-runs", _body(qwen7b))
    assert response.status_code == 202


def test_a_cpu_run_shares_the_hosts_ram_between_its_processes(personas, qwen7b, sft_version):
    training_worker_report(name="training@cpu", devices=[{"kind": "cpu", "name": "cpu", "memory": 48 * GIB}])
    admin = bearer_client(personas.admin)
    config = {"lora": "on", "batch_size": 2, "device": "cpu"}
    one = send(admin, "POST", "/training-runs", _body(qwen7b, **config))
    assert one.status_code == 202  # ~40 GiB in one process
    two = send(admin, "POST", "/training-runs", _body(qwen7b, processes=2, **config))
    assert two.status_code == 400  # ~29 GiB each, twice
    message = two.json()["detail"]
    assert "the RAM of training@cpu (48.0 GiB shared by 2 process(es), 24.0 GiB each)" in message
    assert "each of the 2 holds a whole copy of the model" in message


@pytest.mark.parametrize("persona", ["researcher", "annotator", "outsider"])
def test_only_those_who_launch_see_the_plan(client_for, persona, qwen7b):
    assert client_for(persona).get(reverse("training:launch_plan"), _form(qwen7b)).status_code == 403


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
def test_a_real_training_worker_reports_its_devices_and_withdraws_them_on_shutdown(tmp_path):
    import psutil

    env = child_db_env()
    with celery_worker(tmp_path, queues="training", pool="solo", label="devices", env=env):
        worker = wait_for(lambda: TrainingWorker.objects.first(), timeout=120, interval=0.2)
        assert worker is not None and worker.name.startswith("devices-") and worker.error == ""
        cpu = [d for d in worker.devices if d["kind"] == "cpu"]
        assert cpu == [{"kind": "cpu", "name": "cpu", "memory": psutil.virtual_memory().total}]
    assert wait_for(lambda: not TrainingWorker.objects.exists(), timeout=10)
