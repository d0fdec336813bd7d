"""LoRA adapters in the web app: a run starts from an adapter policy, an adapter checkpoint is promoted to
a local policy that rolls out, two adapters of one base merge, and the launch form offers the settings."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path
from typing import Any

import pytest
from django.urls import reverse

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from agent_core.training.checkpoints import ADAPTER_CONFIG, ADAPTER_WEIGHTS, adapter_base  # noqa: E402
from tests.agent_core.test_policy_local import policy_input  # noqa: E402
from tests.agent_core.training.test_adapter_merge import make_adapter  # noqa: E402
from tests.conftest import Personas  # noqa: E402
from tests.webapp.api.helpers import bearer_client, send  # noqa: E402
from tests.webapp.pages.html import text  # noqa: E402
from webapp.policies.models import PolicyVersion  # noqa: E402
from webapp.policies.runtime import policy_for  # noqa: E402
from webapp.training.merging import policy_merge_execute  # noqa: E402
from webapp.training.models import Checkpoint, TrainingRun  # noqa: E402
from webapp.training.promotion import checkpoint_promote  # noqa: E402
from webapp.training.services import TrainingRunError  # noqa: E402

torch = pytest.importorskip("torch")
safetensors_torch = pytest.importorskip("safetensors.torch")
pytestmark = pytest.mark.django_db


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    from agent_core.tiny_models import build_tiny_causal_lm

    root = tmp_path_factory.mktemp("lora-web")
    base = build_tiny_causal_lm(root / "base", seed=1, hidden_size=32, num_layers=1)
    other = build_tiny_causal_lm(root / "other", seed=2, hidden_size=32, num_layers=1)
    return {
        "base": base,
        "a": make_adapter(base, root / "a", seed=1),
        "b": make_adapter(base, root / "b", seed=2),
        "other": make_adapter(other, root / "on-other", seed=3),
    }


def adapter_checkpoint(run: TrainingRun, adapter: Path, step: int) -> Checkpoint:
    """A checkpoint row of `run` whose directory holds `adapter`, as a LoRA run writes it."""
    relative = f"{run.out_dir}/checkpoints/step-{step:06d}"
    shutil.copytree(adapter, run.path(relative))
    return Checkpoint.objects.create(run=run, step=step, path=relative)


def with_base(adapter: Path, base: str, where: Path) -> Path:
    """A copy of `adapter` whose adapter_config.json names `base`."""
    shutil.copytree(adapter, where)
    config = json.loads((where / ADAPTER_CONFIG).read_text())
    (where / ADAPTER_CONFIG).write_text(json.dumps({**config, "base_model_name_or_path": base}))
    return where


# --- promotion -------------------------------------------------------------------------------------


def test_an_adapter_checkpoint_becomes_a_local_policy_that_rolls_out(launch, personas, models):
    run = launch()
    checkpoint = adapter_checkpoint(run, models["a"], 4)
    policy = checkpoint_promote(checkpoint=checkpoint, by=personas.admin)
    assert (policy.backend, policy.checkpoint) == ("local", checkpoint)
    assert policy.model_dir() == run.path(checkpoint.path) and adapter_base(policy.model_dir()) is not None
    assert policy.lineage["lora_adapter"] is True
    assert policy.lineage["adapter_base"] == str(models["base"].resolve())
    local = policy_for(policy)  # LocalPolicy on the adapter, merged into its base
    try:
        assert local.act(policy_input()).token_ids
    finally:
        local.close()


def test_promotion_refuses_a_checkpoint_whose_files_or_base_are_gone(launch, personas, models, tmp_path):
    run = launch()
    pruned = adapter_checkpoint(run, models["a"], 2)
    shutil.rmtree(run.path(pruned.path))
    with pytest.raises(TrainingRunError) as gone:
        checkpoint_promote(checkpoint=pruned, by=personas.admin)
    assert gone.value.field == "checkpoint" and "its directory" in str(gone.value)
    assert "is gone (deleted, or pruned by keep_checkpoints)" in str(gone.value)
    orphan = adapter_checkpoint(run, with_base(models["a"], str(tmp_path / "deleted"), tmp_path / "x"), 4)
    r = send(bearer_client(personas.admin), "POST", f"/checkpoints/{orphan.pk}/promote", {"name": "orphan"})
    assert r.status_code == 409 and r.json()["field"] == "checkpoint", r.json()
    assert f"LoRA adapter whose base model {tmp_path / 'deleted'} is gone" in r.json()["detail"]
    assert not PolicyVersion.objects.filter(checkpoint__run=run).exists()


# --- a run from an adapter -------------------------------------------------------------------------


def test_a_run_starts_from_an_adapter_policy_unless_its_base_is_gone(launch, models, tmp_path):
    adapter = PolicyVersion.objects.create(name="sft-lora", backend="local", model_name=str(models["a"]))
    run = launch(base_policy=adapter, config={"lora": "on", "lora_r": 8, "max_steps": 2})
    assert run.config["lora"] == "on" and run.base_policy == adapter
    orphan = with_base(models["a"], str(tmp_path / "deleted"), tmp_path / "orphan")
    broken = PolicyVersion.objects.create(name="orphan", backend="local", model_name=str(orphan))
    with pytest.raises(TrainingRunError) as refused:
        launch(base_policy=broken, name="again")
    assert refused.value.field == "base_policy"
    assert str(refused.value).startswith("base_policy: orphan is a LoRA adapter whose base model")


# --- merging ---------------------------------------------------------------------------------------


def post_merge(user: Any, sources: list[tuple[str, float]]) -> Any:
    body = {"sources": [{"policy": p, "weight": w} for p, w in sources]}
    return send(bearer_client(user), "POST", "/policy-merges", body)


@pytest.fixture
def adapter_policies(models: dict[str, Path]) -> dict[str, PolicyVersion]:
    made = {"lora-a": "a", "lora-b": "b", "lora-other": "other", "full": "base"}
    return {
        name: PolicyVersion.objects.create(name=name, backend="local", model_name=str(models[key]))
        for name, key in made.items()
    }


def test_two_adapters_of_one_base_merge_into_an_adapter_policy(
    personas: Personas, adapter_policies: Any, models: dict[str, Path], queued: Any,
    django_capture_on_commit_callbacks: Any,
) -> None:  # fmt: skip
    with django_capture_on_commit_callbacks(execute=True):
        r = post_merge(personas.admin, [("lora-a", 0.5), ("lora-b", 0.5)])
    assert r.status_code == 202, r.content
    merge = policy_merge_execute(merge_id=r.json()["id"])
    assert merge is not None and merge.status == "finished", merge and merge.error
    out = merge.policy.model_dir()
    assert adapter_base(out) == models["base"].resolve() and not (out / "model.safetensors").exists()
    a, b, merged = (
        safetensors_torch.load_file(str(p / ADAPTER_WEIGHTS)) for p in (models["a"], models["b"], out)
    )
    for key, tensor in merged.items():
        torch.testing.assert_close(tensor, 0.5 * a[key] + 0.5 * b[key])
    local = policy_for(merge.policy)
    try:
        assert local.act(policy_input()).token_ids
    finally:
        local.close()


@pytest.mark.parametrize(
    ("sources", "message"),
    [
        ([("lora-a", 0.5), ("full", 0.5)], "policy lora-a is a LoRA adapter and policy full a full model"),
        (
            [("lora-a", 0.5), ("lora-other", 0.5)],
            "adapters of different bases cannot be merged: policy lora-a",
        ),
    ],
)
def test_an_adapter_merges_only_with_adapters_of_its_base(
    personas: Personas, adapter_policies: Any, sources: list[tuple[str, float]], message: str
) -> None:
    r = post_merge(personas.admin, sources)
    assert r.status_code == 400 and r.json()["field"] == "sources", r.content
    assert message in r.json()["detail"], r.json()


# --- the launch form -------------------------------------------------------------------------------


def test_launch_form_offers_lora_and_names_a_rank_vllm_cannot_serve(client_for, base_policy, sft_version):
    client = client_for("admin")
    body = text(client.get(reverse("training:run_list")))
    assert '<select id="id_cfg_lora" name="cfg_lora"><option selected>off</option><option>on</option>' in body
    assert "<option selected>16</option>" in body and 'name="cfg_lora_targets"' in body
    form = {"algorithm": "sft", "name": "lora from the page", "dataset": "flywheel-sft@v1",
            "base_policy": str(base_policy.pk), "cfg_lora": "on", "cfg_lora_r": "12"}  # fmt: skip
    refused = client.post(reverse("training:run_launch"), form)
    assert refused.status_code == 400
    assert 'data-field="lora_r">must be one of 8, 16, 32, 64, 128, 256, got 12' in text(refused)
    assert client.post(reverse("training:run_launch"), {**form, "cfg_lora_r": "32"}).status_code == 302
    assert TrainingRun.objects.get().config["lora_r"] == 32


# --- a vision-language policy, trained for real -------------------------------------------------------


@pytest.mark.slow
def test_a_tiny_vlm_lora_sft_run_trains_is_promoted_and_acts_on_a_screenshot(
    personas: Personas, sft_version: Any, tmp_path: Path, client_for: Any
) -> None:
    from agent_core.tiny_models import build_tiny_vlm
    from webapp.training import services

    vlm = build_tiny_vlm(tmp_path / "tiny-vlm", hidden_size=32, num_layers=1)
    base = PolicyVersion.objects.create(
        name="tiny-vlm", backend="local", model_name=str(vlm), config={"max_new_tokens": 8}
    )
    # Launched as the form launches it (the run page follows), trained by the real trainer.
    config = {"max_steps": 2, "checkpoint_every": 2, "batch_size": 1, "lora": "on", "lora_r": 8}
    posted = {"algorithm": "sft", "name": "vlm lora", "base_policy": base.pk, "dataset": "flywheel-sft@v1"}
    r = client_for("admin").post(
        reverse("training:run_launch"), posted | {f"cfg_{k}": str(v) for k, v in config.items()}
    )
    assert r.status_code in (302, 303), r.content[:800]
    run = TrainingRun.objects.get(name="vlm lora")
    assert services.training_run_execute(run_id=run.pk, worker="w1").status == "finished"
    checkpoint = run.checkpoints.order_by("-step").first()
    assert checkpoint is not None and checkpoint.step == 2
    policy = checkpoint_promote(checkpoint=checkpoint, by=personas.admin)
    assert adapter_base(policy.model_dir()) == vlm.resolve() and policy.lineage["lora_adapter"] is True
    local = policy_for(policy)
    try:
        out = local.act(policy_input())  # the screenshot goes through the adapter's vision tower
        assert out.token_ids and len(out.logprobs) == len(out.token_ids)
    finally:
        local.close()
