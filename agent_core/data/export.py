"""Streaming dataset exports: sharded JSONL or Parquet records with the screenshots beside them.

Layout of an export folder::

    data/train-00000.jsonl   (or .parquet; a new shard every `shard_records` records)
    images/<sha>.png         (each screenshot once, hard-linked where possible)
    manifest.json            (written last: kind, format, counts, shards with sha256, options, meta)
    dataset_info.json        (SFT in the llamafactory layout only: LLaMA-Factory's dataset description)

Records come from `agent_core.data.export_formats` (SFT, CT, AgentNet; see there; SFT in the layout
`options.layout` names, `agent_core.data.sft_layouts`) one trajectory at a time, so memory holds one
trajectory plus at most one Parquet row group. A failed export removes every file it created, so no
manifest is ever left beside partial data.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

from agent_core.data.export_formats import (
    ExportError,
    ExportOptions,
    agentnet_records,
    arrow_schema,
    ct_records,
    image_path,
    placeholder_thoughts,
    record_images,
    sft_records,
)
from agent_core.data.sft_layouts import layout_files, sft_layout_records, sft_layout_schema
from agent_core.flywheel import TrajectoryView

log = logging.getLogger(__name__)

KINDS: tuple[str, ...] = ("sft", "ct", "agentnet")
FORMATS: tuple[str, ...] = ("jsonl", "parquet")
MANIFEST = "manifest.json"
DATA_DIR = "data"
# Written into every manifest.json and checked when one is read back: a format name, not the module
# path (the module is agent_core.data.export now), so it stays as it is.
MANIFEST_FORMAT = "agent_core.export/1"

RecordBuilder = Callable[..., Iterator[dict[str, Any]]]
_BUILDERS: dict[str, RecordBuilder] = {
    "sft": sft_layout_records,
    "ct": ct_records,
    "agentnet": agentnet_records,
}


@dataclass(frozen=True)
class ShardInfo:
    """One data file of an export."""

    path: str
    """Relative to the export folder, e.g. "data/train-00000.jsonl"."""
    records: int
    bytes: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {"path": self.path, "records": self.records, "bytes": self.bytes, "sha256": self.sha256}


@dataclass(frozen=True)
class ExportManifest:
    """What an export holds; also written as manifest.json."""

    kind: str
    fmt: str
    records: int
    episodes: int
    """Trajectories read (those that gave no SFT target included)."""
    steps: int
    """Steps of those trajectories."""
    images: int
    """Distinct image files written."""
    shards: tuple[ShardInfo, ...]
    options: dict[str, Any]
    meta: dict[str, Any] = field(default_factory=dict)
    placeholder_thoughts: int = 0
    """Steps whose recorded thought was a placeholder ("oracle step 3"): written without it."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form (the content of manifest.json)."""
        return {
            "format": MANIFEST_FORMAT,
            "kind": self.kind,
            "fmt": self.fmt,
            "records": self.records,
            "episodes": self.episodes,
            "steps": self.steps,
            "images": self.images,
            "placeholder_thoughts": self.placeholder_thoughts,
            "shards": [s.to_json() for s in self.shards],
            "options": dict(self.options),
            "meta": dict(self.meta),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ExportManifest:
        """Read manifest.json's content back; raises ExportError when it is not a manifest."""
        try:
            if data.get("format") != MANIFEST_FORMAT:
                raise ValueError(f"format is {data.get('format')!r}, not {MANIFEST_FORMAT!r}")
            return cls(
                kind=str(data["kind"]),
                fmt=str(data["fmt"]),
                records=int(data["records"]),
                episodes=int(data["episodes"]),
                steps=int(data["steps"]),
                images=int(data["images"]),
                shards=tuple(
                    ShardInfo(path=str(s["path"]), records=int(s["records"]), bytes=int(s["bytes"]),
                              sha256=str(s["sha256"]))
                    for s in data["shards"]
                ),
                options=dict(data["options"]),
                meta=dict(data.get("meta") or {}),
                placeholder_thoughts=int(data.get("placeholder_thoughts") or 0),
            )  # fmt: skip
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise ExportError(f"not an export manifest: {exc!r}") from None


def _sha256(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


class _Shards:
    """Writes records into numbered shard files, JSONL or Parquet, tracking every file it made."""

    def __init__(self, out_dir: Path, kind: str, fmt: str, options: ExportOptions, created: list[Path]):
        self.out_dir, self.kind, self.fmt, self.options, self.created = out_dir, kind, fmt, options, created
        self.done: list[ShardInfo] = []
        self.path: Path | None = None
        self.count = 0
        self.jsonl: IO[bytes] | None = None
        self.parquet: Any = None
        self.buffer: list[dict[str, Any]] = []
        self.schema: Any = None
        if fmt == "parquet":
            self.schema = sft_layout_schema(options.layout) if kind == "sft" else arrow_schema(kind)

    def _open(self) -> None:
        rel = f"{DATA_DIR}/train-{len(self.done):05d}.{self.fmt}"
        self.path = self.out_dir / rel
        self.created.append(self.path)
        self.count = 0
        if self.fmt == "jsonl":
            self.jsonl = self.path.open("wb")
        else:
            import pyarrow.parquet as pq  # type: ignore[import-untyped]

            self.parquet = pq.ParquetWriter(str(self.path), self.schema)

    def _flush(self) -> None:
        if self.buffer:
            import pyarrow as pa

            table = pa.Table.from_pylist(self.buffer, schema=self.schema)
            self.parquet.write_table(table, row_group_size=self.options.row_group_records)
            self.buffer = []

    def _finish(self) -> None:
        assert self.path is not None
        if self.jsonl is not None:
            self.jsonl.close()
            self.jsonl = None
        if self.parquet is not None:
            self._flush()
            self.parquet.close()
            self.parquet = None
        rel = self.path.relative_to(self.out_dir).as_posix()
        self.done.append(ShardInfo(rel, self.count, self.path.stat().st_size, _sha256(self.path)))
        self.path = None

    def write(self, record: dict[str, Any]) -> None:
        if self.path is None:
            self._open()
        if self.jsonl is not None:
            line = json.dumps(record, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
            self.jsonl.write(line.encode() + b"\n")
        else:
            self.buffer.append(record)
            if len(self.buffer) >= self.options.row_group_records:
                self._flush()
        self.count += 1
        if self.count >= self.options.shard_records:
            self._finish()

    def close(self) -> tuple[ShardInfo, ...]:
        """Finish the open shard (or write one empty shard when there were no records)."""
        if self.path is None and not self.done:
            self._open()
        if self.path is not None:
            self._finish()
        return tuple(self.done)

    def abort(self) -> None:
        """Close open files without finishing them (their paths are in `created`)."""
        for handle in (self.jsonl, self.parquet):
            if handle is not None:
                # the file is deleted next; the error that stopped the export is the one to report
                with contextlib.suppress(Exception):
                    handle.close()
        self.jsonl = self.parquet = None


class _Images:
    """Copies each referenced screenshot into images/ once."""

    def __init__(self, out_dir: Path, image_file: Callable[[str], Path], created: list[Path]):
        self.out_dir, self.image_file, self.created = out_dir, image_file, created
        self.written: dict[str, str] = {}

    def names(self, traj: TrajectoryView) -> dict[str, tuple[str, int]]:
        """Export path -> (storage name, first step index) for the trajectory's screenshots."""
        out: dict[str, tuple[str, int]] = {}
        for step in traj.steps:
            if not step.screenshot:
                continue
            rel = image_path(step.screenshot)
            seen = out.setdefault(rel, (step.screenshot, step.index))[0]
            if seen != step.screenshot:
                raise ExportError(
                    f"episode {traj.episode_id}: {seen} and {step.screenshot} share a file name"
                )
        return out

    def copy(self, rel: str, storage_name: str, where: str) -> None:
        known = self.written.get(rel)
        if known is not None:
            if known != storage_name:
                raise ExportError(f"{where}: {known} and {storage_name} share the file name {rel}")
            return
        try:
            src = Path(self.image_file(storage_name))
        except Exception as exc:
            raise ExportError(f"{where}: image {storage_name} cannot be found: {exc}") from exc
        if not src.is_file():
            raise ExportError(f"{where}: image {storage_name} is missing (no file at {src})")
        dst = self.out_dir / rel
        self.created.append(dst)
        try:
            os.link(src, dst)
        except OSError:  # another file system, or links not allowed: copy instead
            shutil.copyfile(src, dst)
        self.written[rel] = storage_name


def _check(kind: str, fmt: str, options: ExportOptions, out_dir: Path) -> None:
    if kind not in KINDS:
        raise ExportError(f"unknown kind {kind!r}; valid: {', '.join(KINDS)}")
    if fmt not in FORMATS:
        raise ExportError(f"unknown format {fmt!r}; valid: {', '.join(FORMATS)}")
    options.check()
    if kind != "sft" and options.layout != "chat":
        raise ExportError(f"layout {options.layout!r} is for sft exports; {kind} records have one (chat)")
    if (out_dir / MANIFEST).exists() or (out_dir / DATA_DIR).exists():
        raise ExportError(f"{out_dir} already holds an export; export into a fresh folder")


def _write_layout_files(out_dir: Path, kind: str, options: ExportOptions, created: list[Path]) -> None:
    for name, text in (layout_files(options.layout) if kind == "sft" else {}).items():
        created.append(out_dir / name)
        (out_dir / name).write_text(text)


def export_trajectories(
    trajs: Iterable[TrajectoryView],
    *,
    out_dir: Path,
    kind: str,
    fmt: str,
    image_file: Callable[[str], Path],
    options: ExportOptions = ExportOptions(),  # noqa: B008 - frozen, so one shared default is safe
    progress: Callable[[int, int], None] | None = None,
    meta: Mapping[str, Any] | None = None,
) -> ExportManifest:
    """Write the records of `kind` for `trajs` into `out_dir` as `fmt` shards, images and a manifest.

    `image_file` maps a screenshot's storage name to a readable local file; `progress` is called with
    (steps done, episodes done) after each trajectory; `meta` is copied into the manifest. On any error
    the files written so far are removed and the error propagates (ExportError for bad input).
    """
    out_dir = Path(out_dir)
    _check(kind, fmt, options, out_dir)
    started = time.monotonic()
    created: list[Path] = []
    made_dirs: list[Path] = []
    for d in (out_dir, out_dir / DATA_DIR, out_dir / "images"):
        if not d.exists():
            d.mkdir(parents=True)
            made_dirs.append(d)
    shards = _Shards(out_dir, kind, fmt, options, created)
    images = _Images(out_dir, image_file, created)
    build = _BUILDERS[kind]
    records = episodes = steps = dropped = 0
    try:
        for traj in trajs:
            dropped += placeholder_thoughts(traj)
            names = images.names(traj)
            for record in build(traj, options=options):
                for rel in record_images(kind, record):
                    storage_name, index = names[rel]
                    images.copy(rel, storage_name, f"episode {traj.episode_id} step {index}")
                shards.write(record)
                records += 1
            episodes += 1
            steps += len(traj.steps)
            if progress is not None:
                progress(steps, episodes)
        _write_layout_files(out_dir, kind, options, created)
        manifest = ExportManifest(
            kind=kind,
            fmt=fmt,
            records=records,
            episodes=episodes,
            steps=steps,
            images=len(images.written),
            shards=shards.close(),
            options=options.to_json(),
            meta=dict(meta or {}),
            placeholder_thoughts=dropped,
        )
        tmp = out_dir / (MANIFEST + ".tmp")
        created.append(tmp)
        tmp.write_text(json.dumps(manifest.to_json(), indent=2, ensure_ascii=False, allow_nan=False))
        created.append(out_dir / MANIFEST)
        os.replace(tmp, out_dir / MANIFEST)
    except BaseException:
        shards.abort()
        for path in reversed(created):
            path.unlink(missing_ok=True)
        for d in reversed(made_dirs):
            with contextlib.suppress(OSError):  # not empty: something not ours lives there
                d.rmdir()
        raise
    log.info(
        "export %s/%s: %d records from %d episodes (%d steps, %d placeholder thoughts left out), "
        "%d images, %d shards in %.2fs",
        kind, fmt, records, episodes, steps, dropped, manifest.images, len(manifest.shards),
        time.monotonic() - started,
    )  # fmt: skip
    return manifest


__all__ = [
    "FORMATS",
    "KINDS",
    "MANIFEST",
    "ExportError",
    "ExportManifest",
    "ExportOptions",
    "ShardInfo",
    "agentnet_records",
    "ct_records",
    "export_trajectories",
    "sft_records",
]
