"""Qwen2-VL / Qwen2.5-VL prompts as their processor builds them, without transformers' processor class.

transformers' Qwen2_5_VLProcessor cannot be made without torchvision (its video processor needs it), and
the project's environment does not carry torchvision (it costs every process that imports transformers
seconds). A prompt of these models is simple to build exactly: the chat template's text, each
`<|image_pad|>` repeated once per merged patch of its image (grid t·h·w / merge²), the image processor's
pixel_values and image_grid_thw, and `mm_token_type_ids` (1 on image tokens) from which the model places
its multimodal rotary positions. vLLM builds the same ids (tests/agent_core/serving/test_vllm_vision_real.py
compares them), so trainer and engine read the same tokens.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from agent_core.training.errors import lazy

QWEN_VL_PROCESSORS = ("Qwen2VLProcessor", "Qwen2_5_VLProcessor")
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"


def processor_class(model_dir: str | Path) -> str | None:
    """The processor class a checkpoint names (preprocessor, processor or tokenizer config), if any."""
    root = Path(model_dir)
    for name in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        try:
            data = json.loads((root / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and isinstance(data.get("processor_class"), str):
            return str(data["processor_class"])
    return None


class QwenVLProcessor:
    """The tokenizer and image processor of a Qwen-VL checkpoint, called like its transformers processor."""

    def __init__(self, tokenizer: Any, image_processor: Any, *, name: str = "Qwen2_5_VLProcessor") -> None:
        self.tokenizer = tokenizer
        self.image_processor = image_processor
        self.name = name
        self.image_token = IMAGE_PAD
        self.image_token_id = int(tokenizer.convert_tokens_to_ids(IMAGE_PAD))
        self.video_token_id = int(tokenizer.convert_tokens_to_ids(VIDEO_PAD))
        self.merge = int(getattr(image_processor, "merge_size", 2))

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, **_: Any) -> QwenVLProcessor:
        tfm = lazy("transformers")
        root = str(model_dir)
        tokenizer = tfm.AutoTokenizer.from_pretrained(root, local_files_only=True)
        image_processor = tfm.AutoImageProcessor.from_pretrained(root, local_files_only=True)
        return cls(tokenizer, image_processor, name=processor_class(model_dir) or "Qwen2_5_VLProcessor")

    @property
    def chat_template(self) -> str | None:
        return getattr(self.tokenizer, "chat_template", None)

    def apply_chat_template(self, conversation: Sequence[Any], **kwargs: Any) -> Any:
        return self.tokenizer.apply_chat_template(list(conversation), **kwargs)

    def __call__(
        self,
        *,
        text: Sequence[str],
        images: Sequence[Any] | None = None,
        return_tensors: str = "pt",
        add_special_tokens: bool = False,
        **_: Any,
    ) -> Any:
        tfm = lazy("transformers")
        torch = lazy("torch")
        if len(text) != 1:
            raise ValueError("one prompt at a time")
        features: dict[str, Any] = {}
        prompt = text[0]
        if images:
            enc = self.image_processor(images=list(images), return_tensors="pt")
            cell = self.merge * self.merge
            grids = [int(t) * int(h) * int(w) // cell for t, h, w in enc["image_grid_thw"]]
            pieces = prompt.split(IMAGE_PAD)
            if len(pieces) - 1 != len(grids):
                raise ValueError(f"the prompt has {len(pieces) - 1} image placeholders, {len(grids)} images")
            prompt = pieces[0] + "".join(
                IMAGE_PAD * n + rest for n, rest in zip(grids, pieces[1:], strict=True)
            )
            features.update({"pixel_values": enc["pixel_values"], "image_grid_thw": enc["image_grid_thw"]})
        elif IMAGE_PAD in prompt:
            raise ValueError("the prompt has image placeholders but no images were given")
        ids = torch.tensor([self.tokenizer(prompt, add_special_tokens=add_special_tokens)["input_ids"]])
        features["input_ids"] = ids
        features["attention_mask"] = torch.ones_like(ids)
        features["mm_token_type_ids"] = mm_token_type_ids(ids, self.image_token_id, self.video_token_id)
        return tfm.BatchFeature(features, tensor_type=return_tensors)

    def decode(self, *args: Any, **kwargs: Any) -> Any:
        return self.tokenizer.decode(*args, **kwargs)

    def batch_decode(self, *args: Any, **kwargs: Any) -> Any:
        return self.tokenizer.batch_decode(*args, **kwargs)

    def save_pretrained(self, directory: str | Path) -> None:
        """The tokenizer and image processor, with the processor class named, as the checkpoint had them."""
        self.tokenizer.save_pretrained(str(directory))
        self.image_processor.save_pretrained(str(directory))
        for name in ("preprocessor_config.json", "tokenizer_config.json"):
            file = Path(directory) / name
            data = json.loads(file.read_text())
            data["processor_class"] = self.name
            file.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def mm_token_type_ids(ids: Any, image_token_id: int | None, video_token_id: int | None) -> Any:
    """1 where `ids` holds an image token, 2 a video token, 0 elsewhere: what Qwen-VL models place their
    multimodal rotary positions by (without it they fall back to 1-D positions, silently)."""
    torch = lazy("torch")
    out = torch.zeros_like(ids)
    if image_token_id is not None:
        out[ids == image_token_id] = 1
    if video_token_id is not None:
        out[ids == video_token_id] = 2
    return out


def load_processor(model_dir: str | Path) -> Any:
    """A vision checkpoint's processor: QwenVLProcessor for the Qwen-VL family (one path whether or not
    torchvision is there), transformers' AutoProcessor for any other."""
    if processor_class(model_dir) in QWEN_VL_PROCESSORS:
        return QwenVLProcessor.from_pretrained(model_dir)
    return lazy("transformers").AutoProcessor.from_pretrained(str(model_dir), local_files_only=True)
