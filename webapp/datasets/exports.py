"""Exports of dataset versions: background jobs that stream a version to files, then serve them.

An export is written into `EXPORTS_DIR/.tmp-<id>/` and renamed to `EXPORTS_DIR/<id>/` only once
every shard, image and the manifest are on disk, so a reader never sees a half-written export and
a failed or killed job leaves nothing under a final name (the reaper removes its temporary folder).
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
import tarfile
import time
from collections.abc import Iterator
from dataclasses import asdict, replace
from datetime import timedelta
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.core.files.storage import default_storage
from django.db import IntegrityError, transaction
from django.utils import timezone

from agent_core.actions.coords import COORD_SPACES, is_space
from agent_core.data.export import ExportOptions, export_trajectories
from agent_core.data.export_formats import SFT_LAYOUTS
from agent_core.flywheel import TrajectoryView, Verdict
from webapp.common.params import parse_whole
from webapp.common.queue import DATASET_EXPORT, enqueue_or_note
from webapp.datasets.models import DatasetExport, DatasetVersion
from webapp.datasets.services import DatasetError, version_usable
from webapp.env import private_dir
from webapp.episodes.models import Episode
from webapp.reviews.trajectories import trajectories

log = logging.getLogger(__name__)

EXPORT_STALE_SECONDS = 120
# What the export form offers for option `layout` (agent_core.data.sft_layouts), in SFT_LAYOUTS' order.
EXPORT_LAYOUTS = (
    ("chat", "Platform chat"),
    ("trl", "TRL (prompt / completion)"),
    ("llamafactory", "LLaMA-Factory (sharegpt + dataset_info.json)"),
    ("swift", "ms-swift (messages + images)"),
)
_PROGRESS_EVERY_S = 0.5
_CHUNK = 1 << 20


class ExportBusy(DatasetError):
    """The same export of the same version is already pending or running."""

    def __init__(self, message: str, existing: DatasetExport) -> None:
        super().__init__(message)
        self.existing = existing


class ExportCancelled(Exception):
    """The export's row left `running` while it was being written (cancelled or reaped)."""


def exports_dir() -> Path:
    """Where finished exports live (settings.EXPORTS_DIR)."""
    return Path(settings.EXPORTS_DIR)


def _tmp_dir(export_id: int) -> Path:
    return exports_dir() / f".tmp-{export_id}"


def export_options_clean(raw: dict[str, Any] | None) -> dict[str, Any]:
    """Validated export options with defaults filled in; DatasetError names the bad field."""
    raw = dict(raw or {})
    defaults = asdict(ExportOptions())
    unknown = sorted(set(raw) - set(defaults))
    if unknown:
        raise DatasetError(f"unknown export option(s) {', '.join(unknown)}; valid: {', '.join(defaults)}")
    out = dict(defaults)
    limits = {"last_n": (1, 50), "shard_records": (1, 1_000_000), "row_group_records": (1, 100_000)}
    for name, (low, high) in limits.items():
        if name in raw:
            value = raw[name]
            # A form sends text: "²" passes str.isdigit() and then fails int(); 5,000 digits too.
            number = parse_whole(value) if isinstance(value, str) else value
            if isinstance(number, bool) or not isinstance(number, int) or not low <= number <= high:
                if isinstance(value, str):
                    shown = repr(value[:40])
                elif isinstance(value, int | float):
                    shown = repr(value) if abs(value) < 1e40 else "a number that large"
                else:
                    shown = f"a {type(value).__name__}"
                raise DatasetError(f"option {name} must be a whole number from {low} to {high}, not {shown}")
            out[name] = number
    if "coords" in raw:
        if not isinstance(raw["coords"], str) or not is_space(raw["coords"]):
            raise DatasetError(
                f"option coords must be one of {', '.join(COORD_SPACES)} or smart_resize:<min_pixels>:"
                f"<max_pixels>, not {raw['coords']!r}"
            )
        out["coords"] = raw["coords"]
    if "layout" in raw:
        layout = raw["layout"]
        if not isinstance(layout, str) or layout not in SFT_LAYOUTS:
            shown = repr(layout[:40]) if isinstance(layout, str) else f"a {type(layout).__name__}"
            raise DatasetError(f"option layout must be one of {', '.join(SFT_LAYOUTS)}, not {shown}")
        out["layout"] = layout
    return out


def export_create(
    *,
    version: DatasetVersion,
    kind: str,
    fmt: str,
    options: dict[str, Any] | None = None,
    created_by: AbstractBaseUser | None = None,
    enqueue: bool = True,
) -> DatasetExport:
    """Queue an export of `version`; refused for a withdrawn or empty version or a duplicate in flight.

    With enqueue=False the caller runs it (export_run) itself, as the command line does.
    """
    if kind not in DatasetExport.Kind.values:
        raise DatasetError(f"unknown export kind {kind!r}; valid: {', '.join(DatasetExport.Kind.values)}")
    if fmt not in DatasetExport.Format.values:
        raise DatasetError(f"unknown export format {fmt!r}; valid: {', '.join(DatasetExport.Format.values)}")
    clean = export_options_clean(options)
    if clean["layout"] != "chat" and kind != "sft":
        raise DatasetError(f"option layout {clean['layout']} is for sft exports; {kind} has one (chat)")
    version_usable(version=version)
    if version.num_episodes == 0:
        raise DatasetError(f"{version} has no episodes: there is nothing to export")
    try:
        with transaction.atomic():
            export = DatasetExport.objects.create(
                version=version,
                kind=kind,
                fmt=fmt,
                options=clean,
                created_by=created_by,
                total_steps=version.num_steps,
                total_episodes=version.num_episodes,
            )
    except IntegrityError:
        existing = DatasetExport.objects.filter(
            version=version, kind=kind, fmt=fmt, status__in=DatasetExport.ACTIVE
        ).first()
        if existing is None:  # it finished between the insert and this read: simply try again
            raise DatasetError("an export of this version just finished; ask again") from None
        raise ExportBusy(
            f"export #{existing.pk} of {version} ({kind}, {fmt}) is already {existing.status} "
            f"({existing.percent}%); wait for it or cancel it",
            existing,
        ) from None
    if enqueue:
        transaction.on_commit(lambda: _enqueue(export.pk))
    return export


def _enqueue(export_id: int) -> None:
    def fail(why: str) -> None:  # the broker is down: say so on the export rather than leave it pending
        DatasetExport.end(
            export_id,
            DatasetExport.Status.FAILED,
            error=f"{why}; try again later",
            whence=[DatasetExport.Status.PENDING],
        )

    enqueue_or_note(DATASET_EXPORT, export_id, note=fail)


def export_run(*, export_id: int) -> DatasetExport | None:
    """Write one pending export to disk; a second delivery (or a cancelled export) does nothing."""
    started = time.perf_counter()
    if DatasetExport.claim(export_id, worker=f"{socket.gethostname()}:{os.getpid()}") is None:
        return None
    export = DatasetExport.objects.select_related("version__dataset").get(pk=export_id)
    tmp = _tmp_dir(export.pk)
    shutil.rmtree(tmp, ignore_errors=True)
    private_dir(tmp.parent)  # an export is training data: the platform user's alone
    tmp.mkdir(mode=0o700)
    try:
        manifest = _write(export, tmp)
        final = exports_dir() / str(export.pk)
        shutil.rmtree(final, ignore_errors=True)
        os.replace(tmp, final)
        size = sum(p.stat().st_size for p in final.rglob("*") if p.is_file())
        done = DatasetExport.end(
            export.pk,
            DatasetExport.Status.FINISHED,
            path=str(export.pk),
            bytes=size,
            manifest=manifest,
            done_steps=manifest.get("steps", export.total_steps),
            done_episodes=manifest.get("episodes", export.total_episodes),
            heartbeat_at=timezone.now(),
        )
        if not done:  # cancelled at the last moment: the files go too
            shutil.rmtree(final, ignore_errors=True)
            raise ExportCancelled()
    except ExportCancelled:
        shutil.rmtree(tmp, ignore_errors=True)
        log.info("export %d stopped: it was cancelled or given up", export.pk)
        return DatasetExport.objects.get(pk=export.pk)
    except Exception as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        log.exception("export %d failed", export.pk)
        DatasetExport.end(export.pk, DatasetExport.Status.FAILED, error=f"{type(exc).__name__}: {exc}"[:2000])
        return DatasetExport.objects.get(pk=export.pk)
    export.refresh_from_db()
    log.info(
        "export %d of %s (%s, %s): %d records, %d steps, %d images, %.1f MB in %.2fs",
        export.pk,
        export.version,
        export.kind,
        export.fmt,
        manifest.get("records", 0),
        manifest.get("steps", 0),
        manifest.get("images", 0),
        export.bytes / 1e6,
        time.perf_counter() - started,
    )
    return export


def _write(export: DatasetExport, out_dir: Path) -> dict[str, Any]:
    version = export.version
    last = [time.monotonic()]

    def progress(steps_done: int, episodes_done: int) -> None:
        if time.monotonic() - last[0] < _PROGRESS_EVERY_S:
            return
        last[0] = time.monotonic()
        if not DatasetExport.beat(export.pk, done_steps=steps_done, done_episodes=episodes_done):
            raise ExportCancelled()

    membership = dict(version.memberships.values_list("episode_id", "validator"))

    def views() -> Iterator[TrajectoryView]:
        episodes = Episode.objects.filter(memberships__version=version).order_by("pk")
        for episode, traj in trajectories(episodes, chunk=50):
            stored = membership.get(episode.pk)
            # The verdict the version was written with (not today's): the export matches the version.
            yield replace(traj, verdict=Verdict.from_json(stored)) if stored else traj

    meta = {
        "dataset": version.dataset.name,
        "dataset_kind": version.dataset.kind,
        "version": version.number,
        "version_id": version.pk,
        "round": version.iteration.number if version.iteration_id else None,
        "lineage": version.lineage,
        "export_id": export.pk,
        "verdicts": {str(k): v for k, v in membership.items()},
    }
    manifest = export_trajectories(
        views(),
        out_dir=out_dir,
        kind=export.kind,
        fmt=export.fmt,
        image_file=lambda name: Path(default_storage.path(name)),
        options=ExportOptions(**export.options),
        progress=progress,
        meta=meta,
    )
    return manifest.to_json()


def export_cancel(*, export: DatasetExport) -> DatasetExport:
    """Stop a pending or running export; its job notices within a second and removes its files."""
    DatasetExport.end(
        export.pk, DatasetExport.Status.CANCELLED, error="cancelled", whence=DatasetExport.ACTIVE
    )
    export.refresh_from_db()
    if export.status != DatasetExport.Status.CANCELLED:
        raise DatasetError(f"export #{export.pk} has already {export.status}")
    return export


def exports_reap(*, stale_seconds: int = EXPORT_STALE_SECONDS) -> int:
    """Fail exports whose job stopped answering (a killed worker) and remove left-over temporary folders."""
    stale = list(
        DatasetExport.stale(silent_for=timedelta(seconds=stale_seconds)).values_list("pk", flat=True)
    )
    failed = DatasetExport.objects.filter(pk__in=stale, status=DatasetExport.Status.RUNNING).update(
        status=DatasetExport.Status.FAILED,
        error=f"the export job stopped answering for {stale_seconds} s (its worker was lost); export again",
        finished_at=timezone.now(),
    )
    root = exports_dir()
    running = set(
        DatasetExport.objects.filter(status=DatasetExport.Status.RUNNING).values_list("pk", flat=True)
    )
    if root.is_dir():
        for tmp in root.glob(".tmp-*"):
            suffix = tmp.name.removeprefix(".tmp-")
            if not suffix.isdigit() or int(suffix) not in running:
                shutil.rmtree(tmp, ignore_errors=True)
    if failed:
        log.warning("failed %d export(s) whose job stopped answering", failed)
    return failed


# --- serving the files -----------------------------------------------------------------------------


def export_root(*, export: DatasetExport) -> Path:
    """The finished export's folder; DatasetError when it is not (or no longer) there."""
    if export.status != DatasetExport.Status.FINISHED or not export.path:
        raise DatasetError(f"export #{export.pk} is {export.status}, not finished: nothing to download yet")
    root = exports_dir() / export.path
    if not (root / "manifest.json").is_file():
        raise DatasetError(f"export #{export.pk}'s files are gone from the server; export again")
    return root


def export_files(*, export: DatasetExport) -> list[tuple[str, int]]:
    """(relative path, bytes) of every file of a finished export, manifest first."""
    root = export_root(export=export)
    files = sorted((str(p.relative_to(root)), p.stat().st_size) for p in root.rglob("*") if p.is_file())
    return sorted(files, key=lambda f: (f[0] != "manifest.json", f[0]))


# Longer than any path an export writes, shorter than what the file system refuses (ENAMETOOLONG).
MAX_RELPATH = 1024
MAX_NAME = 255


def export_file(*, export: DatasetExport, relpath: str) -> Path:
    """One file of a finished export, refusing any path that leaves its folder.

    A path the file system cannot even look up (a NUL, a name over 255 bytes) is a file the export
    does not have, not an OSError.
    """
    root = export_root(export=export).resolve()
    missing = DatasetError(f"export #{export.pk} has no file {relpath[:200]!r}")
    names = relpath.split("/")
    if "\x00" in relpath or len(relpath) > MAX_RELPATH or any(len(n.encode()) > MAX_NAME for n in names):
        raise missing
    try:
        target = (root / relpath).resolve()
        if root not in target.parents or not target.is_file():
            raise missing
    except (OSError, ValueError):
        raise missing from None
    return target


def export_archive_name(*, export: DatasetExport) -> str:
    """The archive's file name (and its top folder): <dataset>-v<n>-<kind>[-<layout>]-<fmt>-<id>."""
    v = export.version
    layout = (export.options or {}).get("layout", "chat")
    kind = export.kind if layout == "chat" else f"{export.kind}-{layout}"
    return f"{v.dataset.name}-v{v.number}-{kind}-{export.fmt}-{export.pk}"


def export_archive(*, export: DatasetExport) -> tuple[Iterator[bytes], int, str]:
    """A tar of the export streamed file by file (bounded memory), its exact size, and its file name."""
    root = export_root(export=export)
    top = export_archive_name(export=export)
    entries = []
    size = 0
    for rel, nbytes in export_files(export=export):
        info = tarfile.TarInfo(f"{top}/{rel}")
        info.size = nbytes
        info.mode = 0o644
        info.mtime = int(export.finished_at.timestamp()) if export.finished_at else 0
        header = info.tobuf(format=tarfile.GNU_FORMAT)
        entries.append((root / rel, header, nbytes))
        size += len(header) + nbytes + (-nbytes % tarfile.BLOCKSIZE)
    size += 2 * tarfile.BLOCKSIZE
    tail = -size % tarfile.RECORDSIZE
    size += tail

    def chunks() -> Iterator[bytes]:
        for path, header, nbytes in entries:
            yield header
            with path.open("rb") as src:
                sent = 0
                while sent < nbytes:
                    block = src.read(min(_CHUNK, nbytes - sent))
                    if not block:
                        raise OSError(f"{path} shrank while it was being sent")
                    sent += len(block)
                    yield block
            if nbytes % tarfile.BLOCKSIZE:
                yield b"\0" * (tarfile.BLOCKSIZE - nbytes % tarfile.BLOCKSIZE)
        yield b"\0" * (2 * tarfile.BLOCKSIZE + tail)

    return chunks(), size, f"{top}.tar"
