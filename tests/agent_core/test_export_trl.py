"""SFT exports in the layouts TRL, LLaMA-Factory and ms-swift read as they are, read back as they read them.

The tag layouts (llamafactory, swift) are loaded with `datasets` as those stacks load them and checked
against the rules they apply (alternating turns, one `<image>` per image, paths under their media root).
The trl layout is loaded with `datasets` and trained on for one real SFTTrainer step with a tiny
Qwen2.5-VL; the image tokens in the batch TRL built equal what `agent_core.policies.vision` says the
engine makes of those screenshots.
"""

from __future__ import annotations

import hashlib
import io
import json
import math
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agent_core import actions as A
from agent_core.data.export import MANIFEST, ExportError, ExportOptions, export_trajectories, sft_records
from agent_core.data.export_formats import SFT_LAYOUTS
from agent_core.data.sft_layouts import (
    IMAGE_TAG,
    LLAMAFACTORY_DATASET,
    LLAMAFACTORY_INFO,
    llamafactory_record,
    swift_record,
    trl_record,
)
from agent_core.flywheel import StepView, TrajectoryView

# Screens the tiny Qwen2.5-VL turns into 77 and 144 image tokens (28-pixel cells, 2x2 merged).
BROWSER = (320, 200)
PHONE = (252, 448)


class Media:
    """Distinct PNGs under content-addressed names, as the web app stores screenshots."""

    def __init__(self, root: Path):
        self.root = root
        self.made = 0

    def png(self, size: tuple[int, int]) -> str:
        self.made += 1
        buf = io.BytesIO()
        Image.new("RGB", size, ((self.made * 40) % 256, (self.made * 90) % 256, 7)).save(buf, format="PNG")
        sha = hashlib.sha256(buf.getvalue()).hexdigest()
        name = f"screens/{sha[:2]}/{sha}.png"
        (self.root / name).parent.mkdir(parents=True, exist_ok=True)
        (self.root / name).write_bytes(buf.getvalue())
        return name

    def file(self, name: str) -> Path:
        return self.root / name


def step(
    index: int, screenshot: str, screen: tuple[int, int], action: A.Action | None, **kw: Any
) -> StepView:
    return StepView(
        index=index,
        actor=kw.pop("actor", "agent"),
        screenshot=screenshot,
        screen=screen,
        thought=kw.pop("thought", f"I do step {index}."),
        action=A.action_to_dict(action) if action is not None else None,
        action_text="",
        **kw,
    )


def make_trajs(media: Media, instruction: str = "Click the OK button.") -> list[TrajectoryView]:
    """Episode 1: a browser task with a tool result, an output that did not parse and a repeated screen.
    Episode 2: a phone task, one wrong step corrected on a step whose screenshot was not recorded."""
    shots = [media.png(BROWSER) for _ in range(3)]
    ep1 = TrajectoryView(
        episode_id=1,
        task="miniwob/click-button",
        instruction=instruction,
        platform="browser",
        source="agent",
        policy_version="tiny-1",
        reward=1.0,
        max_steps=10,
        review="",
        steps=(
            step(0, shots[0], BROWSER, A.Click(10, 20)),
            step(1, shots[1], BROWSER, A.Type(content="hello\n"), result="The form says: saved."),
            step(
                2, shots[2], BROWSER, None, invalid_reason="no 'Action:' in the response", raw_output="lost"
            ),
            step(3, shots[1], BROWSER, A.Finished(content="")),
        ),
    )
    phone = [media.png(PHONE) for _ in range(2)]
    ep2 = TrajectoryView(
        episode_id=2,
        task="android/rename-file",
        instruction="Rename a.txt to b.txt.",
        platform="android",
        source="human",
        policy_version="",
        reward=0.0,
        max_steps=10,
        review="rejected",
        steps=(
            step(0, phone[0], PHONE, A.Click(5, 5), actor="human"),
            step(1, phone[1], PHONE, A.Click(60, 30), actor="human", label="wrong"),
            step(
                2,
                "",  # no screenshot was recorded before this step
                PHONE,
                A.Click(1, 1),
                actor="human",
                label="wrong",
                corrected_thought="The file is at the top left.",
                corrected_action=A.action_to_dict(A.LongPress(3, 4)),
            ),
        ),
    )
    return [ep1, ep2]


@pytest.fixture
def media(tmp_path: Path) -> Media:
    return Media(tmp_path / "media")


@pytest.fixture
def hf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`datasets` reading local files only, caching under tmp_path."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    import datasets

    datasets.disable_progress_bars()
    return datasets


def export(media: Media, out: Path, layout: str, fmt: str = "jsonl", **kw: Any) -> Any:
    trajs = kw.pop("trajs", None) or make_trajs(media)
    return export_trajectories(
        trajs,
        out_dir=out,
        kind="sft",
        fmt=fmt,
        image_file=media.file,
        options=ExportOptions(layout=layout, **kw),
    )


def chat_records(trajs: list[TrajectoryView], **kw: Any) -> list[dict[str, Any]]:
    return [r for t in trajs for r in sft_records(t, options=ExportOptions(**kw))]


# --- the tag layouts: LLaMA-Factory and ms-swift ------------------------------------------------


def load_llamafactory(hf: Any, out: Path, cache: Path) -> Any:
    """What LLaMA-Factory's loader does with dataset_dir=out, dataset=trajectories: read the dataset's
    description, load every file of its folder with the builder its extension names."""
    info = json.loads((out / LLAMAFACTORY_INFO).read_text())[LLAMAFACTORY_DATASET]
    files = sorted((out / info["file_name"]).iterdir())
    (builder,) = {{"jsonl": "json", "json": "json", "parquet": "parquet"}[f.suffix[1:]] for f in files}
    ds = hf.load_dataset(builder, data_files=[str(f) for f in files], split="train", cache_dir=str(cache))
    return info, ds


def check_llamafactory_sample(info: dict[str, Any], row: dict[str, Any], media_dir: Path) -> None:
    """The checks LLaMA-Factory's sharegpt converter and multimodal plugin make (a sample failing the
    first ones is skipped with only a warning; the last one stops the run)."""
    cols, tags = info["columns"], info["tags"]
    messages = row[cols["messages"]]
    assert messages[0][tags["role_tag"]] == tags["system_tag"]
    turns = messages[1:]
    for k, message in enumerate(turns):
        assert message[tags["role_tag"]] == (tags["user_tag"], tags["assistant_tag"])[k % 2], turns
    assert len(turns) % 2 == 0
    text = "".join(m[tags["content_tag"]] for m in messages)
    assert text.count(IMAGE_TAG) == len(row[cols["images"]])
    assert "<video>" not in text and "<audio>" not in text
    for path in row[cols["images"]]:
        assert (media_dir / path).is_file(), path


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_llamafactory_reads_the_export_with_its_dataset_info(
    fmt: str, media: Media, tmp_path: Path, hf: Any
) -> None:
    out = tmp_path / "out"
    trajs = make_trajs(media)
    manifest = export(media, out, "llamafactory", fmt, trajs=trajs)
    info, ds = load_llamafactory(hf, out, tmp_path / "hf")
    assert info["formatting"] == "sharegpt" and info["columns"] == {
        "messages": "messages",
        "images": "images",
    }
    assert len(ds) == manifest.records == 5  # ep1 steps 0, 1, 3; ep2 steps 0, 2
    rows = ds.to_list()
    for row in rows:
        check_llamafactory_sample(info, row, media_dir=out)  # media_dir defaults to dataset_dir
    assert rows == [llamafactory_record(r) for r in chat_records(trajs)]
    assert manifest.options["layout"] == "llamafactory"
    assert json.loads((out / MANIFEST).read_text())["options"]["layout"] == "llamafactory"


def test_tag_layouts_join_a_steps_user_turns_and_keep_the_target_apart(media: Media) -> None:
    chats = {r["id"]: r for r in chat_records(make_trajs(media))}
    texts = [m["content"][0]["text"] for m in chats["e1-s3"]["messages"] if m["role"] == "assistant"]
    system = chats["e1-s3"]["messages"][0]["content"][0]["text"]
    assert llamafactory_record(chats["e1-s3"])["messages"] == [
        {"role": "system", "content": system},
        {"role": "user", "content": f"Click the OK button.\n{IMAGE_TAG}"},
        {"role": "assistant", "content": texts[0]},
        {"role": "user", "content": IMAGE_TAG},
        {"role": "assistant", "content": texts[1]},
        {"role": "user", "content": f"The form says: saved.\n{IMAGE_TAG}"},  # step 1's tool result
        {"role": "assistant", "content": "lost"},  # the output that did not parse, as it came
        {"role": "user", "content": IMAGE_TAG},
        {"role": "assistant", "content": texts[3]},
    ]
    # Step 2 of episode 2 has no screenshot: an empty user turn stands between history and target.
    messages = swift_record(chats["e2-s2"])["messages"]
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert messages[-2] == {"role": "user", "content": ""}
    assert messages[-1]["content"] == chats["e2-s2"]["messages"][-1]["content"][0]["text"]
    assert messages[-1]["content"].startswith("Thought: The file is at the top left.\nAction: long_press(")
    # Only the target is learned; history turns (the wrong step 1 among them) are not.
    assert [m.get("loss") for m in messages] == [None, None, False, None, False, None, True]


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_ms_swift_reads_messages_and_images_with_root_image_dir(
    fmt: str, media: Media, tmp_path: Path, hf: Any
) -> None:
    out = tmp_path / "out"
    manifest = export(media, out, "swift", fmt, last_n=2)
    files = [str(out / s.path) for s in manifest.shards]
    ds = hf.load_dataset("json" if fmt == "jsonl" else "parquet", data_files=files, split="train",
                         cache_dir=str(tmp_path / "hf"))  # fmt: skip
    assert not (out / LLAMAFACTORY_INFO).exists()
    for row in ds.to_list():
        messages = row["messages"]
        # ms-swift's checks: known roles, no null content, loss only on assistant turns; one <image>
        # per image; relative paths under ROOT_IMAGE_DIR.
        assert {m["role"] for m in messages} <= {"system", "user", "assistant"}
        assert all(isinstance(m["content"], str) for m in messages)
        assert [m["loss"] for m in messages if m["role"] == "assistant"][-1] is True
        assert sum(m.get("loss") is True for m in messages) == 1
        assert all(m.get("loss") is None for m in messages if m["role"] != "assistant")
        assert "".join(m["content"] for m in messages).count(IMAGE_TAG) == len(row["images"]) <= 2
        for path in row["images"]:
            assert (out / path).is_file()


@pytest.mark.parametrize("layout", ["llamafactory", "swift"])
def test_tag_layouts_refuse_a_text_their_stack_would_read_as_a_placeholder(
    layout: str, media: Media, tmp_path: Path
) -> None:
    trajs = make_trajs(media, instruction="Drag the <image> onto the page.")
    with pytest.raises(ExportError, match=r"record e1-s0: a user text holds '<image>'.*chat or trl"):
        export(media, tmp_path / "out", layout, trajs=trajs)
    assert not (tmp_path / "out").exists()  # nothing left behind
    # TRL reads image parts, not tags: the same text is plain text there.
    export(media, tmp_path / "trl", "trl", trajs=trajs)


def test_layout_is_checked_at_the_door(media: Media, tmp_path: Path) -> None:
    assert SFT_LAYOUTS == ("chat", "trl", "llamafactory", "swift")
    with pytest.raises(ExportError, match="unknown layout 'sharegpt'; valid: chat, trl, llamafactory, swift"):
        ExportOptions(layout="sharegpt").check()
    with pytest.raises(ExportError, match=r"layout 'trl' is for sft exports; ct records have one \(chat\)"):
        export_trajectories(make_trajs(media), out_dir=tmp_path / "o", kind="ct", fmt="jsonl",
                            image_file=media.file, options=ExportOptions(layout="trl"))  # fmt: skip


# --- TRL -----------------------------------------------------------------------------------------


def test_trl_layout_is_prompt_and_completion_in_typed_parts(media: Media) -> None:
    for chat in chat_records(make_trajs(media)):
        record = trl_record(chat)
        assert [m["role"] for m in record["prompt"]] == [m["role"] for m in chat["messages"][:-1]]
        assert record["completion"] == [
            {
                "role": "assistant",
                "content": [{"type": "text", "text": chat["messages"][-1]["content"][0]["text"]}],
            }
        ]
        parts = [p for m in record["prompt"] for p in m["content"]]
        assert all(p in ({"type": "image"},) or set(p) == {"type", "text"} for p in parts)
        assert sum(p == {"type": "image"} for p in parts) == len(record["images"]) == len(chat["images"])


def trl_processor(model_dir: Path) -> Any:
    """The project's torchvision-free Qwen-VL processor, given the transformers base class TRL checks
    for (SFTTrainer treats a `ProcessorMixin` as a vision-language model's processor)."""
    from transformers import ProcessorMixin

    from agent_core.policies.qwen_vl import QwenVLProcessor, load_processor

    class QwenVLProcessorForTRL(QwenVLProcessor, ProcessorMixin):  # type: ignore[misc]
        pass

    base = load_processor(model_dir)
    assert isinstance(base, QwenVLProcessor)
    return QwenVLProcessorForTRL(base.tokenizer, base.image_processor, name=base.name)


@pytest.mark.slow
def test_trl_trains_a_tiny_qwen2_5_vl_on_the_export_counting_image_tokens_as_the_engine(
    media: Media, tmp_path: Path, hf: Any
) -> None:
    pytest.importorskip("trl")
    import torch
    import transformers
    from trl import SFTConfig, SFTTrainer

    from agent_core.policies.vision import image_spec
    from agent_core.tiny_models import build_tiny_qwen2_5_vl

    model_dir = build_tiny_qwen2_5_vl(tmp_path / "model")
    spec = image_spec(model_dir)
    assert spec is not None
    out = tmp_path / "out"
    manifest = export(media, out, "trl")
    files = [str(out / s.path) for s in manifest.shards]
    ds = hf.load_dataset("json", data_files=files, split="train", cache_dir=str(tmp_path / "hf"))
    ds = ds.filter(lambda r: r["id"] == "e1-s3")  # four screenshots of one screen size
    # TRL takes decoded images: the paths, relative to the export folder, become images.
    ds = ds.map(lambda r: {"images": [str(out / p) for p in r["images"]]})
    ds = ds.cast_column("images", hf.List(hf.Image()))

    processor = trl_processor(model_dir)
    model = transformers.AutoModelForImageTextToText.from_pretrained(str(model_dir))
    before = {n: p.detach().clone() for n, p in model.named_parameters() if p.requires_grad}
    args = SFTConfig(
        output_dir=str(tmp_path / "trl"),
        max_steps=1,
        per_device_train_batch_size=1,  # the project's processor takes one prompt at a time
        learning_rate=1e-3,
        max_length=None,  # never truncate a prompt through its image tokens
        bf16=False,
        activation_checkpointing=False,
        use_cpu=True,
        report_to="none",
        save_strategy="no",
        logging_steps=1,
        disable_tqdm=True,
        dataloader_num_workers=0,
        seed=0,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=processor)
    batches: list[tuple[Any, Any, Any]] = []
    collate = trainer.data_collator

    def recording(examples: list[dict[str, Any]]) -> Any:
        sizes = [[im.size for im in ex["images"]] for ex in examples]
        completions = [ex["completion"][0]["content"][0]["text"] for ex in examples]
        batch = collate(examples)
        batches.append((sizes, completions, batch))
        return batch

    trainer.data_collator = recording
    result = trainer.train()

    assert math.isfinite(result.training_loss) and result.global_step == 1
    changed = [
        n for n, p in model.named_parameters() if p.requires_grad and not torch.equal(before[n], p.detach())
    ]
    assert changed and any(n.startswith("model.visual.") for n in changed)  # the images reached the model
    ((sizes,), (completion,), batch) = batches[0]
    assert sizes == [BROWSER] * 4
    # Image tokens as the engine counts them: per screenshot, its cells after smart_resize.
    ids = batch["input_ids"][0]
    pad = processor.image_token_id
    runs = [len(r) for r in "".join("x" if t == pad else " " for t in ids.tolist()).split()]
    assert runs == [spec.image_tokens(*s) for s in sizes] == [77] * 4
    assert int((batch["mm_token_type_ids"][0] == 1).sum()) == sum(runs)
    assert batch["image_grid_thw"].tolist() == [[1, 14, 22]] * 4  # 196 x 308 pixels in 14-pixel patches
    # Only the completion is learned: the target's text and the end of its turn.
    learned = processor.tokenizer.decode(ids[batch["labels"][0] != -100])
    assert learned.startswith(completion) and learned.removeprefix(completion).strip() == "<|im_end|>"
