"""A policy run in-process by a local transformers model (a checkpoint directory; nothing is downloaded).

A directory holding a vision-language model (its config has a `vision_config`, or it has processor
files) is loaded with `AutoProcessor` + `AutoModelForImageTextToText` and sees the screenshots; any
other is loaded with `AutoTokenizer` + `AutoModelForCausalLM` and sees each image as a placeholder
text, "[screenshot WxH]" (plus the accessibility text, where the observation has one and the prompt
does not already carry it). A LoRA adapter directory (adapter_config.json naming its base model
directory) is loaded on its base and merged into it for inference. The prompt is rendered with the
checkpoint's chat template; a tokenizer without one gets PLAIN_TEMPLATE.

Sampling (temperature > 0) draws each token from softmax(logits / temperature) renormalised over the
top-p nucleus (agent_core.training.sampling), with the policy's own torch.Generator: seeded once from
`seed` when the policy is made, so one policy's successive samples differ and a policy made again
with the same seed draws the same sequence (no seed: a fresh random one). The logprobs it records
are those of that distribution, the one the token was drawn from, as the RL trainer scores them and
as vLLM returns them with `--logprobs-mode processed_logprobs`. Greedy decoding records the raw
distribution's. Processors a checkpoint's generation config would add on top (a repetition penalty)
are off while sampling: the trainer could not reproduce them.

torch and transformers are imported on first use only.
"""

from __future__ import annotations

import base64
import binascii
import gc
import importlib
import io
import json
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_core.policies.base import Policy, PolicyError, PolicyInput, PolicyOutput, register_policy
from agent_core.prompt_families import PromptError, check_prompt
from agent_core.training.checkpoints import AdapterError, adapter_base
from agent_core.training.sampling import (
    check_sampling,
    placeholder_ids,
    sampling_logprobs,
    without_placeholders,
)

PLAIN_TEMPLATE = "{role}: {content}\n\n"
"""Used when the tokenizer has no chat template: each message as `Role: text` and a blank line, then
`Assistant:` to prompt the reply (role capitalised: System, User, Assistant)."""
_PROCESSOR_FILES = ("processor_config.json", "preprocessor_config.json")
_TOKENIZER_FILES = ("tokenizer_config.json", *_PROCESSOR_FILES)
_DTYPES = ("auto", "float32", "float16", "bfloat16")
_A11Y_CHARS = 8000
# transformers' from_pretrained is not thread-safe: two loads at once in one process (a threaded
# worker, the web process) can leave torch's default device on "meta", and every later load fails.
_LOAD_LOCK = threading.Lock()


def _lazy(module: str) -> Any:
    # importlib keeps mypy from type-checking against the torch/transformers packages (slow, and the
    # model objects are dynamic anyway); the ImportError becomes a PolicyError that says what to install.
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise PolicyError(
            "local policy needs torch and transformers (and peft for an adapter): "
            f"pip install '.[train]' ({exc})"
        ) from None


def model_source(path: str | os.PathLike[str]) -> tuple[Path, Path | None, Path]:
    """(the directory of the full weights, the LoRA adapter directory or None, where the tokenizer or
    processor is) of a model directory: a full checkpoint is all three; an adapter's weights are its
    base's, and its tokenizer its own where it saved one. ValueError when it is neither, or its base
    is gone."""
    root = Path(path)
    base = adapter_base(root)  # AdapterError (a ValueError) for an adapter that names no base
    weights = base if base is not None else root
    if not (weights / "config.json").is_file():
        if base is not None:
            raise AdapterError(f"{root} is a LoRA adapter whose base model {base} is gone (no config.json)")
        raise ValueError(f"{root} is not a model directory (no config.json or adapter_config.json)")
    tokenizer = root if any((root / name).is_file() for name in _TOKENIZER_FILES) else weights
    return weights, (root if base is not None else None), tokenizer


def is_vision_model(path: str | os.PathLike[str]) -> bool:
    """Whether the checkpoint directory holds a vision-language model."""
    root = Path(path)
    if any((root / name).is_file() for name in _PROCESSOR_FILES):
        return True
    try:
        config = json.loads((root / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and "vision_config" in config


def decode_image(url: str) -> bytes:
    """The bytes of a `data:` image URL; PolicyError for anything else (a local model fetches nothing)."""
    if not url.startswith("data:") or "," not in url:
        raise PolicyError(f"local policy: only data: image URLs are supported, got {url[:60]!r}")
    header, _, payload = url.partition(",")
    try:
        return base64.b64decode(payload, validate=True) if header.endswith(";base64") else payload.encode()
    except (binascii.Error, ValueError) as exc:
        raise PolicyError(f"local policy: bad base64 image data: {exc}") from None


def _open_image(url: str, *, convert: bool = True) -> Any:
    from PIL import Image, UnidentifiedImageError

    try:
        image = Image.open(io.BytesIO(decode_image(url)))
        # Without convert, PIL has read only the header: enough for the size.
        return image.convert("RGB") if convert else image
    except (UnidentifiedImageError, OSError) as exc:
        raise PolicyError(f"local policy: cannot decode an image of the prompt: {exc}") from None


def _parts(content: Any) -> list[Mapping[str, Any]]:
    """A message's content as a list of parts (a string is one text part)."""
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list | tuple):
        return [p for p in content if isinstance(p, Mapping)]
    return []


def _image_url(part: Mapping[str, Any]) -> str:
    value = part.get("image_url")
    return str(value.get("url", "")) if isinstance(value, Mapping) else str(value or "")


def text_only_messages(
    messages: Sequence[Mapping[str, Any]], a11y: str | None = None
) -> list[dict[str, str]]:
    """The prompt with each image replaced by "[screenshot WxH]"; `a11y` follows the last image."""
    parts = [_parts(m.get("content")) for m in messages]
    last_image = max(
        ((i, j) for i, ps in enumerate(parts) for j, p in enumerate(ps) if p.get("type") == "image_url"),
        default=None,
    )
    prompt_text = "\n".join(str(p.get("text", "")) for ps in parts for p in ps)
    # The current screen is the last image; its a11y text stands in for what a VLM would see, unless
    # the agent's prompt already carries it.
    a11y = a11y.strip() if a11y else ""
    if a11y and a11y[:200] in prompt_text:
        a11y = ""
    out: list[dict[str, str]] = []
    for i, (m, ps) in enumerate(zip(messages, parts, strict=True)):
        pieces: list[str] = []
        for j, part in enumerate(ps):
            if part.get("type") == "text":
                pieces.append(str(part.get("text", "")))
            elif part.get("type") == "image_url":
                width, height = _open_image(_image_url(part), convert=False).size
                pieces.append(f"[screenshot {width}x{height}]")
                if (i, j) == last_image and a11y:
                    pieces.append("[accessibility tree]\n" + a11y[:_A11Y_CHARS])
        out.append({"role": str(m.get("role", "user")), "content": "\n".join(pieces)})
    return out


def plain_prompt(messages: Sequence[Mapping[str, str]]) -> str:
    """The prompt rendered with PLAIN_TEMPLATE, ending with `Assistant:`."""
    body = "".join(PLAIN_TEMPLATE.format(role=m["role"].capitalize(), content=m["content"]) for m in messages)
    return body + "Assistant:"


def text_prompt(
    tokenizer: Any, messages: Sequence[Mapping[str, Any]], a11y: str | None = None
) -> tuple[str, bool]:
    """(the prompt text a text-only model reads, whether the tokenizer should add its special tokens).

    Trainers tokenize prompts with this too, so training sees exactly what the policy saw."""
    plain = text_only_messages(messages, a11y)
    if getattr(tokenizer, "chat_template", None):
        # The template wrote the special tokens it wants; the tokenizer must not add a BOS again.
        return tokenizer.apply_chat_template(plain, add_generation_prompt=True, tokenize=False), False
    return plain_prompt(plain), True


def vision_messages(messages: Sequence[Mapping[str, Any]]) -> tuple[list[dict[str, Any]], list[Any]]:
    """The prompt in the transformers form ({"type": "image"} parts) and its images, decoded, in order."""
    out: list[dict[str, Any]] = []
    images: list[Any] = []
    for m in messages:
        content: list[dict[str, Any]] = []
        for part in _parts(m.get("content")):
            if part.get("type") == "image_url":
                images.append(_open_image(_image_url(part)))
                content.append({"type": "image"})
            elif part.get("type") == "text":
                content.append({"type": "text", "text": str(part.get("text", ""))})
        out.append({"role": str(m.get("role", "user")), "content": content})
    return out, images


def vision_encoding(processor: Any, messages: Sequence[Mapping[str, Any]]) -> Any:
    """A vision-language prompt's model inputs (a BatchEncoding of tensors: input_ids, attention_mask and
    the image tensors, e.g. pixel_values), rendered with the processor's chat template.

    Trainers encode prompts with this too, so training sees exactly what the policy saw."""
    chat, images = vision_messages(messages)
    text = processor.apply_chat_template(chat, add_generation_prompt=True, tokenize=False)
    # The template wrote the special tokens it wants; the tokenizer must not add a BOS again.
    return processor(text=[text], images=images or None, return_tensors="pt", add_special_tokens=False)


@register_policy("local")
class LocalPolicy(Policy):
    """Greedy (temperature 0) or sampled generation with a local checkpoint; loads on first use."""

    def __init__(
        self,
        *,
        model_path: str | os.PathLike[str],
        device: str = "cpu",
        max_new_tokens: int = 256,
        temperature: float = 0.0,
        top_p: float = 1.0,
        coords: str = "smart_resize",
        output_format: str | None = None,
        prompt: str | None = None,
        dtype: str = "float32",
        seed: int | None = None,
    ) -> None:
        self.model_path = Path(model_path)
        try:
            self._weights, self._adapter, self._tokenizer_dir = model_source(self.model_path)
        except ValueError as exc:
            raise PolicyError(f"local policy: {exc}") from None
        if dtype not in _DTYPES:
            raise PolicyError(f"local policy: dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
        if temperature > 0:
            try:
                check_sampling(temperature, top_p)
            except ValueError as exc:
                raise PolicyError(f"local policy: {exc}") from None
        self.device = device
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.coords = coords
        try:  # a prompt family asks for one output format: a policy writing another is refused now
            self.prompt, self.output_format = check_prompt(prompt, output_format)
        except PromptError as exc:
            raise PromptError(f"local policy: {exc}") from None
        self.dtype = dtype
        self.seed = seed
        self.vision = is_vision_model(self._weights)
        if self.vision:  # the model clicks in the space its processor resizes screenshots into
            from agent_core.policies.vision import checkpoint_coords

            self.coords = checkpoint_coords(self._tokenizer_dir, self.coords)
        self._model: Any = None
        self._processor: Any = None
        self._tokenizer: Any = None
        self._generator: Any = None
        """Draws every sampled token (made on first load; kept when the model is closed and loaded again)."""
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"LocalPolicy(model_path={str(self.model_path)!r}, device={self.device!r})"

    def load(self) -> None:
        """Load the tokenizer/processor and the model now (act does it on first use)."""
        with self._lock, _LOAD_LOCK:
            if self._model is not None:
                return
            torch = _lazy("torch")
            tfm = _lazy("transformers")
            dtype = "auto" if self.dtype == "auto" else getattr(torch, self.dtype)
            # transformers >= 4.56 calls it `dtype`; older versions only know `torch_dtype`.
            dtype_key = "dtype" if _version(tfm.__version__) >= (4, 56) else "torch_dtype"
            kwargs = {"local_files_only": True, dtype_key: dtype}
            weights, tokenizer_dir = str(self._weights), str(self._tokenizer_dir)
            try:
                if self.vision:
                    from agent_core.policies.qwen_vl import load_processor

                    processor = load_processor(tokenizer_dir)
                    tokenizer = getattr(processor, "tokenizer", processor)
                    model = tfm.AutoModelForImageTextToText.from_pretrained(weights, **kwargs)
                else:
                    processor = None
                    tokenizer = tfm.AutoTokenizer.from_pretrained(tokenizer_dir, local_files_only=True)
                    model = tfm.AutoModelForCausalLM.from_pretrained(weights, **kwargs)
                if self._adapter is not None:
                    # Merged into the base weights: generation runs as fast as a full checkpoint's.
                    peft = _lazy("peft")
                    model = peft.PeftModel.from_pretrained(model, str(self._adapter)).merge_and_unload()
                model.to(self.device)
                model.eval()
            except Exception as exc:  # noqa: BLE001 - any load failure means the policy cannot answer
                raise PolicyError(
                    f"local policy: cannot load {self.model_path}: {type(exc).__name__}: {exc}"
                ) from None
            self._processor, self._tokenizer, self._model = processor, tokenizer, model
            if self._generator is None:
                generator = torch.Generator(device=self.device)
                if self.seed is None:
                    generator.seed()
                else:
                    generator.manual_seed(int(self.seed))
                self._generator = generator

    def _encode(self, inp: PolicyInput) -> Any:
        """The model inputs (a BatchEncoding of tensors) for the prompt."""
        if not inp.messages:
            raise PolicyError("local policy: PolicyInput.messages is empty (the agent builds the prompt)")
        if self.vision:
            if not getattr(self._processor, "chat_template", None):
                raise PolicyError(f"local policy: {self.model_path} has no chat template for its processor")
            return vision_encoding(self._processor, inp.messages)
        text, special = text_prompt(self._tokenizer, inp.messages, inp.observation.a11y)
        return self._tokenizer(text, return_tensors="pt", add_special_tokens=special)

    def act(self, inp: PolicyInput) -> PolicyOutput:
        self.load()
        torch = _lazy("torch")
        started = time.monotonic()
        try:
            enc = self._encode(inp).to(self.device)
            prompt_len = int(enc["input_ids"].shape[1])
            banned = placeholder_ids(self._model)  # a vision model's image placeholders: never said
            draw = None
            if self.temperature > 0:
                draw = _Draw(self._generator, self.temperature, self.top_p, banned)
            # Greedy over the draw's one-hot scores takes the drawn token; generate's own sampling
            # (the global RNG, its own warpers) never runs.
            sampling: dict[str, Any] = {"do_sample": False}
            step = draw if draw is not None else (_Ban(banned) if banned else None)
            if step is not None:
                processors = _lazy("transformers").LogitsProcessorList([step])
                sampling.update(logits_processor=processors, repetition_penalty=1.0)
            pad = self._tokenizer.pad_token_id
            with self._lock, torch.no_grad():
                out = self._model.generate(
                    **enc,
                    max_new_tokens=self.max_new_tokens,
                    output_logits=True,
                    return_dict_in_generate=True,
                    pad_token_id=pad if pad is not None else self._tokenizer.eos_token_id,
                    **sampling,
                )
            generated = out.sequences[0, prompt_len:]
            token_ids = tuple(int(t) for t in generated.tolist())
            if draw is not None:
                logprobs = tuple(draw.logprobs[: len(token_ids)])
            else:  # greedy: the raw distribution's (vLLM's too)
                logprobs = tuple(
                    float(torch.log_softmax(without_placeholders(raw[0].float(), banned), dim=-1)[tok])
                    for raw, tok in zip(out.logits, token_ids, strict=True)
                )
            text = self._tokenizer.decode(list(token_ids), skip_special_tokens=True)
            prompt_ids = tuple(int(t) for t in enc["input_ids"][0].tolist())
        except PolicyError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed generation is the policy failing, not the model
            raise PolicyError(f"local policy: generation failed: {type(exc).__name__}: {exc}") from None
        eos = _eos_ids(self._model)
        finish = "stop" if token_ids and token_ids[-1] in eos else "length"
        meta = {
            "model": str(self.model_path),
            "finish_reason": finish,
            "usage": {
                "prompt_tokens": len(prompt_ids),
                "completion_tokens": len(token_ids),
                "total_tokens": len(prompt_ids) + len(token_ids),
            },
            "latency_ms": int((time.monotonic() - started) * 1000),
            "vision": self.vision,
        }
        return PolicyOutput(
            text=text, token_ids=token_ids, logprobs=logprobs, prompt_token_ids=prompt_ids, meta=meta
        )

    def close(self) -> None:
        with self._lock:
            loaded = self._model is not None
            self._model = self._processor = self._tokenizer = None
        if loaded:
            gc.collect()
            torch = _lazy("torch")
            if torch.cuda.is_available():
                torch.cuda.empty_cache()


class _Draw:
    """A logits processor that draws the next token itself, from the sampling distribution and with
    the policy's generator, records its log-probability there, and leaves only that token possible."""

    def __init__(
        self, generator: Any, temperature: float, top_p: float, banned: tuple[int, ...] = ()
    ) -> None:
        self.generator = generator
        self.temperature = temperature
        self.top_p = top_p
        self.banned = banned
        self.logprobs: list[float] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        torch = _lazy("torch")
        scores = without_placeholders(scores, self.banned)
        logp, _ = sampling_logprobs(scores, temperature=self.temperature, top_p=self.top_p)
        token = torch.multinomial(logp.exp(), 1, generator=self.generator)  # [batch, 1]
        self.logprobs.append(float(logp[0, token[0, 0]]))
        return torch.full_like(scores, float("-inf")).scatter_(-1, token, 0.0)


class _Ban:
    """A logits processor that makes the `banned` tokens impossible (greedy decoding's)."""

    def __init__(self, banned: tuple[int, ...]) -> None:
        self.banned = banned

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        return without_placeholders(scores, self.banned)


def _eos_ids(model: Any) -> set[int]:
    value = getattr(getattr(model, "generation_config", None), "eos_token_id", None)
    if value is None:
        return set()
    return {int(v) for v in value} if isinstance(value, list | tuple) else {int(value)}


def _version(text: str) -> tuple[int, int]:
    """(major, minor) of a version string like "4.56.0.dev0"."""
    parts = (text.split(".") + ["0", "0"])[:2]
    try:
        return int(parts[0]), int("".join(c for c in parts[1] if c.isdigit()) or 0)
    except ValueError:
        return (0, 0)
