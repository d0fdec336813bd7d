"""The planner's vision-language part (planner.py): a vision tower's parameters and activations.

Parameters of Qwen2-VL / Qwen2.5-VL towers and their merger, or a CLIP / SigLIP-style ViT with a LLaVA
projector, counted from config.json as torch's `parameters()` counts them; activations by the same
formula as the decoder's (Korthikanti et al. 2022, eq. 1, no s×s scores: SDPA). Pure Python.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Tower(Protocol):
    """What the activations need of a model's shape (planner.ModelShape has it)."""

    @property
    def vision(self) -> bool: ...
    @property
    def vision_hidden(self) -> int: ...
    @property
    def vision_layers(self) -> int: ...
    @property
    def patches_per_token(self) -> int: ...


def vision_params(vision: Mapping[str, Any], text_hidden: int, top: Mapping[str, Any]) -> int:
    """The vision tower's and its projector's parameters: Qwen2-VL (embed_dim, depth), Qwen2.5-VL
    (depth, out_hidden_size) or a CLIP / SigLIP-style ViT with a LLaVA projector."""
    if "depth" in vision:
        depth, m2 = int(vision["depth"]), int(vision.get("spatial_merge_size", 2)) ** 2
        channels = int(vision.get("in_chans", vision.get("in_channels", 3)))
        patch = channels * int(vision.get("temporal_patch_size", 2)) * int(vision.get("patch_size", 14)) ** 2
        if "embed_dim" in vision:  # Qwen2-VL: LayerNorm, a GELU MLP of mlp_ratio
            e, out = int(vision["embed_dim"]), int(vision.get("hidden_size", text_hidden))
            mlp = int(e * float(vision.get("mlp_ratio", 4)))
            block = 4 * e + 3 * e * e + 3 * e + e * e + e + 2 * e * mlp + mlp + e
            norm = 2 * e
        else:  # Qwen2.5-VL: RMSNorm, a SwiGLU MLP with biases
            e, out = int(vision["hidden_size"]), int(vision.get("out_hidden_size", text_hidden))
            i = int(vision["intermediate_size"])
            block = 2 * e + 4 * e * e + 4 * e + 3 * e * i + 2 * i + e
            norm = e
        merger = norm + (e * m2) ** 2 + e * m2 + e * m2 * out + out
        return patch * e + depth * block + merger
    e, i = int(vision["hidden_size"]), int(vision["intermediate_size"])
    positions = (int(vision.get("image_size", 224)) // int(vision.get("patch_size", 14))) ** 2
    clip = "clip" in str(vision.get("model_type", "clip"))
    embeddings = int(vision.get("num_channels", 3)) * int(vision.get("patch_size", 14)) ** 2 * e
    embeddings += e * (positions + 1) + e if clip else e * positions + e  # CLIP: class token, no conv bias
    block = 4 * (e * e + e) + 2 * e * i + i + e + 4 * e
    norms = 4 * e if clip else 2 * e  # CLIP has a pre- and a post-layernorm
    layers = top.get("vision_feature_layer", -1)
    feeds = len(layers) if isinstance(layers, list) else 1
    bias = bool(top.get("multimodal_projector_bias", True))
    projector = e * feeds * text_hidden + text_hidden * text_hidden + (2 * text_hidden if bias else 0)
    return embeddings + int(vision["num_hidden_layers"]) * block + norms + projector


def tower_dims(vision: Mapping[str, Any]) -> tuple[int, int, int]:
    """(width, layers, patches per decoder image token) of a vision tower's config."""
    if "depth" in vision:  # Qwen-VL: spatial_merge_size² patches merge into one token
        width = int(vision.get("embed_dim", vision.get("hidden_size", 0)))
        return width, int(vision["depth"]), int(vision.get("spatial_merge_size", 2)) ** 2
    return int(vision["hidden_size"]), int(vision["num_hidden_layers"]), 1


def vision_activations(shape: Tower, tokens: int, width: int, *, trained: bool, checkpointing: bool) -> int:
    """The vision tower's activations for `tokens` image tokens (merged patches_per_token each), by the
    same formula as the decoder's. A frozen tower (LoRA adapts the language model only) keeps nothing
    for the backward pass: only one layer's, while it runs."""
    if not shape.vision or not shape.vision_layers:
        return 0
    positions = tokens * shape.patches_per_token
    layer = int(positions * shape.vision_hidden * 34 * width / 2)
    if not trained:
        return layer
    if checkpointing:
        return shape.vision_layers * positions * shape.vision_hidden * width + layer
    return shape.vision_layers * layer
