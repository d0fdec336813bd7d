"""Exports: the job writes files that load back; bad requests get clear answers and leave nothing behind."""

from __future__ import annotations

import io
import json
import os
import tarfile
from pathlib import Path

import pytest
from django.core.files.storage import default_storage
from django.test import Client, override_settings
from django.urls import reverse

from tests.conftest import Personas, Queued
from tests.webapp.datasets.conftest import GOOD, build_episode, click
from webapp.datasets import exports as ex
from webapp.datasets.models import Dataset, DatasetExport, DatasetVersion
from webapp.datasets.rounds import SFT_DATASET, flywheel_round_close
from webapp.datasets.services import (
    DatasetError,
    VersionGone,
    dataset_version_create,
    version_pin_resolve,
    version_withdraw,
)
from webapp.training.models import TrainingRun
from webapp.training.services import training_run_pin

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def exports_dir(tmp_path: Path):  # type: ignore[no-untyped-def]
    with override_settings(EXPORTS_DIR=tmp_path / "exports"):
        yield tmp_path / "exports"


@pytest.fixture
def sft_version(personas: Personas) -> DatasetVersion:
    build_episode(steps=GOOD, reward=1.0)
    build_episode(steps=[{"action": click(i)} for i in range(4)], reward=1.0, annotator=personas.annotator)
    build_episode(steps=GOOD, reward=0.0)
    flywheel_round_close()
    return DatasetVersion.objects.get(dataset__name=SFT_DATASET, number=1)


def _image_paths(value: object) -> list[str]:
    """Every "images/..." path anywhere in a loaded record."""
    if isinstance(value, str):
        return [value] if value.startswith("images/") else []
    if isinstance(value, dict):
        return [p for v in value.values() for p in _image_paths(v)]
    if isinstance(value, list):
        return [p for v in value for p in _image_paths(v)]
    return []


def _run(version: DatasetVersion, kind: str = "sft", fmt: str = "jsonl", **options: int) -> DatasetExport:
    export = ex.export_create(version=version, kind=kind, fmt=fmt, options=options)
    done = ex.export_run(export_id=export.pk)
    assert done is not None
    return done


@pytest.mark.parametrize("kind", ["sft", "ct", "agentnet"])
@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_an_export_loads_back_with_the_datasets_library(
    sft_version: DatasetVersion, exports_dir: Path, tmp_path: Path, kind: str, fmt: str
) -> None:
    import datasets
    from PIL import Image

    done = _run(sft_version, kind, fmt)
    assert done.status == "finished", done.error
    root = exports_dir / done.path
    manifest = json.loads((root / "manifest.json").read_text())
    # SFT: one sample per target step (3 + 4 steps, all parsed); CT and AgentNet: one per episode.
    expected = {"sft": 7, "ct": 2, "agentnet": 2}[kind]
    shards = [str(root / s["path"]) for s in manifest["shards"]]
    loaded = datasets.load_dataset(
        "json" if fmt == "jsonl" else "parquet",
        data_files=shards,
        split="train",
        cache_dir=str(tmp_path / "hf"),
    )
    assert len(loaded) == manifest["records"] == done.manifest["records"] == expected
    images = {p for row in loaded for p in _image_paths(row)}
    assert len(images) == manifest["images"] > 0, "records reference their screenshots"
    for rel in images:
        with Image.open(root / rel) as image:
            image.load()
            assert image.size == (64, 36)
    assert done.percent == 100 and done.bytes > 0
    assert not list(exports_dir.glob(".tmp-*"))


def test_the_archive_streams_every_file_with_the_right_size(
    sft_version: DatasetVersion, personas: Personas
) -> None:
    done = _run(sft_version, "sft", "parquet")
    client = Client()
    client.force_login(personas.researcher)
    response = client.get(reverse("datasets:export_download", args=[done.pk]))
    assert response.status_code == 200
    body = b"".join(response.streaming_content)
    assert len(body) == int(response["Content-Length"])
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        names = tar.getnames()
        top = names[0].split("/")[0]
        assert f"{top}/manifest.json" in names
        manifest = json.loads(tar.extractfile(f"{top}/manifest.json").read())  # type: ignore[union-attr]
        for shard in manifest["shards"]:
            assert tar.getmember(f"{top}/{shard['path']}").size == shard["bytes"]
        assert any("/images/" in n for n in names)


def test_an_empty_version_is_refused(personas: Personas) -> None:
    dataset = Dataset.objects.create(name="empty", kind="sft")
    version = dataset_version_create(dataset=dataset, episodes=[])
    with pytest.raises(DatasetError, match="no episodes"):
        ex.export_create(version=version, kind="sft", fmt="jsonl")
    assert not DatasetExport.objects.exists()


def test_a_withdrawn_version_is_refused_for_exports_and_pins(
    sft_version: DatasetVersion, personas: Personas
) -> None:
    version_withdraw(version=sft_version, by=personas.admin, reason="contains a password")
    with pytest.raises(VersionGone, match="withdrawn.*password"):
        ex.export_create(version=sft_version, kind="sft", fmt="jsonl")
    with pytest.raises(VersionGone, match="withdrawn"):
        version_pin_resolve(pin=f"{SFT_DATASET}@v1")
    sft_version.refresh_from_db()
    assert sft_version.num_episodes == 2  # the version itself is untouched


@pytest.mark.parametrize(
    "pin,message",
    [
        ("flywheel-sft", "not a dataset pin"),
        ("flywheel-sft@3", "not a dataset pin"),
        ("flywheel-sft@v", "not a dataset pin"),
        ("@v1", "not a dataset pin"),
        ("flywheel sft@v1", "not a dataset pin"),
        ("nosuch@v1", "no dataset called 'nosuch'"),
        ("flywheel-sft@v9", "has no version 9 \\(v1–v1\\)"),
    ],
)
def test_a_malformed_pin_is_refused_with_what_to_write(
    sft_version: DatasetVersion, pin: str, message: str
) -> None:
    with pytest.raises(DatasetError, match=message):
        version_pin_resolve(pin=pin)


def test_a_pin_resolves_and_pins_a_run_that_has_not_started(
    sft_version: DatasetVersion, personas: Personas
) -> None:
    assert version_pin_resolve(pin="flywheel-sft@latest") == sft_version
    run = TrainingRun.objects.create(name="sft-1", algorithm="sft", created_by=personas.admin)
    training_run_pin(run=run, pin="flywheel-sft@v1")
    assert run.dataset_version == sft_version
    TrainingRun.objects.filter(pk=run.pk).update(status="running")
    with pytest.raises(DatasetError, match="already started"):
        training_run_pin(run=run, pin="flywheel-sft@v1")
    with pytest.raises(DatasetError, match="pinned by training run"):
        version_withdraw(version=sft_version, by=personas.admin, reason="x")


def test_a_second_export_of_the_same_version_while_one_runs_is_refused(sft_version: DatasetVersion) -> None:
    first = ex.export_create(version=sft_version, kind="sft", fmt="jsonl")
    with pytest.raises(ex.ExportBusy, match=f"export #{first.pk} .* already pending") as info:
        ex.export_create(version=sft_version, kind="sft", fmt="jsonl")
    assert info.value.existing == first
    # Another format of the same version is a different export and may run beside it.
    other = ex.export_create(version=sft_version, kind="sft", fmt="parquet")
    assert other.pk != first.pk
    assert ex.export_run(export_id=first.pk).status == "finished"  # type: ignore[union-attr]
    assert ex.export_run(export_id=first.pk) is None  # a second delivery does nothing
    again = ex.export_create(version=sft_version, kind="sft", fmt="jsonl")  # allowed once it ended
    assert again.pk != first.pk


def test_the_api_answers_bad_exports_clearly(sft_version: DatasetVersion, personas: Personas) -> None:
    client = Client()
    client.force_login(personas.researcher)
    url = f"/api/v1/dataset-versions/{sft_version.pk}/exports"
    ok = client.post(url, {"kind": "sft", "fmt": "jsonl"}, content_type="application/json")
    assert ok.status_code == 202, ok.content
    busy = client.post(url, {"kind": "sft", "fmt": "jsonl"}, content_type="application/json")
    assert busy.status_code == 409 and "already pending" in busy.json()["detail"]
    bad_option = client.post(url, {"kind": "ct", "options": {"last_n": 0}}, content_type="application/json")
    assert bad_option.status_code == 400 and "last_n" in bad_option.json()["detail"]
    missing = client.post(
        "/api/v1/dataset-versions/99999/exports", {"kind": "sft"}, content_type="application/json"
    )
    assert missing.status_code == 404 and "99999" in missing.json()["detail"]
    pin = client.post("/api/v1/dataset-pins", {"pin": "sft v1"}, content_type="application/json")
    assert pin.status_code == 400 and "not a dataset pin" in pin.json()["detail"]
    version_withdraw(version=sft_version, by=personas.admin, reason="bad data")
    gone = client.post(url, {"kind": "ct"}, content_type="application/json")
    assert gone.status_code == 410 and "withdrawn" in gone.json()["detail"]
    annotator = Client()
    annotator.force_login(personas.annotator)
    assert annotator.post(url, {"kind": "sft"}, content_type="application/json").status_code == 403
    assert Client().get(f"/api/v1/dataset-exports/{ok.json()['id']}").status_code == 401


def test_a_failed_export_leaves_no_files_and_says_why(sft_version: DatasetVersion, exports_dir: Path) -> None:
    step = sft_version.episodes.order_by("pk").first().steps.order_by("index").last()  # type: ignore[union-attr]
    os.remove(default_storage.path(step.screenshot.name))
    export = ex.export_create(version=sft_version, kind="sft", fmt="parquet")
    done = ex.export_run(export_id=export.pk)
    assert done is not None and done.status == "failed"
    assert Path(step.screenshot.name).name in done.error
    assert not exports_dir.exists() or not any(exports_dir.iterdir())
    with pytest.raises(DatasetError, match="failed, not finished"):
        ex.export_files(export=done)


def test_cancelling_a_running_export_removes_its_files(
    sft_version: DatasetVersion, exports_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = ex.export_create(version=sft_version, kind="ct", fmt="jsonl")
    real = ex.trajectories

    def cancel_midway(queryset, *, chunk=100):  # type: ignore[no-untyped-def]
        for i, item in enumerate(real(queryset, chunk=chunk)):
            if i == 1:
                ex.export_cancel(export=export)
            yield item

    monkeypatch.setattr(ex, "trajectories", cancel_midway)
    monkeypatch.setattr(ex, "_PROGRESS_EVERY_S", 0.0)
    done = ex.export_run(export_id=export.pk)
    assert done is not None and done.status == "cancelled"
    assert not exports_dir.exists() or not any(exports_dir.iterdir())


def test_the_reaper_fails_an_export_whose_worker_died(sft_version: DatasetVersion, exports_dir: Path) -> None:
    export = ex.export_create(version=sft_version, kind="sft", fmt="jsonl")
    DatasetExport.objects.filter(pk=export.pk).update(status="running", heartbeat_at="2000-01-01T00:00:00Z")
    (exports_dir / f".tmp-{export.pk}" / "data").mkdir(parents=True)
    (exports_dir / f".tmp-{export.pk}" / "data" / "train-00000.jsonl").write_text('{"half": ')
    assert ex.exports_reap() == 1
    export.refresh_from_db()
    assert export.status == "failed" and "stopped answering" in export.error
    assert not (exports_dir / f".tmp-{export.pk}").exists()
    # A new export of the same version may start now.
    assert ex.export_create(version=sft_version, kind="sft", fmt="jsonl").pk != export.pk


def test_files_are_served_only_from_inside_the_export(
    sft_version: DatasetVersion, personas: Personas
) -> None:
    done = _run(sft_version, "sft", "jsonl")
    client = Client()
    client.force_login(personas.researcher)
    listing = client.get(f"/api/v1/dataset-exports/{done.pk}/files").json()
    assert listing[0]["path"] == "manifest.json"
    shard = next(f for f in listing if f["path"].startswith("data/"))
    got = client.get(f"/api/v1/dataset-exports/{done.pk}/files/{shard['path']}")
    assert got.status_code == 200 and len(b"".join(got.streaming_content)) == shard["bytes"]
    escape = client.get(f"/api/v1/dataset-exports/{done.pk}/files/../../secret_key")
    assert escape.status_code == 404


def test_an_export_started_while_the_broker_is_down_says_so(
    sft_version: DatasetVersion, queued: Queued, django_capture_on_commit_callbacks
) -> None:
    queued.down = ConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")
    with django_capture_on_commit_callbacks(execute=True):
        export = ex.export_create(version=sft_version, kind="sft", fmt="jsonl")
    export.refresh_from_db()
    assert export.status == "failed" and "task queue is unavailable" in export.error
    # Nothing stays pending: the next attempt may start at once.
    queued.down = None
    assert ex.export_create(version=sft_version, kind="sft", fmt="jsonl").status == "pending"


def test_a_file_name_the_file_system_cannot_look_up_is_a_404_not_a_500(
    sft_version: DatasetVersion, personas: Personas
) -> None:
    done = _run(sft_version, "sft", "jsonl")
    client = Client()
    client.force_login(personas.researcher)
    for name in ["x" * 5000, "data/" + "y" * 300]:
        response = client.get(f"/api/v1/dataset-exports/{done.pk}/files/{name}")
        assert response.status_code == 404 and "has no file" in response.json()["detail"]
    # Over HTTP a NUL is refused at the door (400); the service refuses it on its own too.
    assert client.get(f"/api/v1/dataset-exports/{done.pk}/files/data%00.jsonl").status_code == 400
    with pytest.raises(DatasetError, match="has no file"):
        ex.export_file(export=done, relpath="data/\x00.jsonl")


def test_export_options_from_a_form_refuse_what_int_cannot_read(sft_version: DatasetVersion) -> None:
    for raw in ["²", "9" * 5000, str(2**70), "-1", "seven"]:
        with pytest.raises(DatasetError, match="option last_n must be a whole number from 1 to 50"):
            ex.export_options_clean({"last_n": raw})
    with pytest.raises(DatasetError, match="not a number that large"):
        ex.export_options_clean({"last_n": 10**5000})
    assert ex.export_options_clean({"last_n": " 7 "})["last_n"] == 7


def test_an_export_is_private_to_the_platform_user(sft_version: DatasetVersion, exports_dir: Path) -> None:
    old = os.umask(0o022)  # what a worker started from a shell would have
    try:
        done = _run(sft_version, "sft", "jsonl")
    finally:
        os.umask(old)
    for folder in (exports_dir, exports_dir / done.path):
        assert folder.stat().st_mode & 0o777 == 0o700, folder


def test_an_sft_export_of_stand_in_thoughts_teaches_actions_only_and_says_how_many(
    exports_dir: Path, client_for
) -> None:  # type: ignore[no-untyped-def]
    """The first flywheel-sft export taught "Thought: oracle step N" in 103 of 105 samples."""
    stand_ins = [{**s, "thought": f"oracle step {i}"} for i, s in enumerate(GOOD)]
    build_episode(steps=stand_ins, reward=1.0)
    flywheel_round_close()
    version = DatasetVersion.objects.get(dataset__name=SFT_DATASET, number=1)
    done = _run(version)
    assert done.status == "finished", done.error
    root = exports_dir / done.path
    text = "".join(f.read_text() for f in (root / "data").glob("*.jsonl"))
    assert "oracle step" not in text and text.count('"assistant"') >= 3
    assert done.manifest["placeholder_thoughts"] == 3
    page = client_for("researcher").get(reverse("datasets:version_detail", args=[version.pk]))
    assert "3 placeholder thoughts left out" in page.content.decode()
    # The trainer reads the same version: its targets teach the actions only.
    from webapp.training.data import sft_examples_for

    examples = list(sft_examples_for(version, history_images=1))
    assert len(examples) == 3 and all(e.placeholder_thought for e in examples)
    assert all(e.response.startswith("Action: ") for e in examples)
    assert "oracle step" not in json.dumps([e.messages for e in examples])


def test_an_sft_export_for_an_outside_stack_is_asked_for_by_layout_and_a_bad_one_is_a_400(
    sft_version: DatasetVersion, personas: Personas, exports_dir: Path, client_for
) -> None:  # type: ignore[no-untyped-def]
    client = Client()
    client.force_login(personas.researcher)
    url = f"/api/v1/dataset-versions/{sft_version.pk}/exports"
    for body, says in [
        ({"kind": "sft", "options": {"layout": "sharegpt"}}, "option layout must be one of chat, trl, "),
        ({"kind": "sft", "options": {"layout": ["trl"]}}, "option layout must be one of"),
        ({"kind": "ct", "options": {"layout": "trl"}}, "option layout trl is for sft exports; ct has one"),
    ]:
        refused = client.post(url, body, content_type="application/json")
        assert refused.status_code == 400 and says in refused.json()["detail"], refused.content
    assert not DatasetExport.objects.exists()
    # The page's form sends the layout as the API does.
    client_for("researcher").post(
        reverse("datasets:export_start", args=[sft_version.pk]),
        {"kind": "sft", "fmt": "jsonl", "layout": "llamafactory"},
    )
    (export,) = DatasetExport.objects.all()
    assert export.options["layout"] == "llamafactory"
    done = ex.export_run(export_id=export.pk)
    assert done is not None and done.status == "finished", done and done.error
    files = [p for p, _ in ex.export_files(export=done)]
    assert "dataset_info.json" in files and done.manifest["options"]["layout"] == "llamafactory"
    assert ex.export_archive_name(export=done).endswith(f"-sft-llamafactory-jsonl-{done.pk}")
