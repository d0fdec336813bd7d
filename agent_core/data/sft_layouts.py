"""The SFT chat laid out as outside fine-tuning stacks read it as it is: TRL, LLaMA-Factory, ms-swift.

`export_formats.sft_records` builds one chat per target step; `ExportOptions.layout` picks how it is
written. Every layout holds the same turns, texts and screenshots in the same order, and keeps the fields
id, episode_id, step_index, task, source and policy_version beside them (TRL and ms-swift drop columns
they do not know; LLaMA-Factory reads only the columns its dataset_info.json maps). Images are paths
relative to the export folder (``images/<sha>.png``), as in every export.

- ``chat``: the record as `sft_records` builds it (content parts carrying both "text" and "image").
- ``trl``: TRL's conversational prompt-completion form for vision models, which its SFTTrainer takes with
  a Qwen2.5-VL processor: ``prompt`` (system, instruction, history, current screen) and ``completion``
  (the target turn) are messages whose content is a list of ``{"type": "text", "text": ...}`` and
  ``{"type": "image"}`` parts, and ``images`` fills the image parts in order. TRL applies the processor's
  chat template itself and, on prompt-completion data, learns the completion only. It takes decoded
  images, not paths: load the shards with `datasets`, map each path onto the export folder and cast the
  column to ``List(Image())``.
- ``llamafactory``: LLaMA-Factory's sharegpt form with OpenAI tags (its ``mllm_demo`` dataset):
  ``messages`` of role / content strings with one ``<image>`` where each screenshot was, ``images`` the
  paths in that order, and ``dataset_info.json`` beside ``data/`` naming the dataset ``trajectories``
  (train with ``dataset_dir: <export folder>`` and ``dataset: trajectories``; the paths resolve against
  its ``media_dir``, which defaults to dataset_dir). Differences from the chat: LLaMA-Factory skips, with
  only a warning, a sample whose turns do not alternate user / assistant, so consecutive turns of one
  role are joined by a newline; the target is never joined to the history: where no user turn precedes
  it (its screenshot not kept and no tool result), an empty user turn does. LLaMA-Factory learns every
  assistant turn unless trained with ``mask_history: true``, which these records need (the history is
  what happened, wrong steps included); and it shrinks images over ``image_max_pixels`` (768·768 by
  default) before the processor sees them, so set it to at least the checkpoint's max_pixels.
- ``swift``: ms-swift's messages form: the ``llamafactory`` messages with ``"loss": false`` on the
  history's assistant turns and ``"loss": true`` on the target's (ms-swift otherwise learns every one).
  Train with ``--dataset <export>/data/train-00000.jsonl ...`` and ``ROOT_IMAGE_DIR=<export folder>``
  (relative paths resolve against the working directory otherwise); for Qwen2.5-VL set ``MIN_PIXELS`` /
  ``MAX_PIXELS`` to the checkpoint's limits, since ms-swift resizes with its own (up to 16384·28·28)
  before the processor does.

The tag layouts have no escape for a literal ``<image>``, ``<video>`` or ``<audio>`` in a text (both
stacks count it as a placeholder), so a record with one raises ExportError naming it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

from agent_core.data.export_formats import SFT_LAYOUTS, ExportError, ExportOptions, arrow_schema, sft_records
from agent_core.flywheel import TrajectoryView

LLAMAFACTORY_INFO = "dataset_info.json"
LLAMAFACTORY_DATASET = "trajectories"
IMAGE_TAG = "<image>"
# Placeholders LLaMA-Factory and ms-swift count in every text and match against their media lists.
_MEDIA_TAGS = (IMAGE_TAG, "<video>", "<audio>")
_FIELDS = ("id", "episode_id", "step_index", "task", "source", "policy_version")
_STACKS = {"llamafactory": "LLaMA-Factory", "swift": "ms-swift"}


def _provenance(record: dict[str, Any]) -> dict[str, Any]:
    return {name: record[name] for name in _FIELDS}


# --- TRL -----------------------------------------------------------------------------------------


def _trl_message(message: dict[str, Any]) -> dict[str, Any]:
    parts = [
        {"type": "image"} if p["type"] == "image" else {"type": "text", "text": p["text"]}
        for p in message["content"]
    ]
    return {"role": message["role"], "content": parts}


def trl_record(record: dict[str, Any]) -> dict[str, Any]:
    """A chat record in TRL's prompt-completion form (the target turn is the completion)."""
    *prompt, target = record["messages"]
    return {
        **_provenance(record),
        "prompt": [_trl_message(m) for m in prompt],
        "completion": [_trl_message(target)],
        "images": list(record["images"]),
    }


# --- LLaMA-Factory and ms-swift ------------------------------------------------------------------


def _tagged(record: dict[str, Any], message: dict[str, Any], layout: str) -> str:
    texts = []
    for part in message["content"]:
        if part["type"] == "image":
            texts.append(IMAGE_TAG)
            continue
        text = part["text"]
        for tag in _MEDIA_TAGS:
            if tag in text:
                raise ExportError(
                    f"record {record['id']}: a {message['role']} text holds {tag!r}, which "
                    f"{_STACKS[layout]} reads as a placeholder (it has no escape); export this version in "
                    "the chat or trl layout"
                )
        texts.append(text)
    return "\n".join(texts)


def tagged_messages(record: dict[str, Any], layout: str) -> list[dict[str, Any]]:
    """The chat as role / content strings with an `<image>` per screenshot, alternating user and
    assistant after the system turn (see the module docstring), for `layout` "llamafactory" or "swift"."""
    *history, target = record["messages"]
    out: list[dict[str, Any]] = []
    for message in history:
        text = _tagged(record, message, layout)
        if out and out[-1]["role"] == message["role"]:
            out[-1]["content"] += "\n" + text
        else:
            out.append({"role": message["role"], "content": text})
    if not out or out[-1]["role"] != "user":
        out.append({"role": "user", "content": ""})
    out.append({"role": "assistant", "content": _tagged(record, target, layout)})
    return out


def llamafactory_record(record: dict[str, Any]) -> dict[str, Any]:
    """A chat record in LLaMA-Factory's sharegpt form with OpenAI tags."""
    messages = tagged_messages(record, "llamafactory")
    return {**_provenance(record), "messages": messages, "images": list(record["images"])}


def swift_record(record: dict[str, Any]) -> dict[str, Any]:
    """A chat record in ms-swift's messages form, only the target's turn learned."""
    messages = tagged_messages(record, "swift")
    last = len(messages) - 1
    for i, message in enumerate(messages):
        if message["role"] == "assistant":
            message["loss"] = i == last
    return {**_provenance(record), "messages": messages, "images": list(record["images"])}


def llamafactory_dataset_info() -> dict[str, Any]:
    """dataset_info.json for an export: the shards' folder as one sharegpt dataset with OpenAI tags."""
    return {
        LLAMAFACTORY_DATASET: {
            "file_name": "data",
            "formatting": "sharegpt",
            "columns": {"messages": "messages", "images": "images"},
            "tags": {
                "role_tag": "role",
                "content_tag": "content",
                "user_tag": "user",
                "assistant_tag": "assistant",
                "system_tag": "system",
            },
        }
    }


# --- the layouts as export.py uses them ----------------------------------------------------------

_RELAYOUT = {"trl": trl_record, "llamafactory": llamafactory_record, "swift": swift_record}


def sft_layout_records(traj: TrajectoryView, *, options: ExportOptions) -> Iterator[dict[str, Any]]:
    """`sft_records` of the trajectory in `options.layout`."""
    relayout = _RELAYOUT.get(options.layout)
    for record in sft_records(traj, options=options):
        yield record if relayout is None else relayout(record)


def sft_layout_schema(layout: str) -> Any:
    """The explicit pyarrow schema of SFT records in `layout`."""
    import pyarrow as pa  # type: ignore[import-untyped]

    base = arrow_schema("sft")
    if layout == "chat":
        return base
    s = pa.string()
    fields = [base.field(name) for name in _FIELDS]
    images = ("images", pa.list_(s))
    if layout == "trl":
        part = pa.struct([("type", s), ("text", s)])
        turns = pa.list_(pa.struct([("role", s), ("content", pa.list_(part))]))
        return pa.schema([*fields, ("prompt", turns), ("completion", turns), images])
    if layout == "llamafactory":
        return pa.schema([*fields, ("messages", pa.list_(pa.struct([("role", s), ("content", s)]))), images])
    if layout == "swift":
        message = pa.struct([("role", s), ("content", s), ("loss", pa.bool_())])
        return pa.schema([*fields, ("messages", pa.list_(message)), images])
    raise ExportError(f"unknown layout {layout!r}; valid: {', '.join(SFT_LAYOUTS)}")


def layout_files(layout: str) -> dict[str, str]:
    """The files a layout's stack needs beside the data (LLaMA-Factory's dataset_info.json), by name
    relative to the export folder, with their text."""
    if layout == "llamafactory":
        return {LLAMAFACTORY_INFO: json.dumps(llamafactory_dataset_info(), indent=2) + "\n"}
    return {}
