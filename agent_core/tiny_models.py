"""Tiny randomly initialised models built offline, for tests and smoke runs of local inference and training.

Nothing is downloaded: the tokenizer is a byte-level BPE trained here with the `tokenizers` library
(so any text, UI-TARS actions included, is encodable), the model is built from a config with random
weights, and both are saved with `save_pretrained`, so that `AutoTokenizer.from_pretrained(path)`,
`AutoModelForCausalLM.from_pretrained(path)` (and, for the VLM, `AutoProcessor` /
`AutoModelForImageTextToText`) load the directory offline. The decoder is Qwen2 with a ChatML template,
as in the real UI-TARS checkpoints; the VLM is LLaVA-style (see `build_tiny_vlm` for why not Qwen2-VL).

torch and transformers (the `train` extra) are imported inside the builders only.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import Any

QWEN_IMAGE_PLACEHOLDER = "<|vision_start|><|image_pad|><|vision_end|>"
LLAVA_IMAGE = "<image>"
# The chat template (ChatML, as in Qwen2 / UI-TARS). Content may be a string or a list of OpenAI-style
# parts; image parts become the Qwen2-VL vision placeholder, which a VL processor expands per image.
_TEMPLATE = (
    "{%- for message in messages -%}"
    "{{ '<|im_start|>' + message['role'] + '\\n' }}"
    "{%- if message['content'] is string -%}{{ message['content'] }}"
    "{%- else -%}{%- for part in message['content'] -%}"
    "{%- if part['type'] == 'text' -%}{{ part['text'] }}"
    "{%- elif part['type'] in ('image', 'image_url') -%}{{ '@IMAGE@' }}"
    "{%- endif -%}{%- endfor -%}{%- endif -%}"
    "{{ '<|im_end|>\\n' }}"
    "{%- endfor -%}"
    "{%- if add_generation_prompt -%}{{ '<|im_start|>assistant\\n' }}{%- endif -%}"
)


def chat_template(image_placeholder: str = QWEN_IMAGE_PLACEHOLDER) -> str:
    """The ChatML template with image parts rendered as `image_placeholder`."""
    return _TEMPLATE.replace("@IMAGE@", image_placeholder)


CHAT_TEMPLATE = chat_template()

SPECIAL_TOKENS = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<image>",
)
EOS = "<|im_end|>"
PAD = "<|endoftext|>"

# A small corpus in the shape of UI-TARS prompts and responses, so common pieces get their own merges.
DEFAULT_CORPUS: tuple[str, ...] = (
    "You are a GUI agent. You are given a task and your action history, with screenshots. "
    "You need to perform the next action to complete the task.",
    "## Output Format\nThought: ...\nAction: ...",
    "## Action Space\nclick(start_box='<|box_start|>(x1,y1)<|box_end|>')\nleft_double(start_box='(x1,y1)')\n"
    "right_single(start_box='(x1,y1)')\ndrag(start_box='(x1,y1)', end_box='(x2,y2)')\n"
    "hotkey(key='ctrl c')\ntype(content='xxx')\nscroll(start_box='(x1,y1)', direction='down')\n"
    "wait()\nfinished(content='xxx')\ncall_user()\nlong_press(start_box='(x1,y1)')\n"
    "open_app(app_name='')\npress_home()\npress_back()",
    "Thought: I need to open the search box first, it is at the top of the page.\n"
    "Action: click(start_box='(512,64)')",
    "Thought: The text field is focused, so I type the query and press enter.\n"
    "Action: type(content='weather in Paris\\n')",
    "Thought: The result is not visible, I scroll down.\n"
    "Action: scroll(start_box='(640,400)', direction='down')",
    "Thought: The file is saved, the task is done.\nAction: finished(content='done')",
    "Action: hotkey(key='ctrl s')\nAction: drag(start_box='(10,20)', end_box='(300,400)')\nAction: wait()",
    "The quick brown fox jumps over the lazy dog. 0123456789 {}[]()<>=+-*/\\|!?.,:;'\"`~@#$%^&_",
    "[screenshot 1280x800]\n[accessibility tree]\nbutton 'OK' at (600,420)\ntextbox 'Search'",
)


def _lazy(module: str) -> Any:
    """Import a heavy optional module (torch, transformers) as Any, with a clear error when missing."""
    # importlib (not `import`) so mypy does not type-check our calls against torch/transformers stubs.
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise RuntimeError(f"{module} is needed to build models: pip install '.[train]' ({exc})") from None


def build_tokenizer(corpus: Iterable[str] | None = None, *, vocab_size: int = 1024) -> Any:
    """A byte-level BPE tokenizer (transformers fast tokenizer) trained on DEFAULT_CORPUS + `corpus`."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tfm = _lazy("transformers")
    texts = list(DEFAULT_CORPUS) + list(corpus or ())
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    # The 256-byte initial alphabet is what makes every string encodable, whatever the corpus.
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer=trainer)
    return tfm.PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS,
        pad_token=PAD,
        chat_template=CHAT_TEMPLATE,
        model_max_length=32768,
    )


def _text_config(tfm: Any, tokenizer: Any, hidden_size: int, num_layers: int, num_heads: int) -> Any:
    """A tiny Qwen2 decoder config sized to `tokenizer`, with its special token ids."""
    ids = tokenizer.convert_tokens_to_ids
    return tfm.Qwen2Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=max(1, num_heads // 2),
        max_position_embeddings=32768,
        tie_word_embeddings=True,
        bos_token_id=ids(PAD),
        eos_token_id=ids(EOS),
        pad_token_id=ids(PAD),
    )


def _generation_config(tfm: Any, tokenizer: Any) -> Any:
    """Stop at <|im_end|> (end of the assistant turn) or <|endoftext|>; pad with <|endoftext|>."""
    ids = tokenizer.convert_tokens_to_ids
    return tfm.GenerationConfig(eos_token_id=[ids(EOS), ids(PAD)], pad_token_id=ids(PAD))


def build_tiny_causal_lm(
    path: str | os.PathLike[str],
    *,
    vocab_corpus: Iterable[str] | None = None,
    seed: int = 0,
    vocab_size: int = 1024,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
) -> Path:
    """Build and save a tiny random Qwen2 causal LM with its tokenizer in `path`; returns the path.

    `vocab_corpus` adds texts to the tokenizer's training corpus (DEFAULT_CORPUS is always in it), so
    frequent strings of a test or training set get short encodings; `seed` fixes the random weights.
    """
    torch = _lazy("torch")
    tfm = _lazy("transformers")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_corpus, vocab_size=vocab_size)
    torch.manual_seed(seed)
    model = tfm.Qwen2ForCausalLM(_text_config(tfm, tokenizer, hidden_size, num_layers, num_heads))
    model.generation_config = _generation_config(tfm, tokenizer)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def build_tiny_vlm(
    path: str | os.PathLike[str],
    *,
    vocab_corpus: Iterable[str] | None = None,
    seed: int = 0,
    image_size: int = 56,
    hidden_size: int = 64,
    num_layers: int = 2,
) -> Path:
    """Build and save a tiny random LLaVA-style VLM (CLIP vision tower + Qwen2 decoder) with its processor.

    Loads with `AutoProcessor` / `AutoModelForImageTextToText`. Every image becomes (image_size/14)^2
    `<image>` tokens. It is LLaVA, not Qwen2-VL, because the Qwen2-VL processor needs torchvision (for its
    video processor), which this project does not install.
    """
    torch = _lazy("torch")
    tfm = _lazy("transformers")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    template = chat_template(LLAVA_IMAGE)
    tokenizer = build_tokenizer(vocab_corpus)
    tokenizer.chat_template = template
    patch = 14
    # transformers >= 5 names the torch-free image processor *Pil; before 5 the plain class is torch-free.
    image_processor_cls = getattr(tfm, "CLIPImageProcessorPil", None) or tfm.CLIPImageProcessor
    image_processor = image_processor_cls(
        size={"shortest_edge": image_size}, crop_size={"height": image_size, "width": image_size}
    )
    processor = tfm.LlavaProcessor(
        image_processor=image_processor,
        tokenizer=tokenizer,
        patch_size=patch,
        vision_feature_select_strategy="default",
        chat_template=template,
        image_token=LLAVA_IMAGE,
        # CLIP adds a CLS token which the "default" strategy drops again: one image token per patch.
        num_additional_image_tokens=1,
    )
    config = tfm.LlavaConfig(
        text_config=_text_config(tfm, tokenizer, hidden_size, num_layers, 4),
        vision_config=tfm.CLIPVisionConfig(
            hidden_size=32,
            intermediate_size=64,
            num_hidden_layers=1,
            num_attention_heads=2,
            image_size=image_size,
            patch_size=patch,
            projection_dim=32,
        ),
        image_token_id=tokenizer.convert_tokens_to_ids(LLAVA_IMAGE),
        image_seq_length=(image_size // patch) ** 2,
        vision_feature_select_strategy="default",
        vision_feature_layer=-1,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = tfm.LlavaForConditionalGeneration(config)
    model.generation_config = _generation_config(tfm, tokenizer)
    model.save_pretrained(str(out))
    processor.save_pretrained(str(out))
    return out


def build_tiny_qwen2_5_vl(
    path: str | os.PathLike[str],
    *,
    vocab_corpus: Iterable[str] | None = None,
    seed: int = 0,
    hidden_size: int = 128,
    num_layers: int = 2,
    num_heads: int = 4,
    min_pixels: int = 56 * 56,
    max_pixels: int = 28 * 28 * 256,
    qwen2: bool = False,
) -> Path:
    """Build and save a tiny random Qwen2.5-VL (Qwen2-VL with `qwen2=True`) with its processor settings.

    The architecture UI-TARS-1.5, Qwen2.5-VL and OpenCUA checkpoints have: a ViT with 2×2 patch merging and
    windowed attention, a Qwen2 decoder with multimodal rotary positions. Sized for vLLM's CPU kernels
    (head size 32: they refuse 16). `min_pixels`/`max_pixels` are part of the checkpoint (its
    preprocessor_config.json, as Qwen's checkpoints ship it), so every reader resizes screenshots alike:
    the default cap, 28·28·256 pixels, makes a 1280×720 screenshot 252 image tokens.

    Saved without instantiating the processor class, whose video half needs torchvision, which the
    project's own environment does not carry: the image processor (the PIL backend, torch-free, the one
    both the trainer and the engine then use), the tokenizer with its chat template, and the processor
    class named in both, which `AutoProcessor` (vLLM's environment has torchvision) assembles from them.
    """
    torch = _lazy("torch")
    tfm = _lazy("transformers")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer = build_tokenizer(vocab_corpus)
    processor_class = "Qwen2VLProcessor" if qwen2 else "Qwen2_5_VLProcessor"
    config, model_cls = _qwen_vl_config(tfm, tokenizer, hidden_size, num_layers, num_heads, qwen2=qwen2)
    torch.manual_seed(seed)
    model = model_cls(config)
    model.generation_config = _generation_config(tfm, tokenizer)
    model.save_pretrained(str(out))
    image_processor_cls = getattr(tfm, "Qwen2VLImageProcessorPil", None) or tfm.Qwen2VLImageProcessor
    image_processor = image_processor_cls(
        min_pixels=min_pixels, max_pixels=max_pixels, patch_size=14, merge_size=2
    )
    from agent_core.policies.qwen_vl import QwenVLProcessor

    # The tokenizer and image processor, the processor class named in both (as Qwen's checkpoints ship).
    QwenVLProcessor(tokenizer, image_processor, name=processor_class).save_pretrained(out)
    _top_level_pixel_limits(out, min_pixels=min_pixels, max_pixels=max_pixels)
    return out


def _qwen_vl_config(
    tfm: Any, tokenizer: Any, hidden_size: int, num_layers: int, num_heads: int, *, qwen2: bool
) -> tuple[Any, Any]:
    """(config, model class) of a tiny Qwen2.5-VL or Qwen2-VL sized to `tokenizer`."""
    ids = tokenizer.convert_tokens_to_ids
    head_dim = hidden_size // num_heads
    if head_dim < 32 or head_dim % 8:
        raise ValueError(f"head size {head_dim}: vLLM's CPU attention needs >= 32 and a multiple of 8")
    # Multimodal rotary sections (temporal, height, width) over half the head dimension, as Qwen's 16/24/24
    # over 64.
    half = head_dim // 2
    section = [half // 4, (half - half // 4) // 2, half - half // 4 - (half - half // 4) // 2]
    text = {
        "vocab_size": len(tokenizer),
        "hidden_size": hidden_size,
        "intermediate_size": hidden_size * 2,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": max(1, num_heads // 2),
        "max_position_embeddings": 32768,
        "rope_scaling": {"type": "mrope", "mrope_section": section},
        "bos_token_id": ids(PAD),
        "eos_token_id": ids(EOS),
        "pad_token_id": ids(PAD),
        "tie_word_embeddings": True,
    }
    vision: dict[str, Any] = {
        "depth": 2,
        "hidden_size": 64,
        "num_heads": 2,
        "patch_size": 14,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "in_channels": 3,
    }
    special = {
        "image_token_id": ids("<|image_pad|>"),
        "video_token_id": ids("<|video_pad|>"),
        "vision_start_token_id": ids("<|vision_start|>"),
        "vision_end_token_id": ids("<|vision_end|>"),
    }
    if qwen2:
        vision.update({"embed_dim": 64, "mlp_ratio": 2, "hidden_size": hidden_size})
        config = tfm.Qwen2VLConfig(
            text_config=text, vision_config=vision, **special, tie_word_embeddings=True
        )
        model_cls = tfm.Qwen2VLForConditionalGeneration
    else:
        vision.update(
            {
                "intermediate_size": 128,
                "out_hidden_size": hidden_size,
                "window_size": 56,
                "fullatt_block_indexes": [1],
            }
        )
        config = tfm.Qwen2_5_VLConfig(
            text_config=text, vision_config=vision, **special, tie_word_embeddings=True
        )
        model_cls = tfm.Qwen2_5_VLForConditionalGeneration
    return config, model_cls


def _top_level_pixel_limits(out: Path, *, min_pixels: int, max_pixels: int) -> None:
    """The pixel limits also at the top of preprocessor_config.json, where releases before transformers 5
    read them."""
    import json

    file = out / "preprocessor_config.json"
    data = json.loads(file.read_text())
    data.update({"min_pixels": min_pixels, "max_pixels": max_pixels})
    file.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
