"""The launch form says how long an SFT run trains and which of `epochs` and `max_steps` decides it, and
asks the admin to confirm a launch where they disagree (max_steps cuts the epochs asked short, or runs past
them) or where SFT would train on a CT dataset version; the trainer's own count is the reference."""

from __future__ import annotations

import math

import pytest
from django.urls import reverse

from agent_core.training.config import sft_length, validate_config
from tests.conftest import Personas
from tests.factories import make_task
from tests.webapp.datasets.conftest import GOOD, build_episode
from webapp.datasets.models import Dataset, DatasetVersion
from webapp.datasets.services import dataset_version_create
from webapp.training.models import TrainingRun

pytestmark = pytest.mark.django_db


def text(response) -> str:
    return response.content.decode()


def _form(base_policy, pin="flywheel-sft@v1", **config):
    data = {"algorithm": "sft", "name": "long run", "dataset": pin, "base_policy": str(base_policy.pk)}
    data.update({f"cfg_{k}": str(v) for k, v in {"batch_size": 2, **config}.items()})
    return data


def test_the_length_is_the_trainers_count_and_says_which_field_wins() -> None:
    def length(examples, **config):
        return sft_length(validate_config("sft", {"batch_size": 8, **config}), examples)

    # What agent_core.training.sft runs: max_steps when above 0, else ceil(epochs * n / batch).
    by_epochs = length(160, epochs=20)
    assert (by_epochs.by, by_epochs.steps, by_epochs.epochs) == ("epochs", math.ceil(20 * 160 / 8), 20.0)
    assert not by_epochs.disagree
    short = length(160, epochs=20, max_steps=48)  # the run: 20 epochs asked, 48 steps trained
    assert (short.by, short.steps, short.epochs_steps, short.disagree) == ("max_steps", 48, 400, True)
    assert "training stops after 48 optimizer step(s) of 8 = 2.4 epoch(s) of ~160 example(s)" in short.said
    assert "short of the 20 asked (400 steps)" in short.said
    past = length(16, epochs=2, max_steps=100)  # the epochs end first: max_steps goes on past them
    assert past.disagree and "= 50 epoch(s)" in past.said and "end after 4 steps" in past.said
    assert not length(160, epochs=2, max_steps=40).disagree  # the same run either way
    unknown = length(None, epochs=5, max_steps=10)
    assert unknown.disagree and "the dataset's size is not known" in unknown.said


def test_disagreeing_epochs_and_max_steps_are_said_live_and_launch_only_once_confirmed(
    client_for, base_policy, sft_version: DatasetVersion
) -> None:
    client = client_for("admin")
    form = _form(base_policy, epochs=20, max_steps=48)  # 9 steps in the version: 20 epochs = 90 steps
    plan = text(client.get(reverse("training:launch_plan"), form))
    assert 'data-testid="run-length" data-by="max_steps"' in plan
    assert "48 optimizer step(s) of 2 = 10.7 epoch(s) of ~9 example(s)" in plan
    assert 'data-code="length"' in plan and 'data-testid="launch-anyway"' in plan

    refused = client.post(reverse("training:run_launch"), form)
    assert refused.status_code == 400 and not TrainingRun.objects.exists()
    body = text(refused)
    assert 'data-testid="launch-unconfirmed"' in body
    for field in ("epochs", "max_steps"):  # the warning stands beside both fields
        assert f'data-testid="field-warning" data-field="{field}">epochs is 20 and max_steps is 48' in body
    assert 'name="cfg_epochs" value="20"' in body and 'name="cfg_max_steps" value="48"' in body

    wrong = client.post(reverse("training:run_launch"), {**form, "confirm": "ct_data"})  # not this one
    assert wrong.status_code == 400 and not TrainingRun.objects.exists()
    launched = client.post(reverse("training:run_launch"), {**form, "confirm": "length"})
    assert launched.status_code == 302
    run = TrainingRun.objects.get()
    assert (run.config["epochs"], run.config["max_steps"]) == (20.0, 48)


def test_max_steps_with_the_default_epochs_is_said_but_needs_no_confirmation(
    client_for, base_policy, sft_version: DatasetVersion
) -> None:
    client = client_for("admin")
    form = _form(base_policy, max_steps=4)  # the epochs left as they are: the admin asked for steps
    plan = text(client.get(reverse("training:launch_plan"), form))
    assert "training stops after 4 optimizer step(s)" in plan and 'data-testid="launch-anyway"' not in plan
    assert client.post(reverse("training:run_launch"), form).status_code == 302
    epochs_only = text(client.get(reverse("training:launch_plan"), _form(base_policy, epochs=2)))
    assert "epochs decide: 2 epoch(s) of ~9 example(s) = 9 optimizer step(s) of 2" in epochs_only


def test_sft_on_a_ct_version_warns_and_launches_once_confirmed(
    client_for, base_policy, personas: Personas
) -> None:
    task = make_task(platform="desktop", env_profile="desktop", max_steps=6)
    episode = build_episode(task=task, steps=GOOD, annotator=personas.annotator)
    ct = Dataset.objects.create(name="flywheel-ct", kind=Dataset.Kind.CT)
    dataset_version_create(dataset=ct, episodes=[episode], created_by=personas.admin)
    client = client_for("admin")
    form = _form(base_policy, pin="flywheel-ct@v1", max_steps=4)
    plan = text(client.get(reverse("training:launch_plan"), form))
    assert 'data-code="ct_data"' in plan and "is a CT dataset version (continual pre-training" in plan
    refused = client.post(reverse("training:run_launch"), form)
    assert refused.status_code == 400
    assert 'data-testid="field-warning" data-field="dataset">flywheel-ct@v1 is a CT dataset' in text(refused)
    assert not TrainingRun.objects.exists()
    assert client.post(reverse("training:run_launch"), {**form, "confirm": "ct_data"}).status_code == 302
    assert TrainingRun.objects.get().dataset_version.dataset == ct
