"""The end of `make test`: each phase against its budget, scaled by how fast the machine is."""

from __future__ import annotations

import importlib.util
import io
import json
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]


def script(name: str) -> ModuleType:
    """scripts/<name>.py as a module (the scripts are not a package; sys.path is left alone)."""
    spec = importlib.util.spec_from_file_location(f"scripts_{name}", ROOT / "scripts" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


budget, speed = script("budget"), script("speed")

PHASES = "setup 60\npostgres 1400\nserving 300\n"


def run(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], *speeds: str) -> tuple[int, str]:
    monkeypatch.setattr(sys, "stdin", io.StringIO(PHASES))
    argv = ["--tier", "test"] + [x for s in speeds for x in ("--speed", s)]
    code = budget.main(argv)
    return code, capsys.readouterr().out


def test_a_phase_over_its_budget_fails_the_run_and_is_named(monkeypatch, capsys) -> None:
    code, out = run(monkeypatch, capsys, json.dumps({"factor": 1.0}), json.dumps({"factor": 1.0}))
    assert code == 1
    assert "postgres took 1400 s, over its budget of 1320 s" in out
    assert "total without set-up" in out and "budgets × 1.00" in out


def test_a_slower_machine_gets_budgets_scaled_by_the_mean_factor(monkeypatch, capsys) -> None:
    code, out = run(monkeypatch, capsys, json.dumps({"factor": 1.3}), json.dumps({"factor": 1.1}))
    assert code == 0, out
    assert "1.30, 1.10" in out and "× 1.20" in out
    assert "postgres                 1400 s   budget   1584 s" in out  # 1320 × 1.2
    assert "about 1467 s of the reference machine's time" in out  # 1760 / 1.2


def test_a_faster_machine_is_held_to_fewer_seconds_and_the_scale_is_clamped(monkeypatch, capsys) -> None:
    code, out = run(monkeypatch, capsys, json.dumps({"factor": 0.9}))
    assert code == 1 and "over its budget of 1188 s" in out  # 1320 × 0.9
    assert budget.speed_factor(['{"factor": 5}']) == (2.0, [5.0])
    assert budget.speed_factor(['{"factor": 0.1}']) == (0.5, [0.1])
    # An unreadable measurement counts as the reference machine, never as a free pass.
    assert budget.speed_factor(["Traceback", "{}"]) == (1.0, [1.0, 1.0])
    assert budget.speed_factor([]) == (1.0, [])


def test_the_speed_factor_is_the_geometric_mean_against_the_reference() -> None:
    reference = {"python": 0.3, "compress": 0.2, "spawn": 0.2}
    assert speed.factor(reference, reference) == pytest.approx(1.0)
    twice = {k: 2 * v for k, v in reference.items()}
    assert speed.factor(twice, reference) == pytest.approx(2.0)
    assert speed.factor({"python": 0.6, "compress": 0.1, "spawn": 0.2}, reference) == pytest.approx(1.0)


def test_speed_measures_this_machine_against_the_budget_files_reference() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "speed.py")], capture_output=True, text=True, check=True
    )
    figures = json.loads(out.stdout)
    assert set(figures) == {"python", "compress", "spawn", "factor", "cpus"}
    assert all(figures[k] > 0 for k in ("python", "compress", "spawn"))
    assert 0.05 < figures["factor"] < 20  # whatever the machine, a ratio, not seconds
