"""`python -m agent_core.serving` sizes the engine for the checkpoint it serves."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_core.serving.__main__ import _args, engine_spec


def model_dir(tmp_path: Path, *, vision: bool, processor: str = "") -> Path:
    root = tmp_path / ("vlm" if vision else "text")
    root.mkdir()
    (root / "config.json").write_text(json.dumps({"model_type": "qwen2_5_vl" if vision else "qwen2"}))
    if vision:
        (root / "preprocessor_config.json").write_text(
            processor or json.dumps({"min_pixels": 3136, "max_pixels": 28 * 28 * 1280, "merge_size": 2})
        )
    return root


def spec_for(model: Path, *more: str):
    return engine_spec(_args(["--model", str(model), "--served-name", "m", "--name", "s", *more]))


def test_a_text_model_keeps_the_default_context_and_no_image_arguments(tmp_path: Path) -> None:
    spec = spec_for(model_dir(tmp_path, vision=False))
    assert spec.max_model_len == 4096 and "--limit-mm-per-prompt" not in spec.extra_args


def test_a_vlm_gets_room_for_its_history_screenshots_and_its_checkpoints_pixel_limits(tmp_path: Path) -> None:
    model = model_dir(tmp_path, vision=True)
    spec = spec_for(model, "--screen", "1280x720", "--history-images", "3")
    # 1280x720 at 28*28*1280 pixels is 1,196 image tokens (the figure vLLM gave): four of them do not
    # fit the 4096 that failed a served episode at its third step.
    assert spec.max_model_len >= 4 * 1198 + 2048 + 512 > 4096
    args = list(spec.extra_args)
    assert json.loads(args[args.index("--mm-processor-kwargs") + 1]) == {
        "min_pixels": 3136,
        "max_pixels": 1003520,
    }
    assert json.loads(args[args.index("--limit-mm-per-prompt") + 1]) == {"image": 4, "video": 0}
    # An explicit context wins; vLLM arguments after -- come after the derived ones (vLLM: last wins).
    spec = spec_for(model, "--max-model-len", "32768", "--", "--limit-mm-per-prompt", '{"image": 8}')
    assert spec.max_model_len == 32768 and list(spec.extra_args)[-2:] == [
        "--limit-mm-per-prompt",
        '{"image": 8}',
    ]


@pytest.mark.parametrize(
    ("more", "processor", "message"),
    [
        (["--screen", "wide"], "", "--screen: WxH"),
        (["--screen", "0x720"], "", "--screen: WxH, both positive"),
        (["--history-images", "-1"], "", "--history-images: 0 or more"),
        (
            [],
            '{"max_pixels": "lots"}',
            "--model: .*preprocessor_config.json: max_pixels must be a positive integer",
        ),
    ],
)
def test_bad_arguments_stop_with_a_message_naming_them(tmp_path: Path, more, processor, message) -> None:
    with pytest.raises(SystemExit, match=message):
        spec_for(model_dir(tmp_path, vision=True, processor=processor), *more)
