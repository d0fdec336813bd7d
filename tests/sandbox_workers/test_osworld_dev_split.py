"""Every task of OSWorld's development split that imports and needs no download, run on a real office
desktop: it sets up, its untouched state scores 0 by OSWorld's own getters and metrics, and scoring ends
without an environment error (bench/osworld_run_table.py prints the same as a table).

`make verify-suites` only; `make test` has one real task of each getter class in
test_osworld_import_real.py. The split lives beside the project (OSWORLD_TASKS names another folder)."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import pytest

from agent_core.suites import osworld_samples
from agent_core.tasks.osworld_files import import_osworld_files
from tests import sweeps

ROOT = Path(__file__).resolve().parent.parent.parent
SPLIT = Path(os.environ.get("OSWORLD_TASKS") or ROOT.parent / "shared/benchmarks/osworld/examples")

pytestmark = [
    pytest.mark.slow,
    pytest.mark.osworld,
    pytest.mark.sweep,
    sweeps.full_only("test_osworld_import_real.py runs a task of each getter class"),
]


def test_every_task_of_the_split_needing_no_download_sets_up_and_scores_0_untouched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not SPLIT.is_dir():
        pytest.skip(f"no OSWorld task folder at {SPLIT} (set OSWORLD_TASKS)")
    spec = importlib.util.spec_from_file_location(
        "osworld_run_table", ROOT / "bench" / "osworld_run_table.py"
    )
    assert spec is not None and spec.loader is not None
    table = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(table)
    paths = sorted(p for p in SPLIT.rglob("*.json") if "Windows" not in p.parts)
    imported, _ = import_osworld_files(paths)
    runnable = [s for s in imported if not table.needs_download(s)]
    assert runnable, f"no task of {SPLIT} needs no download"
    osworld_samples.write_mirror(tmp_path / "mirror")
    monkeypatch.setenv("SANDBOX_FETCH_MIRROR", str(tmp_path / "mirror"))
    monkeypatch.setenv("SANDBOX_FETCH_OFFLINE", "1")
    monkeypatch.setenv("FLYWHEEL_VAR_DIR", str(tmp_path / "var"))
    tmp_path.chmod(0o755)
    desktop = table.office_desktop(tmp_path)
    try:
        outcomes = {s.id: table.run_one(s, desktop)[:2] for s in runnable}
    finally:
        desktop.stop()
    bad = {task: outcome for task, outcome in outcomes.items() if outcome[0] != "ok"}
    assert not bad, f"{len(bad)} of {len(runnable)} tasks: {bad}"
