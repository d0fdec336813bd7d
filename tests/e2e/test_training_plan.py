"""The launch form's memory plan in a real browser: it follows the fields as they change (htmx), says a
7B full fine-tune does not fit the workers' largest GPU and what would, and a launch of it is refused
beside the field to change."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from playwright.sync_api import expect

from agent_core.training.planner import GIB
from tests.agent_core.training.test_planner import QWEN2_7B
from tests.conftest import Personas
from tests.e2e.conftest import OpenAs
from tests.factories import make_task
from tests.webapp.datasets.conftest import GOOD, build_episode
from webapp.datasets.models import Dataset
from webapp.datasets.services import dataset_version_create
from webapp.policies.models import PolicyVersion
from webapp.training.models import TrainingRun
from webapp.training.workers import training_worker_report

pytestmark = pytest.mark.slow


def test_the_plan_follows_the_form_and_an_oversize_launch_is_refused(open_as: OpenAs, tmp_path: Path) -> None:
    model = tmp_path / "qwen2-7b"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(QWEN2_7B))
    policy = PolicyVersion.objects.create(name="qwen2-7b", backend="local", model_name=str(model))
    gpu = {"kind": "cuda", "name": "NVIDIA A100-SXM4-40GB", "memory": 40 * GIB}
    training_worker_report(name="training@gpu-1", devices=[gpu])

    admin = open_as("admin")
    admin.goto("/training/")
    plan = admin.get_by_test_id("launch-plan")
    expect(plan).to_contain_text("choose a base policy")
    form = admin.get_by_test_id("launch-form")
    form.get_by_test_id("run-name").fill("7b sft")
    form.locator('[name="cfg_dtype"]').select_option("bfloat16")
    form.locator('[name="cfg_batch_size"]').fill("1")
    form.get_by_test_id("base-policy").select_option(str(policy.pk))  # a change: the plan follows
    expect(plan).to_have_attribute("data-fits", "no")
    expect(admin.get_by_test_id("plan-summary")).to_contain_text("est. 75.0 GiB per process")
    expect(admin.get_by_test_id("plan-verdict")).to_contain_text("set lora to on (est. 28.9 GiB)")

    form.locator('[name="cfg_lora"]').select_option("on")
    expect(plan).to_have_attribute("data-fits", "yes")
    expect(admin.get_by_test_id("plan-verdict")).to_contain_text("fits NVIDIA A100-SXM4-40GB")

    form.locator('[name="cfg_lora"]').select_option("off")
    expect(plan).to_have_attribute("data-fits", "no")
    admin.get_by_test_id("launch-submit").click()
    field_error = admin.locator('[data-testid="field-error"][data-field="lora"]')
    expect(field_error).to_contain_text("needs est. 75.0 GiB per process")
    assert not TrainingRun.objects.exists()


def test_the_form_says_when_max_steps_overrides_the_epochs_and_launches_once_confirmed(
    open_as: OpenAs, personas: Personas, tmp_path: Path
) -> None:
    model = tmp_path / "base"
    model.mkdir()
    policy = PolicyVersion.objects.create(name="tiny-base", backend="local", model_name=str(model))
    task = make_task(platform="desktop", env_profile="desktop", max_steps=6)
    episodes = [build_episode(task=task, steps=GOOD, annotator=personas.annotator) for _ in range(2)]
    dataset = Dataset.objects.create(name="flywheel-sft", kind=Dataset.Kind.SFT)
    dataset_version_create(dataset=dataset, episodes=episodes, created_by=personas.admin)  # 6 steps

    admin = open_as("admin")
    admin.goto("/training/")
    form = admin.get_by_test_id("launch-form")
    form.get_by_test_id("run-name").fill("twenty epochs")
    form.get_by_test_id("dataset").fill("flywheel-sft@v1")
    form.locator('[name="cfg_batch_size"]').fill("2")
    form.locator('[name="cfg_epochs"]').fill("20")
    form.locator('[name="cfg_max_steps"]').fill("12")
    form.get_by_test_id("base-policy").select_option(str(policy.pk))  # a change: the plan follows
    length = admin.get_by_test_id("run-length")
    expect(length).to_have_attribute("data-by", "max_steps")
    expect(length).to_contain_text("12 optimizer step(s) of 2 = 4 epoch(s) of ~6 example(s)")
    expect(length).to_contain_text("short of the 20 asked (60 steps)")
    admin.get_by_test_id("launch-submit").click()
    expect(admin.get_by_test_id("launch-unconfirmed")).to_be_visible()
    expect(admin.locator('[data-testid="field-warning"][data-field="epochs"]')).to_contain_text(
        "max_steps is 12"
    )
    assert not TrainingRun.objects.exists()
    admin.get_by_test_id("launch-anyway").click()
    expect(admin.get_by_role("heading", level=1)).to_contain_text("twenty epochs")
    run = TrainingRun.objects.get()
    assert (run.config["epochs"], run.config["max_steps"]) == (20.0, 12)
