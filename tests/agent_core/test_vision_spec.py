"""A vision checkpoint's image settings, read off the checkpoint, agree with its own image processor."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_core.policies.vision import (
    DEFAULT_MAX_PIXELS,
    ImageSpec,
    VisionConfigError,
    context_for,
    image_spec,
)

SCREENS = [(1280, 720), (1920, 1080), (800, 600), (320, 200), (280, 280), (1024, 768), (393, 852)]


@pytest.fixture(scope="module")
def tiny_qwen(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers")
    from agent_core.tiny_models import build_tiny_qwen2_5_vl

    return build_tiny_qwen2_5_vl(tmp_path_factory.mktemp("qvl") / "model", max_pixels=28 * 28 * 256)


@pytest.mark.parametrize("screen", SCREENS)
def test_image_tokens_are_what_the_checkpoints_own_processor_makes(
    tiny_qwen: Path, screen: tuple[int, int]
) -> None:
    from PIL import Image
    from transformers import AutoImageProcessor

    spec = image_spec(tiny_qwen)
    assert spec == ImageSpec(min_pixels=56 * 56, max_pixels=28 * 28 * 256)
    processor = AutoImageProcessor.from_pretrained(str(tiny_qwen))
    grid = processor(images=[Image.new("RGB", screen, "white")], return_tensors="pt")["image_grid_thw"][0]
    t, h, w = (int(x) for x in grid)
    assert spec.image_tokens(*screen) == t * h * w // 4
    assert spec.resized(*screen) == (w * 14, h * 14)


def test_both_file_layouts_and_their_limits_are_read(tmp_path: Path) -> None:
    new = tmp_path / "new"
    new.mkdir()
    (new / "processor_config.json").write_text(
        json.dumps(
            {"image_processor": {"size": {"shortest_edge": 3136, "longest_edge": 401408}, "merge_size": 2}}
        )
    )
    assert image_spec(new) == ImageSpec(min_pixels=3136, max_pixels=401408)
    old = tmp_path / "old"
    old.mkdir()
    (old / "preprocessor_config.json").write_text(json.dumps({"min_pixels": 3136, "max_pixels": 1003520}))
    assert image_spec(old) == ImageSpec(min_pixels=3136, max_pixels=1003520)
    bare = tmp_path / "bare"
    bare.mkdir()
    (bare / "preprocessor_config.json").write_text("{}")
    assert image_spec(bare) == ImageSpec() and ImageSpec().max_pixels == DEFAULT_MAX_PIXELS
    assert image_spec(tmp_path) is None  # no processor config: text-only (or an adapter)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "not readable JSON"),
        ("[1]", "not a JSON object"),
        ('{"min_pixels": -4}', "min_pixels must be a positive integer"),
        ('{"max_pixels": "big"}', "max_pixels must be a positive integer"),
        ('{"min_pixels": 9000, "max_pixels": 100}', "min_pixels 9000 > max_pixels 100"),
    ],
)
def test_a_broken_processor_config_is_a_clear_error_naming_the_file(
    tmp_path: Path, content: str, message: str
) -> None:
    (tmp_path / "preprocessor_config.json").write_text(content)
    with pytest.raises(VisionConfigError, match=message) as err:
        image_spec(tmp_path)
    assert "preprocessor_config.json" in str(err.value)


def test_the_context_fits_the_history_screenshots_the_prompt_and_the_reply() -> None:
    spec = ImageSpec(max_pixels=28 * 28 * 1280)
    per_image = spec.image_tokens(1920, 1080) + 2
    ctx = context_for(spec, screen=(1920, 1080), images=4, text_tokens=2048, max_new_tokens=512)
    assert ctx % 256 == 0 and 4 * per_image + 2560 <= ctx < 4 * per_image + 2560 + 256
    # The failure the default 4096 gave: three 1280x720 screenshots of a 1280-cap model do not fit.
    assert context_for(spec, screen=(1280, 720), images=3) > 4096
    with pytest.raises(ValueError):
        context_for(spec, screen=(1280, 720), images=-1)


def test_a_policy_on_the_checkpoint_clicks_in_the_space_its_processor_resizes_into(tiny_qwen: Path) -> None:
    from agent_core.actions.coords import model_size, to_screen
    from agent_core.policies.local import LocalPolicy
    from agent_core.policies.vision import checkpoint_coords

    policy = LocalPolicy(model_path=tiny_qwen)
    assert policy.coords == "smart_resize:3136:200704" == checkpoint_coords(tiny_qwen, "smart_resize")
    assert checkpoint_coords(tiny_qwen, "relative") == "relative"  # a space the config names stays
    # 1280x720 is seen as 588x336 at this cap: the model's (294, 168) is the screen's centre, where the
    # qwen-vl-utils limits (1288x728) would put it at the top-left quarter.
    assert model_size(screen=(1280, 720), space=policy.coords) == (588, 336)
    assert to_screen(294, 168, screen=(1280, 720), space=policy.coords) == (640, 360)
    assert to_screen(294, 168, screen=(1280, 720), space="smart_resize") == (292, 166)
    with pytest.raises(ValueError, match="smart_resize:<min_pixels>:<max_pixels>"):
        model_size(screen=(1280, 720), space="smart_resize:9:x")


def test_a_tiny_qwen2_vl_trains_on_its_images_too(tmp_path: Path) -> None:
    import torch

    from agent_core.tiny_models import build_tiny_qwen2_5_vl
    from agent_core.training.batching import token_logprobs
    from agent_core.training.model_io import load_policy_model
    from tests.agent_core.training.test_vlm_training import messages

    model_dir = build_tiny_qwen2_5_vl(tmp_path / "q2", qwen2=True)
    codec, model = load_policy_model(model_dir, device="cpu")
    assert (
        type(model).__name__ == "Qwen2VLForConditionalGeneration"
        and codec.processor.name == "Qwen2VLProcessor"
    )
    scores = []
    for colour in ("red", "blue"):
        prompt = codec.prompt_ids(messages(colour), None)
        response = codec.tokenizer("Action: wait()", add_special_tokens=False)["input_ids"]
        ids = torch.tensor([prompt + response])
        with torch.no_grad():
            lp, _ = token_logprobs(model, ids, torch.ones_like(ids), images=codec.images(messages(colour)))
        scores.append(lp[0, -len(response) :])
    assert float((scores[0] - scores[1]).abs().max()) > 1e-4  # the image reaches the model
