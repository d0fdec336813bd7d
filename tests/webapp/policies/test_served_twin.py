"""The served twin of a local policy asks its server for what the local policy would sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webapp.policies.models import PolicyVersion
from webapp.policies.services import served_twin_create

pytestmark = pytest.mark.django_db


def local_policy(
    tmp_path: Path, name: str, config: dict, *, vision: bool, processor_file: str = "preprocessor_config.json"
) -> PolicyVersion:
    model = tmp_path / name
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    if vision and processor_file:
        (model / processor_file).write_text("{}")
    return PolicyVersion.objects.create(name=name, backend="local", model_name=str(model))


def test_a_vision_models_twin_never_samples_an_image_placeholder(tmp_path: Path) -> None:
    vlm = local_policy(tmp_path, "vlm", {"image_token_index": 7, "model_type": "llava"}, vision=True)
    twin = served_twin_create(local=vlm)
    assert twin.config["extra_body"] == {"return_token_ids": True, "logit_bias": {"7": -100}}
    text = local_policy(tmp_path, "text", {"model_type": "llama"}, vision=False)
    twin = served_twin_create(local=text)
    assert twin.config["extra_body"] == {"return_token_ids": True} and twin.config["text_only"]


@pytest.mark.parametrize("processor_file", ["processor_config.json", "preprocessor_config.json", ""])
def test_vision_is_read_off_the_checkpoint_whatever_file_its_transformers_wrote(
    tmp_path: Path, processor_file: str
) -> None:
    """transformers 5 saves processor_config.json, older releases preprocessor_config.json; a Qwen-VL
    checkpoint says vision in config.json too. Each is served with images, never text_only."""
    config = {"model_type": "qwen2_5_vl", "image_token_id": 9, "vision_config": {"depth": 1}}
    vlm = local_policy(tmp_path, "vlm", config, vision=True, processor_file=processor_file)
    twin = served_twin_create(local=vlm)
    assert "text_only" not in twin.config
    assert twin.config["extra_body"]["logit_bias"] == {"9": -100}
    # Its clicks are read in the space its processor resizes into (transformers' limits when the file
    # names none); without a processor file the space stays as the config says.
    assert twin.config["coords"] == ("smart_resize:3136:1003520" if processor_file else "smart_resize")


@pytest.mark.parametrize(
    ("config", "needle"),
    [
        ({"prompt": "qwen2.5-vl", "output_format": "uitars"}, "asks for output_format 'tool_calls'"),
        ({"prompt": "gpt-4o"}, "gpt-4o"),
        ({"output_format": 5}, "output_format must be a string"),
        ({"coords": "smart_resize:9:1"}, "is not a coordinate space"),
    ],
)
def test_a_policy_config_is_checked_when_saved_through_a_form(config: dict, needle: str) -> None:
    """The admin's form calls full_clean: a bad prompt family, output format or space names the key."""
    from django.core.exceptions import ValidationError

    from webapp.policies.models import PolicyVersion

    version = PolicyVersion(name="p", backend=PolicyVersion.Backend.OPENAI, model_name="m", config=config)
    with pytest.raises(ValidationError) as info:
        version.clean()
    assert needle in str(info.value.message_dict["config"])
    PolicyVersion(name="q", backend="openai", model_name="m", config={"prompt": "qwen2.5-vl"}).clean()
