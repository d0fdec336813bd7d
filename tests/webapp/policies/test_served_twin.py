"""The served twin of a local policy asks its server for what the local policy would sample."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from webapp.policies.models import PolicyVersion
from webapp.policies.services import served_twin_create

pytestmark = pytest.mark.django_db


def local_policy(tmp_path: Path, name: str, config: dict, *, vision: bool) -> PolicyVersion:
    model = tmp_path / name
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    if vision:
        (model / "preprocessor_config.json").write_text("{}")
    return PolicyVersion.objects.create(name=name, backend="local", model_name=str(model))


def test_a_vision_models_twin_never_samples_an_image_placeholder(tmp_path: Path) -> None:
    vlm = local_policy(tmp_path, "vlm", {"image_token_index": 7, "model_type": "llava"}, vision=True)
    twin = served_twin_create(local=vlm)
    assert twin.config["extra_body"] == {"return_token_ids": True, "logit_bias": {"7": -100}}
    text = local_policy(tmp_path, "text", {"model_type": "llama"}, vision=False)
    twin = served_twin_create(local=text)
    assert twin.config["extra_body"] == {"return_token_ids": True} and twin.config["text_only"]
