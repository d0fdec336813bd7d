"""bench/osworld_bench.py's import table counts each file once, by its path."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from tests.agent_core.test_osworld_import import OS_TERMINAL

ROOT = Path(__file__).resolve().parent.parent.parent


def test_a_refused_file_is_not_counted_imported_because_another_domain_reuses_its_id(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    spec = importlib.util.spec_from_file_location("osworld_bench", ROOT / "bench" / "osworld_bench.py")
    assert spec is not None and spec.loader is not None
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    # OSWorld gives one id to a task of each domain: here the os one imports, the chrome one is refused.
    for domain, doc in (
        ("os", OS_TERMINAL),
        ("chrome", {**OS_TERMINAL, "config": [{"type": "launch", "parameters": {"command": ["code"]}}]}),
    ):
        (tmp_path / domain).mkdir()
        (tmp_path / domain / f"{OS_TERMINAL['id']}.json").write_text(json.dumps(doc))
    bench.import_table(tmp_path)
    lines = [line.split() for line in capsys.readouterr().out.splitlines()]
    rows = {cells[0]: cells[1:3] for cells in lines if cells and cells[0] in ("os", "chrome")}
    assert rows == {"chrome": ["1", "0"], "os": ["1", "1"]}  # (files, imported): not 1 of 1 for chrome
