"""What a vision-language checkpoint's processor does to a screenshot, read off the checkpoint itself.

A Qwen-VL processor (Qwen2-VL, Qwen2.5-VL, UI-TARS, OpenCUA, ...) resizes each image with `smart_resize`
onto a grid of `patch_size * merge_size` pixel cells between `min_pixels` and `max_pixels`, and puts one
`<|image_pad|>` token per cell between `<|vision_start|>` and `<|vision_end|>`. Those limits are the
checkpoint's, never constants: they decide the coordinate space a model clicks in, how many tokens a
screenshot costs, and so the context an engine needs for a prompt with several screenshots.

transformers 5 saves the processor as processor_config.json (the image processor's settings under
"image_processor", its limits as size.shortest_edge / size.longest_edge); older releases save
preprocessor_config.json with min_pixels / max_pixels at its top level. Both are read.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_core.actions.coords import smart_resize

PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
# What a Qwen-VL processor uses when its config names no limit (transformers' Qwen2VLImageProcessor).
DEFAULT_PATCH = 14
DEFAULT_MERGE = 2
DEFAULT_MIN_PIXELS = 56 * 56
DEFAULT_MAX_PIXELS = 28 * 28 * 1280
IMAGE_WRAP_TOKENS = 2
"""<|vision_start|> and <|vision_end|> around each image's pad tokens."""


class VisionConfigError(ValueError):
    """A checkpoint's processor settings cannot be read or make no sense; the message names the file."""


@dataclass(frozen=True)
class ImageSpec:
    """How one checkpoint turns a screenshot into tokens."""

    patch_size: int = DEFAULT_PATCH
    merge_size: int = DEFAULT_MERGE
    min_pixels: int = DEFAULT_MIN_PIXELS
    max_pixels: int = DEFAULT_MAX_PIXELS

    @property
    def factor(self) -> int:
        """The side of one image token's cell, in pixels of the resized image."""
        return self.patch_size * self.merge_size

    def resized(self, width: int, height: int) -> tuple[int, int]:
        """(W', H'): the size the model sees a width × height screenshot at (its coordinate space)."""
        h, w = smart_resize(
            height, width, factor=self.factor, min_pixels=self.min_pixels, max_pixels=self.max_pixels
        )
        return w, h

    def image_tokens(self, width: int, height: int) -> int:
        """The `<|image_pad|>` tokens one width × height screenshot becomes (without its two wrappers)."""
        w, h = self.resized(width, height)
        return (w // self.factor) * (h // self.factor)

    def coord_space(self) -> str:
        """The coordinate space a model with these limits clicks in (agent_core.actions.coords)."""
        return f"smart_resize:{self.min_pixels}:{self.max_pixels}"

    def mm_processor_kwargs(self) -> dict[str, int]:
        """The limits as vLLM's --mm-processor-kwargs: the engine resizes as the checkpoint says."""
        return {"min_pixels": self.min_pixels, "max_pixels": self.max_pixels}


def _int(value: Any, what: str, where: Path) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise VisionConfigError(f"{where}: {what} must be a positive integer, got {value!r}")
    return value


def image_spec(model_dir: str | Path) -> ImageSpec | None:
    """The checkpoint's ImageSpec, or None for a checkpoint without a processor config (text-only, or a
    LoRA adapter whose base holds it). VisionConfigError when the file is there but unreadable."""
    root = Path(model_dir)
    for name in PROCESSOR_FILES:
        path = root / name
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise VisionConfigError(f"{path}: not readable JSON ({exc})") from exc
        if not isinstance(data, dict):
            raise VisionConfigError(f"{path}: not a JSON object")
        settings = data.get("image_processor", data)
        if not isinstance(settings, dict):
            raise VisionConfigError(f"{path}: image_processor is not an object")
        size: dict[str, Any] = settings["size"] if isinstance(settings.get("size"), dict) else {}
        lo = _int(settings.get("min_pixels", size.get("shortest_edge")), "min_pixels", path)
        hi = _int(settings.get("max_pixels", size.get("longest_edge")), "max_pixels", path)
        spec = ImageSpec(
            patch_size=_int(settings.get("patch_size"), "patch_size", path) or DEFAULT_PATCH,
            merge_size=_int(settings.get("merge_size"), "merge_size", path) or DEFAULT_MERGE,
            min_pixels=lo or DEFAULT_MIN_PIXELS,
            max_pixels=hi or DEFAULT_MAX_PIXELS,
        )
        if spec.min_pixels > spec.max_pixels:
            raise VisionConfigError(f"{path}: min_pixels {spec.min_pixels} > max_pixels {spec.max_pixels}")
        return spec
    return None


def context_for(
    spec: ImageSpec,
    *,
    screen: tuple[int, int],
    images: int,
    text_tokens: int = 2048,
    max_new_tokens: int = 512,
    multiple: int = 256,
) -> int:
    """The engine context (--max-model-len) a prompt with `images` screenshots of `screen` (W, H), up to
    `text_tokens` of system prompt, instruction and history text, and a reply of `max_new_tokens` needs,
    rounded up to a multiple of `multiple`."""
    if images < 0 or text_tokens < 0 or max_new_tokens < 1:
        raise ValueError("need images >= 0, text_tokens >= 0, max_new_tokens >= 1")
    per_image = spec.image_tokens(*screen) + IMAGE_WRAP_TOKENS
    need = images * per_image + text_tokens + max_new_tokens
    return int(math.ceil(need / multiple) * multiple)


def checkpoint_coords(model_dir: str | Path, coords: str) -> str:
    """The coordinate space a policy on this checkpoint means: a bare `smart_resize` becomes the
    checkpoint's own limits where its processor config names them (else it stays as given)."""
    if coords != "smart_resize":
        return coords
    spec = image_spec(model_dir)
    return spec.coord_space() if spec is not None else coords
