"""Parameter interpolation of tiny real checkpoints, and every mismatch it must refuse."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from torch.testing import assert_close

# huggingface_hub reads these when it is first imported: set them before anything imports it.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from safetensors.torch import load_file, save_file  # noqa: E402

from agent_core.rl import InterpolationError, interpolate_checkpoints, interpolate_state_dicts  # noqa: E402
from agent_core.tiny_models import build_tiny_causal_lm  # noqa: E402


def mergeable_models(root: Path) -> dict[str, Path]:
    """Two tiny checkpoints of one architecture (different seeds) and a narrower one."""
    return {
        "a": build_tiny_causal_lm(root / "a", seed=1),
        "b": build_tiny_causal_lm(root / "b", seed=2),
        "narrow": build_tiny_causal_lm(root / "narrow", seed=3, hidden_size=32),
    }


@pytest.fixture(scope="module")
def models(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("interp")
    built = mergeable_models(root)
    # A trainer checkpoint also holds optimizer state, which a merge must not carry over.
    (built["a"] / "trainer_state.pt").write_bytes(b"optimizer state")
    return {**built, "root": root}


def test_merge_is_the_weighted_average_and_loads_back(models: dict[str, Path], tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM

    out = interpolate_checkpoints([models["a"], models["b"]], [0.25, 0.75], tmp_path / "merged")
    sd_a = load_file(str(models["a"] / "model.safetensors"))
    sd_b = load_file(str(models["b"] / "model.safetensors"))
    merged = load_file(str(out / "model.safetensors"))
    assert merged.keys() == sd_a.keys()
    assert any(not torch.equal(sd_a[k], sd_b[k]) for k in sd_a)  # the seeds really differ
    for key, tensor in merged.items():
        assert_close(tensor, 0.25 * sd_a[key] + 0.75 * sd_b[key])

    lineage = json.loads((out / "flywheel_lineage.json").read_text())
    assert lineage == {
        "base": None,
        "merged_from": [str(models["a"]), str(models["b"])],
        "weights": [0.25, 0.75],
    }
    assert (out / "tokenizer.json").is_file() and (out / "config.json").is_file()
    assert not (out / "trainer_state.pt").exists()

    model = AutoModelForCausalLM.from_pretrained(str(out), local_files_only=True)
    loaded = model.state_dict()
    assert_close(loaded["model.embed_tokens.weight"], merged["model.embed_tokens.weight"])


def test_sharded_checkpoints_merge_like_single_files(models: dict[str, Path], tmp_path: Path) -> None:
    sharded = tmp_path / "b-sharded"
    shutil.copytree(models["b"], sharded)
    sd = load_file(str(sharded / "model.safetensors"))
    (sharded / "model.safetensors").unlink()
    keys = sorted(sd)
    weight_map = {}
    for i, part in enumerate((keys[: len(keys) // 2], keys[len(keys) // 2 :])):
        name = f"model-0000{i + 1}-of-00002.safetensors"
        save_file({k: sd[k] for k in part}, str(sharded / name), metadata={"format": "pt"})
        weight_map |= dict.fromkeys(part, name)
    (sharded / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {}, "weight_map": weight_map})
    )

    single = interpolate_checkpoints([models["a"], models["b"]], [0.5, 0.5], tmp_path / "single")
    split = interpolate_checkpoints([models["a"], sharded], [0.5, 0.5], tmp_path / "split")
    want, got = load_file(str(single / "model.safetensors")), load_file(str(split / "model.safetensors"))
    assert want.keys() == got.keys()
    for key in want:
        assert torch.equal(want[key], got[key])


def test_a_different_architecture_is_refused_naming_the_key(models: dict[str, Path], tmp_path: Path) -> None:
    with pytest.raises(InterpolationError, match="hidden_size: 64 vs 32"):
        interpolate_checkpoints([models["a"], models["narrow"]], [0.5, 0.5], tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("weights", "message"),
    [([0.5, 0.4], "sum to 0.9"), ([1.5, -0.5], "weight 1 is -0.5"), ([1.0], "1 weights for 2 checkpoints")],
)
def test_bad_weights_are_refused(
    models: dict[str, Path], tmp_path: Path, weights: list[float], message: str
) -> None:
    with pytest.raises(InterpolationError, match=message):
        interpolate_checkpoints([models["a"], models["b"]], weights, tmp_path / "out")


def test_declared_bases_must_agree(models: dict[str, Path], tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    shutil.copytree(models["a"], a)
    shutil.copytree(models["b"], b)
    (a / "flywheel_lineage.json").write_text(json.dumps({"base": "ui-tars-7b"}))
    (b / "flywheel_lineage.json").write_text(json.dumps({"base": "qwen-7b"}))
    with pytest.raises(InterpolationError, match="'ui-tars-7b'.*'qwen-7b'"):
        interpolate_checkpoints([a, b], [0.5, 0.5], tmp_path / "out")

    (b / "flywheel_lineage.json").write_text(json.dumps({"base": "ui-tars-7b"}))
    out = interpolate_checkpoints([a, b], [0.5, 0.5], tmp_path / "out")
    assert json.loads((out / "flywheel_lineage.json").read_text())["base"] == "ui-tars-7b"


def test_an_existing_output_is_not_overwritten(models: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(InterpolationError, match="not empty"):
        interpolate_checkpoints([models["a"], models["b"]], [0.5, 0.5], tmp_path / "out")
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"


def test_state_dicts_must_have_the_same_keys_shapes_and_dtypes() -> None:
    one = {"w": torch.ones(2, 2), "b": torch.zeros(2)}
    with pytest.raises(InterpolationError, match="checkpoint 1 lacks tensor 'b'"):
        interpolate_state_dicts([one, {"w": torch.ones(2, 2)}], [0.5, 0.5])
    with pytest.raises(InterpolationError, match="checkpoint 1 has tensor 'extra'"):
        interpolate_state_dicts([one, {**one, "extra": torch.ones(1)}], [0.5, 0.5])
    with pytest.raises(InterpolationError, match=r"'w' has shape \(2, 2\) in checkpoint 0 but \(2, 3\)"):
        interpolate_state_dicts([one, {**one, "w": torch.ones(2, 3)}], [0.5, 0.5])
    with pytest.raises(
        InterpolationError, match="'w' has dtype torch.float32 in checkpoint 0 but torch.float16"
    ):
        interpolate_state_dicts([one, {**one, "w": torch.ones(2, 2, dtype=torch.float16)}], [0.5, 0.5])


def test_state_dicts_average_floats_and_copy_equal_integers() -> None:
    ids = torch.arange(3)
    a = {"w": torch.tensor([0.0, 4.0]), "ids": ids}
    b = {"w": torch.tensor([8.0, 0.0]), "ids": ids.clone()}
    merged = interpolate_state_dicts([a, b], [0.25, 0.75])
    # 0.25 * [0, 4] + 0.75 * [8, 0] = [6, 1]
    assert_close(merged["w"], torch.tensor([6.0, 1.0]))
    assert torch.equal(merged["ids"], ids) and merged["ids"] is not ids
    with pytest.raises(InterpolationError, match="non-floating tensor 'ids' differs"):
        interpolate_state_dicts([a, {**b, "ids": torch.tensor([0, 1, 5])}], [0.5, 0.5])
