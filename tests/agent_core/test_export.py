"""Dataset exports written to disk and read back the way their users will: with HF `datasets`."""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from PIL import Image

from agent_core import actions as A
from agent_core.actions.grammar import format_response
from agent_core.data.export import (
    FORMATS,
    KINDS,
    MANIFEST,
    ExportError,
    ExportManifest,
    ExportOptions,
    agentnet_records,
    ct_records,
    export_trajectories,
    sft_records,
)
from agent_core.flywheel import StepView, TrajectoryView, validate
from agent_core.prompts import system_prompt

SCREEN = (64, 36)
BUILDERS = {"sft": sft_records, "ct": ct_records, "agentnet": agentnet_records}


class Media:
    """Distinct small PNGs stored under content-addressed names, as the web app stores screenshots."""

    def __init__(self, root: Path):
        self.root = root
        self.made = 0

    def png(self) -> str:
        self.made += 1
        buf = io.BytesIO()
        Image.new("RGB", SCREEN, ((self.made * 40) % 256, (self.made * 90) % 256, self.made % 256)).save(
            buf, format="PNG"
        )
        data = buf.getvalue()
        sha = hashlib.sha256(data).hexdigest()
        name = f"screens/{sha[:2]}/{sha[2:4]}/{sha}.png"
        (self.root / name).parent.mkdir(parents=True, exist_ok=True)
        (self.root / name).write_bytes(data)
        return name

    def file(self, name: str) -> Path:
        return self.root / name


def step(index: int, screenshot: str, action: A.Action | None, **kw: Any) -> StepView:
    return StepView(
        index=index,
        actor=kw.pop("actor", "agent"),
        screenshot=screenshot,
        screen=SCREEN,
        thought=kw.pop("thought", f"I do step {index}."),
        action=A.action_to_dict(action) if action is not None else None,
        action_text=kw.pop("action_text", ""),
        **kw,
    )


def make_trajs(media: Media) -> list[TrajectoryView]:
    """Episode 1 succeeds (one step did not parse; one screen repeats); episode 2 fails, reviewed."""
    shots = [media.png() for _ in range(3)]
    ep1 = TrajectoryView(
        episode_id=1,
        task="miniwob/click-button",
        instruction="Click the OK button.",
        platform="browser",
        source="agent",
        policy_version="tiny-1",
        reward=1.0,
        max_steps=10,
        review="",
        steps=(
            step(0, shots[0], A.Click(10, 20)),
            step(1, shots[1], A.Type(content="hello\n")),
            step(2, shots[2], None, invalid_reason="no 'Action:' in the response", raw_output="I am lost"),
            step(3, shots[1], A.Finished(content="")),  # back on an earlier screen: one image file
        ),
        final_answer="",
    )
    more = [media.png() for _ in range(3)]
    ep2 = TrajectoryView(
        episode_id=2,
        task="desktop/rename-file",
        instruction="Rename a.txt to b.txt.",
        platform="android",
        source="human",
        policy_version="",
        reward=0.0,
        max_steps=10,
        review="rejected",
        steps=(
            step(0, more[0], A.Click(5, 5), actor="human"),
            step(1, more[1], A.Click(60, 30), actor="human", label="wrong"),
            step(
                2,
                more[2],
                A.Click(1, 1),
                actor="human",
                label="wrong",
                corrected_thought="The file is at the top left.",
                corrected_action=A.action_to_dict(A.LongPress(3, 4)),
            ),
        ),
    )
    return [ep1, ep2]


EXPECTED_RECORDS = {"sft": 5, "ct": 2, "agentnet": 2}  # SFT: ep1 steps 0, 1, 3; ep2 steps 0, 2


@pytest.fixture
def media(tmp_path: Path) -> Media:
    return Media(tmp_path / "media")


@pytest.fixture
def hf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Any:
    """`datasets.load_dataset` reading local files only, caching under tmp_path."""
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_CACHE", str(tmp_path / "hf-cache"))
    import datasets

    datasets.disable_progress_bars()

    def load(out: Path, manifest: ExportManifest) -> Any:
        files = [str(out / s.path) for s in manifest.shards]
        builder = "json" if manifest.fmt == "jsonl" else "parquet"
        return datasets.load_dataset(builder, data_files=files, split="train", cache_dir=str(tmp_path / "hf"))

    return load


def export(trajs: Any, out: Path, media: Media, kind: str, fmt: str, **kw: Any) -> ExportManifest:
    return export_trajectories(trajs, out_dir=out, kind=kind, fmt=fmt, image_file=media.file, **kw)


def files_under(path: Path) -> list[str]:
    return sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_file())


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("kind", KINDS)
def test_export_loads_back_with_hf_datasets(kind: str, fmt: str, media: Media, tmp_path: Path, hf: Any):
    trajs = make_trajs(media)
    out = tmp_path / "out"
    manifest = export(trajs, out, media, kind, fmt, meta={"dataset": "demo", "version": 3})

    assert manifest.records == EXPECTED_RECORDS[kind]
    assert (manifest.episodes, manifest.steps) == (2, 7)
    ds = hf(out, manifest)
    assert len(ds) == manifest.records
    options = ExportOptions()
    expected = [r for t in trajs for r in BUILDERS[kind](t, options=options)]
    assert ds.to_list() == expected

    # Every image a record names is in the export, readable, and each screenshot is there once.
    named = {p for r in expected for p in _images(kind, r)}
    assert sorted(named) == sorted(f for f in files_under(out) if f.startswith("images/"))
    assert manifest.images == len(named) == 6  # ep1 shows 3 distinct screens (one of them twice), ep2 3
    for rel in named:
        with Image.open(out / rel) as im:
            assert im.size == SCREEN

    on_disk = json.loads((out / MANIFEST).read_text())
    assert ExportManifest.from_json(on_disk) == manifest
    assert on_disk["meta"] == {"dataset": "demo", "version": 3}
    assert on_disk["options"]["last_n"] == 5
    for shard in manifest.shards:
        data = (out / shard.path).read_bytes()
        assert hashlib.sha256(data).hexdigest() == shard.sha256
        assert len(data) == shard.bytes
    assert files_under(out) == sorted([MANIFEST, *(s.path for s in manifest.shards), *named])


def _images(kind: str, record: dict[str, Any]) -> list[str]:
    if kind == "agentnet":
        return [s["image"] for s in record["traj"]]
    return record["images"]


def test_sft_records_are_chats_ending_in_the_target(media: Media):
    ep1 = make_trajs(media)[0]
    records = list(sft_records(ep1, options=ExportOptions()))
    assert [r["id"] for r in records] == ["e1-s0", "e1-s1", "e1-s3"]  # step 2 did not parse
    last = records[-1]
    roles = [m["role"] for m in last["messages"]]
    assert roles == ["system", "user"] + ["user", "assistant"] * 4
    assert last["messages"][0]["content"][0]["text"] == system_prompt("browser")
    assert last["messages"][1]["content"] == [{"type": "text", "text": ep1.instruction, "image": None}]
    target = format_response(thought="I do step 3.", actions=[A.Finished()], screen=SCREEN)
    assert last["messages"][-1]["content"] == [{"type": "text", "text": target, "image": None}]
    # History: the click in smart-resize coordinates, and the unparsed output as it came.
    texts = [m["content"][0]["text"] for m in last["messages"] if m["role"] == "assistant"]
    assert texts[0] == format_response(thought="I do step 0.", actions=[A.Click(10, 20)], screen=SCREEN)
    assert texts[2] == "I am lost"
    assert last["images"] == [p["image"] for m in last["messages"] for p in m["content"] if p["image"]]
    for message in last["messages"]:
        for part in message["content"]:
            assert set(part) == {"type", "text", "image"}
            assert (part["text"] is None) != (part["image"] is None)


@pytest.mark.parametrize("last_n", [0, 1, 2, 10])
def test_sft_keeps_only_the_last_n_screenshots(media: Media, last_n: int):
    ep1 = make_trajs(media)[0]
    last = list(sft_records(ep1, options=ExportOptions(last_n=last_n)))[-1]
    image_turns = [k for k, m in enumerate(last["messages"]) if m["content"][0]["type"] == "image"]
    assert len(image_turns) == len(last["images"]) == min(last_n, 4)
    if last_n:
        assert (
            last["messages"][image_turns[-1] + 1] == last["messages"][-1]
        )  # the current screen leads the target
        assert last["images"][-1].endswith(Path(ep1.steps[3].screenshot).name)
    assert sum(m["role"] == "assistant" for m in last["messages"]) == 4  # older steps stay as text


def test_sft_applies_corrections_and_skips_uncorrected_wrong_steps(media: Media):
    ep2 = make_trajs(media)[1]
    records = list(sft_records(ep2, options=ExportOptions(coords="absolute")))
    assert [r["step_index"] for r in records] == [0, 2]
    final = records[-1]["messages"]
    assert final[0]["content"][0]["text"] == system_prompt("mobile", coords="absolute")  # android → mobile
    assert final[-1]["content"][0]["text"] == (
        "Thought: The file is at the top left.\nAction: long_press(start_box='(3,4)')"
    )
    # The wrong step is still in the history, as it happened.
    history = [m["content"][0]["text"] for m in final if m["role"] == "assistant"][:-1]
    assert history[1] == "Thought: I do step 1.\nAction: click(start_box='(60,30)')"


def test_ct_record_interleaves_screens_and_steps(media: Media):
    ep1 = make_trajs(media)[0]
    ep1 = dataclasses.replace(ep1, verdict=validate(ep1))
    (record,) = ct_records(ep1, options=ExportOptions())
    kinds = [p["type"] for p in record["content"]]
    assert kinds == ["text"] + ["image", "text"] * 4 + ["text"]
    texts = [p["text"] for p in record["content"] if p["type"] == "text"]
    assert texts[0] == "Task: Click the OK button."
    assert texts[3] == "Step 2 (agent):\nOutput that did not parse (no 'Action:' in the response):\nI am lost"
    assert texts[-1] == "Outcome: reward 1 (success)"
    assert record["v"] == 0 and record["reward"] == 1.0
    assert len(record["images"]) == 4


def test_agentnet_record_uses_normalized_pyautogui_and_review_flags(media: Media):
    ep1, ep2 = make_trajs(media)
    (rec1,) = agentnet_records(ep1, options=ExportOptions())
    assert rec1["task_id"] == "e1" and rec1["task_completed"] is True
    codes = [s["value"]["code"] for s in rec1["traj"]]
    assert codes == [
        "pyautogui.click(x=0.1562, y=0.5556)",
        "pyautogui.write(message='hello\\n')",
        "",
        "computer.terminate(status='success')",
    ]
    assert [s["value"]["last_step_correct"] for s in rec1["traj"]] == [True, True, False, True]
    assert rec1["traj"][0]["value"]["action"] == "click(start_box='(10,20)')"  # screen pixels
    (rec2,) = agentnet_records(ep2, options=ExportOptions())
    assert rec2["task_completed"] is False
    assert [s["value"]["last_step_correct"] for s in rec2["traj"]] == [True, False, False]
    assert all(s["image"].startswith("images/") for s in rec2["traj"])


def test_shards_split_at_shard_records(media: Media, tmp_path: Path, hf: Any):
    import pyarrow.parquet as pq

    trajs = make_trajs(media)
    options = ExportOptions(shard_records=3, row_group_records=2)
    for fmt in FORMATS:
        out = tmp_path / fmt
        manifest = export(trajs, out, media, "sft", fmt, options=options)
        assert [s.records for s in manifest.shards] == [3, 2]
        assert [s.path for s in manifest.shards] == [f"data/train-00000.{fmt}", f"data/train-00001.{fmt}"]
        assert len(hf(out, manifest)) == 5
        if fmt == "parquet":
            assert pq.ParquetFile(out / manifest.shards[0].path).metadata.num_row_groups == 2


def test_only_images_the_records_show_are_copied(media: Media, tmp_path: Path):
    out = tmp_path / "out"
    manifest = export(make_trajs(media), out, media, "sft", "jsonl", options=ExportOptions(last_n=1))
    assert manifest.images == 4  # the targets' screens: ep1 steps 0, 1 (= 3); ep2 steps 0, 2
    assert len(files_under(out / "images")) == 4


def test_no_trajectories_give_one_empty_shard(media: Media, tmp_path: Path):
    manifest = export([], tmp_path / "out", media, "ct", "parquet")
    assert manifest.records == 0
    assert [s.records for s in manifest.shards] == [0]


def test_missing_image_fails_and_leaves_nothing_behind(media: Media, tmp_path: Path):
    trajs = make_trajs(media)
    missing = trajs[1].steps[2].screenshot

    def image_file(name: str) -> Path:
        if name == missing:
            raise FileNotFoundError(name)
        return media.file(name)

    for fmt in FORMATS:
        out = tmp_path / fmt
        with pytest.raises(ExportError, match=f"episode 2 step 2: image {missing}"):
            export_trajectories(trajs, out_dir=out, kind="ct", fmt=fmt, image_file=image_file)
        assert not out.exists()


def test_image_file_pointing_nowhere_fails(media: Media, tmp_path: Path):
    with pytest.raises(ExportError, match="is missing"):
        export_trajectories(
            make_trajs(media),
            out_dir=tmp_path / "o",
            kind="sft",
            fmt="jsonl",
            image_file=lambda n: tmp_path / n,
        )


def test_error_from_the_source_propagates_and_cleans_up(media: Media, tmp_path: Path):
    trajs = make_trajs(media)

    def source() -> Iterator[TrajectoryView]:
        yield trajs[0]
        raise RuntimeError("database went away")

    out = tmp_path / "out"
    out.mkdir()
    (out / "README").write_text("not ours")
    with pytest.raises(RuntimeError, match="database went away"):
        export(source(), out, media, "sft", "jsonl", options=ExportOptions(shard_records=1))
    assert files_under(out) == ["README"]


def test_unknown_kind_format_and_bad_options_are_refused(media: Media, tmp_path: Path):
    with pytest.raises(ExportError, match="valid: sft, ct, agentnet"):
        export([], tmp_path / "a", media, "rl", "jsonl")
    with pytest.raises(ExportError, match="valid: jsonl, parquet"):
        export([], tmp_path / "b", media, "sft", "csv")
    with pytest.raises(ExportError, match="valid: smart_resize, relative, absolute"):
        export([], tmp_path / "c", media, "sft", "jsonl", options=ExportOptions(coords="pixels"))
    with pytest.raises(ExportError, match="shard_records must be an integer >= 1"):
        export([], tmp_path / "d", media, "sft", "jsonl", options=ExportOptions(shard_records=0))
    assert not any((tmp_path / d).exists() for d in "abcd")


def test_existing_export_is_not_overwritten(media: Media, tmp_path: Path):
    out = tmp_path / "out"
    export([], out, media, "sft", "jsonl")
    with pytest.raises(ExportError, match="already holds an export"):
        export([], out, media, "sft", "jsonl")


def test_progress_reports_steps_and_episodes(media: Media, tmp_path: Path):
    calls: list[tuple[int, int]] = []
    export(
        make_trajs(media), tmp_path / "out", media, "ct", "jsonl", progress=lambda s, e: calls.append((s, e))
    )
    assert calls == [(4, 1), (7, 2)]


def test_images_are_hard_linked_or_copied(media: Media, tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    trajs = make_trajs(media)
    src = media.file(trajs[0].steps[0].screenshot)
    linked = tmp_path / "linked"
    export(trajs, linked, media, "ct", "jsonl")
    dst = linked / "images" / src.name
    assert os.path.samefile(src, dst)

    def no_links(a: object, b: object) -> None:
        raise OSError("cross-device link")

    monkeypatch.setattr(os, "link", no_links)
    copied = tmp_path / "copied"
    export(trajs, copied, media, "ct", "jsonl")
    assert not os.path.samefile(src, copied / "images" / src.name)
    assert (copied / "images" / src.name).read_bytes() == src.read_bytes()


def test_placeholder_thoughts_are_never_taught_and_are_counted(media: Media, tmp_path: Path):
    """A scripted policy once recorded "oracle step N": no record of any kind may teach it."""
    traj = dataclasses.replace(
        make_trajs(media)[0],
        steps=tuple(
            dataclasses.replace(s, thought=t)
            for s, t in zip(make_trajs(media)[0].steps, ["oracle step 0", "random", "", "Done."], strict=True)
        ),
    )
    for kind in KINDS:
        text = json.dumps(list(BUILDERS[kind](traj, options=ExportOptions())))
        for stand_in in ("oracle step", "random", "Done."):
            assert stand_in not in text, (kind, stand_in)
    targets = [r["messages"][-1]["content"][0]["text"] for r in sft_records(traj, options=ExportOptions())]
    assert targets and all(t.startswith("Action: ") for t in targets)  # the action is still taught
    manifest = export([traj], tmp_path / "out", media, "sft", "jsonl")
    assert manifest.placeholder_thoughts == 3  # the empty thought is no placeholder: nothing was said
    assert ExportManifest.from_json(manifest.to_json()).placeholder_thoughts == 3


def test_a_tool_calls_result_and_the_tools_reach_the_sft_and_ct_records(media: Media):
    """The tools the episode's prompt listed are in the system prompt, and what a tool gave back is the
    text observation beside the next screen, as the agent read them (agent_core.memory)."""
    tools = ({"server": "records", "name": "lookup", "description": "A record by id.",
              "input_schema": {"type": "object", "properties": {"id": {"type": "string"}}}},)  # fmt: skip
    call = A.McpCall(server="records", tool="lookup", arguments={"id": "T-7"})
    result = "Tool result of records.lookup:\nT-7: printer jam, priority high"
    shots = [media.png() for _ in range(2)]
    traj = TrajectoryView(
        episode_id=9, task="desktop/hybrid/mcp-ticket-into-form", instruction="File ticket T-7.",
        platform="desktop", source="agent", policy_version="p", reward=1.0, max_steps=5, review="",
        steps=(step(0, shots[0], call, result=result), step(1, shots[1], A.Click(3, 4))), tools=tools,
    )  # fmt: skip
    last = list(sft_records(traj, options=ExportOptions()))[-1]["messages"]
    system = last[0]["content"][0]["text"]
    assert system == system_prompt("desktop", tools=tools) and "records" in system and "lookup" in system
    kinds = [(m["role"], m["content"][0]["type"]) for m in last]
    assert kinds == [("system", "text"), ("user", "text"), ("user", "image"), ("assistant", "text"),
                     ("user", "text"), ("user", "image"), ("assistant", "text")]  # fmt: skip
    assert last[4]["content"][0]["text"] == result
    (record,) = ct_records(traj, options=ExportOptions())
    step0 = [p["text"] for p in record["content"] if p["type"] == "text"][1]
    assert step0.endswith("\n" + result)
