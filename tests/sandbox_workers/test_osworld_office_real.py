# ruff: noqa: E501 (a task document reads best one item a line)
"""An OSWorld LibreOffice Calc task on a real desktop with the real LibreOffice: its input downloaded by
the host from an offline mirror, opened in Calc, saved with ctrl+s by its postconfig, and scored by
OSWorld's own compare_table against a reference file from the mirror: doing nothing scores 0, a
solution typed through the sandbox's input path scores 1."""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_core.actions.pyautogui_code import parse_pyautogui
from agent_core.tasks import osworld_metrics
from agent_core.tasks.osworld import import_osworld_task
from agent_core.tasks.runner import evaluate, prepare
from sandbox_workers.agent_env import SandboxEnv
from sandbox_workers.fetch import mirror_add
from sandbox_workers.profiles import OFFICE_PROFILE

pytestmark = [pytest.mark.slow, pytest.mark.osworld]

INPUT_URL = "https://huggingface.co/datasets/example/osworld/resolve/main/totals.xlsx"
GOLD_URL = "https://huggingface.co/datasets/example/osworld/resolve/main/totals_gold.xlsx"
CALC_TASK: dict[str, Any] = {
    "id": "7f3a52d1-0c55-4a86-9f0e-6a3c0b0e1a11",
    "snapshot": "libreoffice_calc",
    "instruction": "In column C of ~/totals.xlsx, put the sum of columns A and B for each row.",
    "source": "the platform's own test",
    "config": [
        {"type": "download", "parameters": {"files": [{"url": INPUT_URL, "path": "/home/user/totals.xlsx"}]}},
        {"type": "open", "parameters": {"path": "/home/user/totals.xlsx"}},
    ],
    "trajectory": "trajectories/",
    "related_apps": ["libreoffice_calc"],
    "evaluator": {
        "postconfig": [
            {"type": "activate_window", "parameters": {"window_name": "totals.xlsx - LibreOffice Calc", "strict": True}},
            {"type": "sleep", "parameters": {"seconds": 0.5}},
            {"type": "execute", "parameters": {"command": ["python", "-c", "import pyautogui; pyautogui.hotkey('ctrl', 's');"]}},
            {"type": "sleep", "parameters": {"seconds": 1.5}},
        ],
        "func": "compare_table",
        "result": {"type": "vm_file", "path": "/home/user/totals.xlsx", "dest": "totals.xlsx"},
        "expected": {"type": "cloud_file", "path": GOLD_URL, "dest": "totals_gold.xlsx"},
        "options": {"rules": [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]},
    },
}  # fmt: skip


def workbook(path: Path, rows: list[list[Any]]) -> Path:
    """An .xlsx written by openpyxl in OSWorld's metrics environment (ours has no openpyxl)."""
    code = f"import openpyxl\nwb = openpyxl.Workbook()\nwb.active.title = 'Sheet1'\nfor r in {rows!r}:\n    wb.active.append(r)\nwb.save({str(path)!r})\n"
    subprocess.run([str(osworld_metrics.osworld_python()), "-I", "-c", code], check=True, timeout=120)
    return path


@pytest.fixture
def mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    if osworld_metrics.available() is not None:
        pytest.fail(f"OSWorld's metrics environment: {osworld_metrics.available()}")
    if shutil.which("libreoffice") is None:
        pytest.fail("LibreOffice is not installed: scripts/office-apps.sh")
    rows = [["a", "b", "sum"], [1, 2, None], [30, 12, None]]
    gold = [["a", "b", "sum"], [1, 2, 3], [30, 12, 42]]
    folder = tmp_path / "mirror"
    mirror_add(folder, INPUT_URL, workbook(tmp_path / "totals.xlsx", rows))
    mirror_add(folder, GOLD_URL, workbook(tmp_path / "gold.xlsx", gold))
    monkeypatch.setenv("SANDBOX_FETCH_MIRROR", str(folder))
    monkeypatch.setenv("SANDBOX_FETCH_OFFLINE", "1")  # tests never reach OSWorld's hosts
    monkeypatch.setenv("FLYWHEEL_VAR_DIR", str(tmp_path / "var"))
    return folder


def test_a_calc_task_scores_0_untouched_and_1_solved_by_osworlds_compare_table(
    xdesktop_factory: Callable[..., Any], mirror: Path
) -> None:
    spec = import_osworld_task(CALC_TASK, id_prefix="osworld/libreoffice_calc")
    options = {k: v for k, v in OFFICE_PROFILE.items() if k in ("width", "height", "memory_mb")}
    env = SandboxEnv(
        xdesktop_factory("office", options={**OFFICE_PROFILE["options"], "start_timeout_s": 60}, **options),
        platform="desktop",
    )
    t0 = time.monotonic()
    prepared = prepare(spec, env)
    titles = [w["title"] for w in env.call("windows")["windows"]]
    assert "totals.xlsx - LibreOffice Calc" in titles, titles
    print(f"setup with LibreOffice open: {time.monotonic() - t0:.1f} s")

    untouched = evaluate(prepared, env)
    assert untouched.reward == 0.0, untouched.details

    # The solution, typed into Calc through the sandbox's own input path. Calc drops an arrow key that
    # comes within a few ms of the one before (its cursor moves after our settle window closes): the
    # pauses stand for the time an agent's steps are apart.
    code = (
        "import pyautogui, time\npyautogui.hotkey('ctrl', 'home')\n"
        + "time.sleep(0.2)\n".join(f"pyautogui.press('{k}')\n" for k in ("right", "right", "down"))
        + "time.sleep(0.2)\npyautogui.write('=A2+B2\\n=A3+B3\\n')"
    )
    for action in parse_pyautogui(code, screen=(1920, 1080)):
        env.act(action)
    solved = evaluate(prepared, env)
    assert solved.reward == 1.0, solved.details
