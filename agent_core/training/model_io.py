"""Checkpoints as trainable models: the device, the prompt codec, loading, token ids and the critic.

Prompts become model inputs exactly as `LocalPolicy` builds them at rollout time (agent_core.policies.local),
so what is trained on is what was sampled. The trainers (trainer.py, rl_trainer.py) call this module.
A LoRA adapter directory loads on its base (lora.py): trainable in a LoRA run, merged otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_core.policies.local import (
    _LOAD_LOCK,
    _version,
    is_vision_model,
    model_source,
    text_prompt,
    vision_encoding,
)
from agent_core.training.errors import TrainingError, lazy
from agent_core.training.lora import LoraSettings, add_adapter, load_adapter


def pick_device(name: str) -> str:
    """The torch device a run's `device` setting names ("auto": CUDA where there is one)."""
    torch = lazy("torch")
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise TrainingError("device: cuda was asked for but this machine has no CUDA device")
    return name


PER_TOKEN = ("mm_token_type_ids", "token_type_ids")


class PromptCodec:
    """How a checkpoint's prompts become model inputs, exactly as `LocalPolicy` builds them at rollout
    time: token ids (the text prompt, or the chat template with image tokens), plus the image tensors
    of a vision-language model."""

    def __init__(self, tokenizer: Any, processor: Any = None) -> None:
        self.tokenizer = tokenizer
        self.processor = processor

    @property
    def vision(self) -> bool:
        return self.processor is not None

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]], a11y: str | None) -> list[int]:
        if self.processor is None:
            return prompt_ids(self.tokenizer, messages, a11y)
        return [int(t) for t in vision_encoding(self.processor, messages)["input_ids"][0].tolist()]

    def images(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The prompt's image tensors (pixel_values and whatever else the processor gives, e.g. a
        Qwen2-VL image_grid_thw); empty for a text-only model or a prompt without images."""
        if self.processor is None:
            return {}
        enc = vision_encoding(self.processor, messages)
        # Per-token maps (a Qwen-VL processor's mm_token_type_ids) cover the prompt only; the trainer makes
        # them over the whole padded sequence (batching.multimodal_inputs).
        return {k: v for k, v in enc.items() if k not in ("input_ids", "attention_mask", *PER_TOKEN)}

    def save(self, directory: Path) -> None:
        (self.processor or self.tokenizer).save_pretrained(str(directory))


def load_policy_model(
    path: Path, *, device: str, dtype: str = "float32", lora: LoraSettings | None = None
) -> tuple[PromptCodec, Any]:
    """(prompt codec, model) of a model directory (text-only or vision-language), ready to train.

    With `lora`, only a LoRA adapter trains: the directory's own when it is an adapter, else a fresh one.
    Without, an adapter directory is merged into its base and every weight trains."""
    torch = lazy("torch")
    tfm = lazy("transformers")
    try:
        weights, adapter, tokenizer_dir = model_source(path)
    except ValueError as exc:
        raise TrainingError(str(exc)) from None
    try:
        # One load at a time per process: concurrent from_pretrained calls (the trainer and rollout
        # threads) can leave torch's default device on "meta" (see local._LOAD_LOCK).
        with _LOAD_LOCK:
            codec, model = _load(tfm, torch, weights, tokenizer_dir, dtype)
            if adapter is not None:
                model = load_adapter(model, adapter, trainable=lora is not None)
            elif lora is not None:
                model = add_adapter(model, lora, weights)
            model.to(device)
            return codec, model
    except TrainingError:
        raise
    except Exception as exc:  # noqa: BLE001 - any load failure ends the run with its reason
        raise TrainingError(f"cannot load {path}: {type(exc).__name__}: {exc}") from None


def _load(tfm: Any, torch: Any, path: Path, tokenizer_dir: Path, dtype: str) -> tuple[PromptCodec, Any]:
    # transformers >= 4.56 calls it `dtype`; older versions only know `torch_dtype`.
    key = "dtype" if _version(tfm.__version__) >= (4, 56) else "torch_dtype"
    kwargs = {"local_files_only": True, key: getattr(torch, dtype)}
    if is_vision_model(path):
        from agent_core.policies.qwen_vl import load_processor

        processor = load_processor(tokenizer_dir)
        if not getattr(processor, "chat_template", None):
            raise TrainingError(f"{path} has no chat template for its processor: its prompts cannot be built")
        tokenizer = getattr(processor, "tokenizer", processor)
        model = tfm.AutoModelForImageTextToText.from_pretrained(str(path), **kwargs)
        codec = PromptCodec(tokenizer, processor)
    else:
        tokenizer = tfm.AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
        model = tfm.AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
        codec = PromptCodec(tokenizer)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return codec, model


def prompt_ids(tokenizer: Any, messages: Sequence[Mapping[str, Any]], a11y: str | None) -> list[int]:
    """The prompt's token ids, exactly as LocalPolicy builds them at rollout time."""
    text, special = text_prompt(tokenizer, messages, a11y)
    return list(tokenizer(text, add_special_tokens=special)["input_ids"])


def response_ids(tokenizer: Any, response: str) -> list[int]:
    """A target response's ids, ending with the end-of-turn token the policy stops at."""
    return list(tokenizer(response + tokenizer.eos_token, add_special_tokens=False)["input_ids"])


def critic_class() -> Any:
    """The critic's class (defined on first use, since it subclasses torch.nn.Module)."""
    torch = lazy("torch")

    class Critic(torch.nn.Module):  # type: ignore[misc, name-defined]
        """A value model: the policy's architecture (initialised from its weights) with a scalar head."""

        def __init__(self, backbone: Any) -> None:
            super().__init__()
            self.backbone = backbone
            config = backbone.config
            # A vision-language config keeps the decoder's width in its text config.
            hidden = getattr(config, "hidden_size", None) or config.get_text_config().hidden_size
            self.head = torch.nn.Linear(hidden, 1)
            torch.nn.init.zeros_(self.head.weight)
            torch.nn.init.zeros_(self.head.bias)

        def forward(self, ids: Any, attn: Any, images: Mapping[str, Any] | None = None) -> Any:
            out = self.backbone(
                input_ids=ids, attention_mask=attn, output_hidden_states=True, **(images or {})
            )
            return self.head(out.hidden_states[-1].float()).squeeze(-1)

    return Critic
