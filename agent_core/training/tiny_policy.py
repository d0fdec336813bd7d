"""The tiny demonstration policy: a small Qwen2 decoder with its own tokenizer, trained on the project's text.

It is built from a config with random weights (nothing is downloaded) and learns everything it knows
from the platform's data: SFT on oracle and human demonstrations, then RL. It reads the screen as
text (the "elements" observation: one line per visible element with its centre in screen pixels)
and answers in the real UI-TARS grammar with absolute coordinates, which the project's parser reads.
The tokenizer's corpus is the system prompts the agent sends, action texts and element lines in the
shapes the policy will meet, and whatever task instructions the caller adds.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from agent_core.prompts import system_prompt
from agent_core.tiny_models import CHAT_TEMPLATE, _generation_config, _lazy, _text_config, build_tokenizer

POLICY_CONFIG: dict[str, Any] = {
    "observation": "elements",
    "coords": "absolute",
    "max_new_tokens": 96,
    "temperature": 0.0,
}
"""The PolicyVersion config the tiny policy runs with (text elements in, absolute coordinates out).
Room for a thought before the action: oracle demonstrations teach one ("The only button on the page
reads "Click Me!", so I click it.": some 40 tokens with the action)."""

LINEAGE_FILE = "flywheel_lineage.json"

# ChatML without the system turn. The system prompt is the same for every step, so it carries nothing
# a model trained from scratch on this platform could use, and it would be ~600 of a prompt's ~700
# tokens: the tiny policy's template leaves it out, and as training renders prompts with the
# checkpoint's own template, training and rollouts agree.
CHAT_TEMPLATE_NO_SYSTEM = (
    "{%- for message in messages if message['role'] != 'system' -%}"
    + CHAT_TEMPLATE.split("{%- for message in messages -%}", 1)[1]
)


def _synthetic(seed: int, n: int = 400) -> list[str]:
    """Element lines and actions with coordinates, so digits and punctuation get useful merges."""
    r = random.Random(seed)  # noqa: S311 - synthetic corpus
    tags = ["button", "input[type=text]", "a", "span", "div", "label", "input[type=checkbox]", "textarea"]
    words = ["Submit", "OK", "Cancel", "Click Me!", "ONE", "TWO", "Yes", "No", "search", "next", "link"]
    out = []
    for _ in range(n):
        x, y = r.randint(0, 1279), r.randint(0, 719)
        out.append(f'{r.choice(tags)} "{r.choice(words)}" @({x},{y})')
        out.append(f"Thought: I click the element.\nAction: click(start_box='({x},{y})')")
        out.append(f"Action: type(content='{r.choice(words).lower()}')")
    return out


def build_tiny_policy(
    path: str | Path,
    *,
    corpus: Iterable[str] = (),
    seed: int = 0,
    vocab_size: int = 2048,
    hidden_size: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
) -> Path:
    """Build and save the tiny policy in `path` (a save_pretrained model directory); returns the path.

    Also writes `flywheel_lineage.json` with a fresh base id: checkpoints trained from it carry the
    id on, and parameter interpolation refuses to merge checkpoints of different bases.
    """
    torch = _lazy("torch")
    tfm = _lazy("transformers")
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    texts = [system_prompt(p) for p in ("browser", "desktop", "mobile")]
    texts += list(corpus) + _synthetic(seed)
    tokenizer = build_tokenizer(texts, vocab_size=vocab_size)
    tokenizer.chat_template = CHAT_TEMPLATE_NO_SYSTEM
    torch.manual_seed(seed)
    config = _text_config(tfm, tokenizer, hidden_size, num_layers, num_heads)
    config.max_position_embeddings = 4096
    model = tfm.Qwen2ForCausalLM(config)
    model.generation_config = _generation_config(tfm, tokenizer)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    lineage = {"base": f"tiny-{uuid.uuid4().hex[:12]}", "seed": seed, "built_by": "build_tiny_policy"}
    (out / LINEAGE_FILE).write_text(json.dumps(lineage, indent=2))
    return out
