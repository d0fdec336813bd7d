"""OSWorld's own metric functions, run by the worker in OSWorld's environment (scripts/osworld-env.sh).

The tests marked osworld skip when that environment is not installed, and fail instead when
OSWORLD_REQUIRED=1. Office files are made by that environment's openpyxl and python-pptx (the
project's own environment has neither)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from agent_core.tasks import osworld_metrics
from agent_core.tasks.osworld_metrics import (
    NO_EXPECTED,
    OSWorldEnvError,
    OSWorldMetricError,
    OSWorldMetrics,
    available,
    file_value,
)


def needs_osworld(test: Callable[..., Any]) -> Callable[..., Any]:
    """Mark a test that runs OSWorld's metrics in their environment (a process of its own)."""
    return pytest.mark.slow(pytest.mark.osworld(test))


@pytest.fixture(scope="module")
def metrics() -> Iterator[OSWorldMetrics]:
    reason = available()
    if reason:
        if os.environ.get("OSWORLD_REQUIRED") == "1":
            pytest.fail(f"OSWORLD_REQUIRED=1 but {reason}")
        pytest.skip(reason)
    with OSWorldMetrics() as m:
        yield m


def made_in_osworld_env(tmp_path: Path, name: str, code: str) -> dict[str, str]:
    """A file argument written by `code`, run in OSWorld's environment with `path` bound."""
    path = tmp_path / name
    python = str(osworld_metrics.osworld_python())
    subprocess.run([python, "-I", "-c", f"path = {str(path)!r}\n{code}"], check=True, timeout=120)
    return file_value(path.read_bytes(), name)


def xlsx(tmp_path: Path, name: str, pears: int) -> dict[str, str]:
    code = f"""
import openpyxl
wb = openpyxl.Workbook()
wb.active.title = "Sheet1"
for row in [["fruit", "qty"], ["apple", 3], ["pear", {pears}]]:
    wb.active.append(row)
wb.save(path)
"""
    return made_in_osworld_env(tmp_path, name, code)


def pptx(tmp_path: Path, name: str, title: str) -> dict[str, str]:
    code = f"""
from pptx import Presentation
prs = Presentation()
prs.slides.add_slide(prs.slide_layouts[5]).shapes.title.text = {title!r}
prs.save(path)
"""
    return made_in_osworld_env(tmp_path, name, code)


def python_test_file(body: str) -> dict[str, str]:
    """A test file for OSWorld's check_python_file_by_test_suite whose `test()` runs `body`."""
    lines = "".join(f"    {line}\n" for line in body.splitlines())
    return file_value(f"import os, signal, time\n\ndef test():\n{lines}".encode(), "suite.py")


# --- no environment needed ---


def test_missing_environment_is_named_and_raises_env_error(tmp_path, monkeypatch):
    monkeypatch.setenv("OSWORLD_PYTHON", str(tmp_path / "nope/python"))
    assert "does not exist" in (available() or "")
    monkeypatch.delenv("OSWORLD_PYTHON")
    monkeypatch.setattr(osworld_metrics, "REPO", tmp_path)
    assert available() == "the OSWorld metrics environment is not installed: run scripts/osworld-env.sh"
    with OSWorldMetrics(tmp_path / "nope/python") as m, pytest.raises(OSWorldEnvError):
        m.score("exact_match", "a", {"expected": "a"})


def test_file_value_carries_bytes_and_name():
    assert file_value(b"hi", "a.txt") == {"__file__": "aGk=", "name": "a.txt"}


# --- OSWorld's metrics in their environment ---


@needs_osworld
def test_rule_metrics_score_like_osworld(metrics):
    assert metrics.score("exact_match", "gnome", {"expected": "gnome"}) == 1.0
    assert metrics.score("exact_match", "kde", {"expected": "gnome"}) == 0.0
    rules = {"include": ["Hello"], "exclude": ["error"]}
    assert metrics.score("check_include_exclude", "Hello, world", rules) == 1.0
    assert metrics.score("check_include_exclude", "Hello, error", rules) == 0.0
    want = {"expected": {"theme": "dark", "size": 12}}
    assert metrics.score("check_direct_json_object", {"theme": "dark", "size": 12}, want) == 1.0
    assert metrics.score("check_direct_json_object", "{'theme': 'dark', 'size': 12}", want) == 1.0
    assert metrics.score("check_direct_json_object", {"theme": "light", "size": 12}, want) == 0.0
    # A folder tree as the list_directory probe reads it (test_osworld_import.py) and OSWorld's server
    # gives it.
    moved = {"type": "directory", "name": "cpjpg", "children": [{"type": "file", "name": "a.jpg"}]}
    assert metrics.score("check_moved_jpgs", moved, {"expected": ["a.jpg"]}) == 1.0
    assert metrics.score("check_moved_jpgs", moved, {"expected": ["a.jpg", "b.jpg"]}) == 0.0


@needs_osworld
def test_a_relative_time_rule_is_made_dates_by_osworlds_own_getter_in_the_desktops_zone(metrics):
    # OSWorld's rule_relativeTime getter at scoring time: "next Monday" in the zone the probe read on the
    # desktop (this test's clock stands in for the desktop's; the dates are computed here independently).
    import datetime
    import zoneinfo

    zone = "Pacific/Kiritimati"  # far from UTC: the day differs from the host's for half of each day
    today = datetime.datetime.now(zoneinfo.ZoneInfo(zone)).date()
    monday = today + datetime.timedelta(days=7 - today.weekday())
    rules = {"relativeTime": {"from": "next Monday"}, "expected": {"time": "{Year}-{Month0D}-{Day0D}"}}
    config = {"type": "rule_relativeTime", "rules": rules}
    spec = {"name": "rule_relativeTime", "config": config}

    def scored(day: datetime.date) -> float:
        return metrics.score(
            "check_direct_json_object", {"time": day.isoformat()}, zone, expected_getter=spec
        )

    assert scored(monday) == 1.0
    assert scored(monday + datetime.timedelta(days=7)) == 0.0


@needs_osworld
def test_compare_table_on_xlsx_files(metrics, tmp_path):
    gold = xlsx(tmp_path, "gold.xlsx", pears=5)
    same = xlsx(tmp_path, "same.xlsx", pears=5)
    changed = xlsx(tmp_path, "changed.xlsx", pears=6)
    rules = {"rules": [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]}
    assert metrics.score("compare_table", same, gold, rules) == 1.0
    assert metrics.score("compare_table", changed, gold, rules) == 0.0
    # The same name for the result and the expected file (each gets a folder of its own).
    assert metrics.score("compare_table", changed, dict(gold, name="changed.xlsx"), rules) == 0.0


@needs_osworld
def test_osworlds_own_vm_file_getter_reads_the_file_the_probe_gives(metrics, tmp_path):
    # content_from_vm_file: OSWorld's getter reads the table's last row through its get_vm_file (the
    # controller hands it the file the probe read from the desktop, by its place under the home).
    table = xlsx(tmp_path, "researchers.xlsx", pears=5)
    config = {"type": "content_from_vm_file", "path": "/home/user/Desktop/researchers.xlsx",
              "file_type": "xlsx", "file_content": "last_row"}  # fmt: skip
    getter = {"name": "content_from_vm_file", "config": config, "files": ["Desktop/researchers.xlsx"]}
    as_list = {"type": "list"}
    assert metrics.score("literal_match", table, ["pear", "5"], as_list, getter=getter) == 1.0
    assert metrics.score("literal_match", table, ["pear", "6"], as_list, getter=getter) == 0.0


@needs_osworld
def test_compare_pptx_files(metrics, tmp_path):
    gold = pptx(tmp_path, "gold.pptx", "Quarterly results")
    same = pptx(tmp_path, "same.pptx", "Quarterly results")
    changed = pptx(tmp_path, "changed.pptx", "Quarterly result")
    assert metrics.score("compare_pptx_files", same, gold) == 1.0
    assert metrics.score("compare_pptx_files", changed, gold) == 0.0


@needs_osworld
def test_compare_text_file_with_options(metrics):
    gold = file_value(b"Hello World\n", "gold.txt")
    assert metrics.score("compare_text_file", file_value(b"Hello World\n", "a.txt"), gold) == 1.0
    assert metrics.score("compare_text_file", file_value(b"hello world\n", "a.txt"), gold) == 0.0
    lower = file_value(b"hello world\n", "a.txt")
    assert metrics.score("compare_text_file", lower, gold, {"ignore_case": True}) == 1.0


@needs_osworld
def test_missing_file_scores_zero_as_in_osworld(metrics, tmp_path):
    assert metrics.score("compare_text_file", None, file_value(b"x", "gold.txt")) == 0.0
    assert metrics.score("compare_table", None, xlsx(tmp_path, "gold.xlsx", pears=5), {"rules": []}) == 0.0


@needs_osworld
def test_metric_without_expected_gets_result_and_options_only(metrics):
    # An evaluator with no `expected`: DesktopEnv.evaluate() calls metric(result, **options).
    assert metrics.score("check_text_enlarged", "1.25", NO_EXPECTED) == 1.0
    assert metrics.score("check_text_enlarged", "1.0", NO_EXPECTED) == 0.0
    with pytest.raises(OSWorldMetricError, match="positional argument"):
        metrics.score("check_text_enlarged", "1.25", None)


@needs_osworld
def test_a_metric_that_raises_gives_metric_error(metrics):
    with pytest.raises(OSWorldMetricError, match=r"exact_match: KeyError: 'expected'") as caught:
        metrics.score("exact_match", "gnome", {})
    assert "general.py" in caught.value.traceback
    with pytest.raises(OSWorldMetricError, match="not a metric"):
        metrics.probe("no_such_metric")


@needs_osworld
def test_left_out_library_fails_clearly_even_where_osworld_catches_it(metrics):
    # compare_audios catches librosa's errors and scores two unreadable files 1.0: not here.
    assert metrics.probe("compare_audios").missing == ("librosa",)
    assert metrics.probe("compare_image_text").missing == ("easyocr",)
    assert metrics.probe("compare_table").missing == ()
    wav = file_value(b"RIFF", "a.wav")
    with pytest.raises(OSWorldMetricError, match="librosa"):
        metrics.score("compare_audios", wav, wav)


@needs_osworld
def test_request_files_are_removed_afterwards(metrics, tmp_path):
    record = tmp_path / "where"
    suite = python_test_file(f"open({str(record)!r}, 'w').write(__file__)\nreturn True")
    assert metrics.score("check_python_file_by_test_suite", None, suite) == 1.0
    used = Path(record.read_text())
    assert used.name == "suite.py"
    assert not used.exists() and not used.parent.parent.exists()


@needs_osworld
def test_hung_metric_times_out_and_the_worker_goes_on(metrics):
    pid = metrics.score("exact_match", "a", {"expected": "a"}) and metrics.pid
    metrics.probe("check_python_file_by_test_suite")  # its module's imports are not to eat the second
    with pytest.raises(OSWorldEnvError, match="timeout"):
        metrics.score("check_python_file_by_test_suite", None, python_test_file("time.sleep(60)"), timeout=1)
    assert metrics.score("exact_match", "a", {"expected": "a"}) == 1.0
    assert metrics.pid == pid


@needs_osworld
def test_worker_deaf_to_its_timer_is_killed_and_replaced(metrics, monkeypatch):
    monkeypatch.setattr(osworld_metrics, "KILL_GRACE", 1.0)
    pid = metrics.score("exact_match", "a", {"expected": "a"}) and metrics.pid
    metrics.probe("check_python_file_by_test_suite")
    deaf = python_test_file("signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})\ntime.sleep(60)")
    with pytest.raises(OSWorldEnvError, match="killed"):
        metrics.score("check_python_file_by_test_suite", None, deaf, timeout=1)
    assert metrics.score("exact_match", "a", {"expected": "a"}) == 1.0
    assert metrics.pid not in (None, pid)


@needs_osworld
def test_worker_dying_mid_request_raises_env_error_then_restarts(metrics, tmp_path):
    record = tmp_path / "where"
    suite = python_test_file(f"open({str(record)!r}, 'w').write(__file__)\nos._exit(3)")
    with pytest.raises(OSWorldEnvError, match=r"exited \(3\)"):
        metrics.score("check_python_file_by_test_suite", None, suite)
    # The dead worker's files went with it.
    assert not Path(record.read_text()).parent.exists()
    assert metrics.score("exact_match", "a", {"expected": "a"}) == 1.0


@needs_osworld
def test_killed_worker_is_restarted(metrics):
    assert metrics.score("exact_match", "a", {"expected": "a"}) == 1.0
    pid = metrics.pid
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while metrics.pid is not None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert metrics.score("exact_match", "b", {"expected": "a"}) == 0.0
    assert metrics.pid not in (None, pid)


@needs_osworld
def test_module_level_score_shares_one_worker(metrics):
    assert osworld_metrics.score("exact_match", "a", {"expected": "a"}, None) == 1.0
    assert osworld_metrics.probe("compare_table").module == "desktop_env.evaluators.metrics.table"


@needs_osworld
def test_osworlds_own_chrome_getters_read_the_profile_files_a_probe_gives(metrics):
    prefs = file_value(json.dumps({"profile": {"name": "Thomas"}}).encode(), "Preferences")
    getter = {"name": "profile_name", "config": {"type": "profile_name"}, "files": ["Default/Preferences"]}
    assert metrics.score("exact_match", prefs, {"expected": "Thomas"}, getter=getter) == 1.0
    other = file_value(json.dumps({"profile": {"name": "Person 1"}}).encode(), "Preferences")
    assert metrics.score("exact_match", other, {"expected": "Thomas"}, getter=getter) == 0.0
    # No such file: the getter gives None (its controller found nothing), which matches nothing.
    assert metrics.score("exact_match", None, {"expected": "Thomas"}, getter=getter) == 0.0
    # Bookmarks: the getter hands the metric the file's roots.
    folder = {"type": "folder", "name": "Favorites", "children": []}
    bookmarks = {"roots": {"bookmark_bar": {"children": [folder]}, "other": {"children": []}}}
    marks = file_value(json.dumps(bookmarks).encode(), "Bookmarks")
    getter = {"name": "bookmarks", "config": {"type": "bookmarks"}, "files": ["Default/Bookmarks"]}
    rule = {"type": "bookmark_bar_folders_names", "names": ["Favorites"]}
    assert metrics.score("is_expected_bookmarks", marks, rule, getter=getter) == 1.0
    assert metrics.score("is_expected_bookmarks", marks, dict(rule, names=["Work"]), getter=getter) == 0.0
