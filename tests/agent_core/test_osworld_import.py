# ruff: noqa: E501 (task documents and their expected forms read best one item a line)
"""Importing OSWorld task JSON: what maps onto our desktops, and the reason for what does not."""

from __future__ import annotations

import base64
import copy
import json
import os
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from agent_core.actions import model as A
from agent_core.env import EnvError, ExecOutput
from agent_core.tasks import osworld_metrics
from agent_core.tasks.osworld import HOME_DIRS, OSWorldImportError, import_osworld_task
from agent_core.tasks.osworld_files import import_osworld_files
from agent_core.tasks.osworld_metrics import file_value
from agent_core.tasks.runner import combine, evaluate, prepare, run_probe
from agent_core.tasks.spec import TaskSpec, TaskSpecError, parse_task
from tests.agent_core.test_task_runner import FakeEnv

MKDIR_HOME = "mkdir -p " + " ".join(f"/home/user/{d}" for d in HOME_DIRS)

# An `os` task in OSWorld's format (also run on a real desktop by tests/sandbox_workers).
OS_TERMINAL: dict[str, Any] = {
    "id": "5c1075ca-bb34-46a3-a7a0-029bd7463e79",
    "snapshot": "os",
    "instruction": "Copy every .txt file of ~/Documents into a new folder ~/backup (leave the others).",
    "source": "authors",
    "config": [
        {"type": "execute", "parameters": {"command": ["mkdir", "-p", "/home/user/Documents"]}},
        {
            "type": "execute",
            "parameters": {
                "command": "cd /home/user/Documents && printf 'one\\n' > a.txt && printf 'two\\n' > b.txt"
                " && echo skip > c.md",
                "shell": True,
            },
        },
        {"type": "launch", "parameters": {"command": ["gnome-terminal"]}},
        {"type": "sleep", "parameters": {"seconds": 0.1}},
    ],
    "trajectory": "trajectories/",
    "related_apps": ["os"],
    "evaluator": {
        "func": ["check_include_exclude", "exact_match"],
        "result": [
            {"type": "vm_command_line", "command": "ls /home/user/backup", "shell": True},
            {"type": "vm_command_line", "command": ["cat", "/home/user/backup/b.txt"]},
        ],
        "expected": [
            {"type": "rule", "rules": {"include": ["a.txt", "b.txt"], "exclude": ["c.md", "No such file"]}},
            {"type": "rule", "rules": {"expected": "two\n"}},
        ],
    },
}
# A text-editor task: OSWorld's gedit becomes mousepad; the gold file is made by setup.
GEDIT_FILE: dict[str, Any] = {
    "id": "0e47de2a-32e0-456c-a366-8c607ef7a9d2",
    "snapshot": "gedit",
    "instruction": "In ~/Desktop/essay.txt, replace every 'colour' with 'color' and save the file.",
    "config": [
        {
            "type": "command",
            "parameters": {
                "command": "printf 'The colour red.\\nA colour wheel.\\n' > /home/user/Desktop/essay.txt && "
                "mkdir -p /home/user/.gold && sed s/colour/color/g /home/user/Desktop/essay.txt"
                " > /home/user/.gold/essay.txt",
                "shell": True,
            },
        },
        {"type": "open", "parameters": {"path": "/home/user/Desktop/essay.txt"}},
        {"type": "launch", "parameters": {"command": "gedit /home/user/Desktop/essay.txt", "shell": True}},
    ],
    "related_apps": ["gedit"],
    "evaluator": {
        "func": "compare_text_file",
        "result": {"type": "vm_file", "path": "/home/user/Desktop/essay.txt", "dest": "essay.txt"},
        "expected": {"type": "vm_file", "path": "~/.gold/essay.txt", "dest": "gold.txt"},
        "options": {"ignore_blanks": True},
    },
}
# A browser task on a local page, with OSWorld's DevTools plumbing (dropped) and an `or` of checks.
CHROME_LOCAL: dict[str, Any] = {
    "id": "b6781586-6346-41cd-935a-a6b1487918fc",
    "snapshot": "chrome",
    "instruction": "Open ~/Desktop/report.html and write its title to ~/answer.txt.",
    "config": [
        {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
        {
            "type": "launch",
            "parameters": {"command": ["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]},
        },
        {"type": "open", "parameters": {"path": "/home/user/Desktop/report.html"}},
    ],
    "related_apps": ["chrome"],
    "evaluator": {
        "func": ["match_in_list", "fuzzy_match"],
        "conj": "or",
        "result": [
            {"type": "vm_file", "path": "/home/user/answer.txt", "dest": "answer.txt"},
            {"type": "vm_file", "path": "/home/user/answer.txt", "dest": "answer.txt"},
        ],
        "expected": [
            {"type": "rule", "rules": {"expected": ["Quarterly Report", "Quarterly Report\n"]}},
            {"type": "rule", "rules": {"expected": "Quarterly Report"}},
        ],
        "options": [{}, {}],
    },
}
INFEASIBLE: dict[str, Any] = {
    "id": "f9be0997-4b7c-45c5-b05c-4612b44a6118",
    "snapshot": "os",
    "instruction": "Install Adobe Photoshop on this Ubuntu machine.",
    "config": [],
    "related_apps": ["os"],
    "evaluator": {"func": "infeasible"},
}


ANSWER = {"type": "vm_file", "path": "/home/user/answer.txt"}
LS = {"type": "vm_command_line", "command": "ls ~", "shell": True}


# An office task the way most of OSWorld's are: a downloaded file opened in LibreOffice, saved with a
# pyautogui keystroke after the agent is done, and compared with a reference file from the cloud.
CALC_TASK: dict[str, Any] = {
    "id": "0bf05a7d-b28b-44d2-955a-50b41e24012a",
    "snapshot": "libreoffice_calc",
    "instruction": "Fill the missing totals in column D.",
    "source": "authors",
    "config": [
        {
            "type": "download",
            "parameters": {
                "files": [
                    {
                        "url": "https://example.org/files/totals.xlsx?download=true",
                        "path": "/home/user/totals.xlsx",
                    },
                    {"url": "https://example.org/files/notes.txt", "path": "Desktop/notes.txt"},
                ]
            },
        },
        {"type": "open", "parameters": {"path": "/home/user/totals.xlsx"}},
        {
            "type": "activate_window",
            "parameters": {"window_name": "totals.xlsx - LibreOffice Calc", "strict": True},
        },
    ],
    "trajectory": "trajectories/",
    "related_apps": ["libreoffice_calc"],
    "evaluator": {
        "postconfig": [
            {"type": "activate_window", "parameters": {"window_name": "totals.xlsx - LibreOffice Calc"}},
            {"type": "sleep", "parameters": {"seconds": 0.5}},
            {
                "type": "execute",
                "parameters": {
                    "command": ["python", "-c", "import pyautogui; pyautogui.hotkey('ctrl', 's');"]
                },
            },
        ],
        "func": "compare_table",
        "result": {"type": "vm_file", "path": "/home/user/totals.xlsx", "dest": "totals.xlsx"},
        "expected": {
            "type": "cloud_file",
            "path": "https://example.org/gold/totals.xlsx",
            "dest": "totals_gold.xlsx",
        },
        "options": {"rules": [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]},
    },
}


def rule(**rules: Any) -> dict[str, Any]:
    return {"type": "rule", "rules": rules}


def with_evaluator(**ev: Any) -> dict[str, Any]:
    doc = copy.deepcopy(OS_TERMINAL)
    doc["evaluator"] = ev
    return doc


def with_config(*steps: dict[str, Any]) -> dict[str, Any]:
    doc = copy.deepcopy(OS_TERMINAL)
    doc["config"] = list(steps)
    return doc


def osworld_check(func: str, probe: dict[str, Any], *, options: Any = None, **rest: Any) -> dict[str, Any]:
    return {
        "probe": probe,
        "metric": "osworld",
        "options": {
            "func": func,
            "options": options or {},
            "expected_given": "expected" in rest or "expected_probe" in rest,
        },
        **rest,
    }


# --- what maps ---------------------------------------------------------------------------------


def test_os_terminal_task() -> None:
    spec = import_osworld_task(OS_TERMINAL, id_prefix="osworld/os")
    assert spec.id == "osworld/os/5c1075ca-bb34-46a3-a7a0-029bd7463e79"
    assert (spec.platform, spec.profile) == ("desktop", "office")
    doc = spec.to_dict()
    assert doc["setup"] == [
        {"op": "exec", "command": MKDIR_HOME, "timeout": 10},
        {"op": "exec", "command": "mkdir -p /home/user/Documents", "timeout": 120, "check": False},
        {
            "op": "exec",
            "command": OS_TERMINAL["config"][1]["parameters"]["command"],
            "timeout": 120,
            "check": False,
        },
        {"op": "launch", "app": "xterm", "args": [], "timeout": 60},
        {"op": "wait", "seconds": 0.1, "timeout": 10.1},
    ]
    # OSWorld's own metric functions, its `and` (0 if any is 0, else the mean), its rules as given.
    assert doc["checker"] == {
        "combine": "all_mean",
        "checks": [
            osworld_check(
                "check_include_exclude",
                {"op": "exec", "command": "ls /home/user/backup", "any_exit": True, "timeout": 60},
                expected={"include": ["a.txt", "b.txt"], "exclude": ["c.md", "No such file"]},
            ),
            osworld_check(
                "exact_match",
                {"op": "exec", "command": "cat /home/user/backup/b.txt", "any_exit": True, "timeout": 60},
                expected={"expected": "two\n"},
            ),
        ],
    }
    assert set(spec.tags) == {"osworld", "app:os", "app:xterm", "osworld-snapshot:os"}
    # Nothing of the task file is lost: it is kept as given.
    assert doc["origin"] == {"osworld": OS_TERMINAL}


def test_an_office_task_downloads_saves_before_scoring_and_compares_with_a_cloud_file() -> None:
    spec = import_osworld_task(CALC_TASK, id_prefix="osworld/libreoffice_calc")
    doc = spec.to_dict()
    assert doc["setup"][1:] == [
        {"op": "fetch", "url": "https://example.org/files/totals.xlsx?download=true", "path": "totals.xlsx", "timeout": 300},
        # A relative path is under the home folder, where OSWorld's server runs.
        {"op": "fetch", "url": "https://example.org/files/notes.txt", "path": "Desktop/notes.txt", "timeout": 300},
        {"op": "launch", "app": "libreoffice", "args": ["/home/user/totals.xlsx"], "title": "totals", "timeout": 60},
        {"op": "window", "action": "activate", "name": "totals.xlsx - LibreOffice Calc", "strict": True,
         "by_class": False, "check": False, "timeout": 30},
    ]  # fmt: skip
    assert doc["checker"]["before"] == [
        {"op": "window", "action": "activate", "name": "totals.xlsx - LibreOffice Calc", "strict": False,
         "by_class": False, "check": False, "timeout": 30},
        {"op": "wait", "seconds": 0.5, "timeout": 10.5},
        {"op": "pyautogui", "code": "import pyautogui; pyautogui.hotkey('ctrl', 's');", "screen": [1920, 1080],
         "timeout": 60},
    ]  # fmt: skip
    assert doc["checker"]["checks"] == [
        osworld_check(
            "compare_table",
            {"op": "file", "path": "totals.xlsx", "raw": True, "name": "totals.xlsx"},
            options={"rules": [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]},
            expected_probe={
                "op": "fetch",
                "url": "https://example.org/gold/totals.xlsx",
                "name": "totals_gold.xlsx",
            },
        )
    ]
    assert doc["checker"]["combine"] == "all_mean"
    # Downloads need no network in the sandbox: the host fetches them.
    assert "needs:network" not in spec.tags
    assert {"app:libreoffice", "app:libreoffice_calc"} <= set(spec.tags)


def test_the_office_task_runs_its_steps_and_hands_osworld_the_files(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = import_osworld_task(CALC_TASK)
    fetched = {"https://example.org/gold/totals.xlsx": b"gold-bytes"}
    calls: list[tuple[Any, ...]] = []

    class Env(FakeEnv):
        def observe(self) -> Any:
            from agent_core.env import Obs

            return Obs(screenshot=b"", width=1280, height=720)

        def call(self, method: str, **params: Any) -> Any:
            self.calls.append(("call", method, params))
            if method == "fetch" and "path" in params:
                self.files[params["path"]] = b"xlsx-bytes"
                return {"path": params["path"]}
            if method == "fetch":
                import base64

                return {"content_b64": base64.b64encode(fetched[params["url"]]).decode()}
            if method == "window":
                return {"window": None}
            return {}

    def score(func: str, result: Any, expected: Any, options: dict[str, Any], **kw: Any) -> float:
        calls.append((func, result, expected, options))
        return 1.0

    monkeypatch.setattr(osworld_metrics, "score", score)
    env = Env()
    prepared = prepare(spec, env)
    assert [c[2]["path"] for c in env.calls if c[:2] == ("call", "fetch")] == [
        "totals.xlsx",
        "Desktop/notes.txt",
    ]
    env.calls.clear()
    result = evaluate(prepared, env)
    assert result.reward == 1.0
    # postconfig first: the window, then ctrl+s through the sandbox's own input path.
    kinds = [c[0] if c[0] != "call" else c[1] for c in env.calls]
    assert kinds[:2] == ["window", "act"] and env.calls[1][1] == A.Hotkey(keys=("ctrl", "s"))
    assert calls == [
        (
            "compare_table",
            file_value(b"xlsx-bytes", "totals.xlsx"),
            file_value(b"gold-bytes", "totals_gold.xlsx"),
            {"rules": [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]},
        )
    ]


def test_an_unusable_metrics_environment_is_an_env_error_not_a_zero(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*args: Any, **kw: Any) -> float:
        raise osworld_metrics.OSWorldEnvError("the OSWorld metrics environment is not installed")

    monkeypatch.setattr(osworld_metrics, "score", broken)
    spec = import_osworld_task(OS_TERMINAL)
    env = FakeEnv()
    with pytest.raises(EnvError, match="not installed"):
        evaluate(prepare(spec, env), env)


def test_osworlds_and_is_zero_if_any_is_zero_else_the_mean_and_or_is_the_max() -> None:
    assert combine([1.0, 0.5], "all_mean") == 0.75
    assert combine([1.0, 0.0, 1.0], "all_mean") == 0.0
    assert combine([0.2, 0.5], "any") == 0.5
    assert combine([0.2, 0.5], "all") == 0.2
    assert combine([0.2, 1.0, 0.0], "any") == 1.0


def test_gedit_task() -> None:
    doc = import_osworld_task(GEDIT_FILE).to_dict()
    assert doc["setup"][2:] == [
        {
            "op": "launch",
            "app": "mousepad",
            "args": ["/home/user/Desktop/essay.txt"],
            "title": "essay",
            "timeout": 60,
        },
        {"op": "launch", "app": "mousepad", "args": ["/home/user/Desktop/essay.txt"], "timeout": 60},
    ]
    assert doc["checker"]["checks"] == [
        osworld_check(
            "compare_text_file",
            {"op": "file", "path": "Desktop/essay.txt", "raw": True, "name": "essay.txt"},
            options={"ignore_blanks": True},
            expected_probe={"op": "file", "path": ".gold/essay.txt", "raw": True, "name": "gold.txt"},
        )
    ]
    assert doc["checker"]["combine"] == "all_mean"


def test_chrome_local_task() -> None:
    doc = import_osworld_task(CHROME_LOCAL).to_dict()
    # The DevTools flag and socat are OSWorld's plumbing; the page opens in Chromium.
    assert doc["setup"][1:] == [
        {"op": "launch", "app": "chromium", "args": [], "timeout": 60},
        {"op": "launch", "app": "chromium", "args": ["/home/user/Desktop/report.html"], "timeout": 60},
    ]
    assert doc["checker"]["combine"] == "any"
    assert [c["options"]["func"] for c in doc["checker"]["checks"]] == ["match_in_list", "fuzzy_match"]


def test_a_devtools_getter_runs_osworlds_own_code_on_the_hosts_endpoint() -> None:
    doc = with_evaluator(
        func="is_expected_tabs",
        result={"type": "open_tabs_info"},
        expected=rule(type="url", urls=["https://a.example/"]),
    )
    check = import_osworld_task(doc).to_dict()["checker"]["checks"][0]
    assert check["probe"] == {"op": "browser"}
    assert check["options"]["getter"] == {
        "name": "open_tabs_info", "config": {"type": "open_tabs_info"}, "devtools": True, "a11y": False,
    }  # fmt: skip
    # The active tab's getters find its URL in the accessibility tree first (OSWorld's XML form, the
    # browser named as OSWorld's image names it).
    active = with_evaluator(
        func="is_expected_active_tab", result={"type": "active_tab_info", "goto_prefix": "https://www."},
        expected=rule(type="url", url="https://a.example/"),
    )  # fmt: skip
    check = import_osworld_task(active).to_dict()["checker"]["checks"][0]
    assert check["probe"] == {"op": "browser", "a11y": True, "renames": {"Chromium": "Google Chrome"}}
    assert check["options"]["getter"]["a11y"] is True
    # page_info opens its URL in a new tab: a web one needs the network.
    paged = import_osworld_task(
        with_evaluator(
            func="check_direct_json_object",
            result={"type": "page_info", "url": "https://b.example/"},
            expected=rule(expected={"title": "B"}),
        )
    ).to_dict()
    assert "needs:network" in paged["tags"]


def test_a_vm_file_getter_runs_osworlds_own_code_on_the_file_and_time_ranges_come_from_its_getter() -> None:
    doc = with_evaluator(
        func=["compare_audios", "check_direct_json_object"],
        result=[
            {"type": "audio_in_slide", "ppt_file_path": "/home/user/Desktop/talk.pptx", "slide_index": 0,
             "dest": "a.mp3"},
            LS,
        ],
        expected=[
            {"type": "vm_file", "path": "/home/user/Music/a.mp3", "dest": "a.mp3"},
            {"type": "time_diff_range", "diff_range_in_minutes": 5},
        ],
    )  # fmt: skip
    first, second = import_osworld_task(doc).to_dict()["checker"]["checks"]
    assert first["probe"] == {"op": "files", "paths": ["Desktop/talk.pptx"], "names": ["talk.pptx"]}
    assert first["options"]["getter"]["files"] == ["Desktop/talk.pptx"]
    assert second["options"]["expected_getter"] == {
        "name": "time_diff_range", "config": {"type": "time_diff_range", "diff_range_in_minutes": 5},
    }  # fmt: skip


def test_tabs_windows_multi_files_and_gimp_config() -> None:
    doc = with_config(
        {"type": "chrome_open_tabs", "parameters": {"urls_to_open": ["https://www.example.com/", "file:///home/user/a.html"]}},
        {"type": "activate_window", "parameters": {"window_name": "Google Chrome", "by_class": True}},
        {"type": "close_window", "parameters": {"window_name": "Untitled 1 - LibreOffice Calc", "strict": True}},
        {"type": "launch", "parameters": {"command": ["vlc", "--start-time=120.5", "/home/user/a.mp4"]}},
        {"type": "launch", "parameters": {"command": "/usr/bin/thunderbird -compose"}},
    )  # fmt: skip
    doc["evaluator"] = {
        "func": ["compare_image_list", "check_config_status"],
        "result": [
            {"type": "vm_file", "multi": "true", "path": ["/home/user/a.png", "~/b.png"], "dest": ["a.png", "b.png"],
             "gives": [0, 1]},
            {"type": "gimp_config_file", "dest": "sessionrc", "file_name": "sessionrc"},
        ],
        "expected": [
            {"type": "cloud_file", "multi": True, "path": ["https://h/x.png", "https://h/y.png"], "dest": ["x.png", "y.png"],
             "gives": [1]},
            {"type": "rule", "rules": {"key": "show-tips", "value": "no"}},
        ],
    }  # fmt: skip
    spec = import_osworld_task(doc)
    out = spec.to_dict()
    assert out["setup"][1:] == [
        # OSWorld's own step, run by its code over the DevTools of the desktop's Chromium.
        {"op": "osworld_setup", "step": "chrome_open_tabs",
         "params": {"urls_to_open": ["https://www.example.com/", "file:///home/user/a.html"]}, "timeout": 180},
        {"op": "window", "action": "activate", "name": "Chromium", "strict": False, "by_class": True, "check": False,
         "timeout": 30},
        {"op": "window", "action": "close", "name": "Untitled 1 - LibreOffice Calc", "strict": True, "by_class": False,
         "check": False, "timeout": 30},
        {"op": "launch", "app": "vlc", "args": ["--start-time=120.5", "/home/user/a.mp4"], "timeout": 60},
        {"op": "launch", "app": "thunderbird", "args": ["-compose"], "timeout": 60},
    ]  # fmt: skip
    first, second = out["checker"]["checks"]
    assert first["probe"] == {
        "op": "files",
        "paths": ["a.png", "b.png"],
        "names": ["a.png", "b.png"],
        "gives": [0, 1],
    }
    assert first["expected_probe"] == {"op": "fetch", "url": "https://h/y.png", "name": "y.png"}
    assert second["probe"] == {
        "op": "file",
        "path": ".config/GIMP/2.10/sessionrc",
        "raw": True,
        "name": "sessionrc",
    }
    assert second["expected"] == {"key": "show-tips", "value": "no"}
    # The tab on a web host needs the network inside the sandbox; the local file does not.
    assert "needs:network" in spec.tags
    assert "opens https://www.example.com/" in spec.description


def test_multi_files_give_none_for_a_missing_one(monkeypatch: pytest.MonkeyPatch) -> None:
    doc = with_evaluator(
        func="compare_image_list",
        result={"type": "vm_file", "multi": True, "path": ["/home/user/a.png", "/home/user/b.png"],
                "dest": ["a.png", "b.png"], "gives": [0, 1]},
    )  # fmt: skip
    seen = []
    monkeypatch.setattr(osworld_metrics, "score", lambda f, r, e, o, **kw: seen.append((r, e)) or 0.0)
    env = FakeEnv(files={"a.png": b"A"})
    evaluate(prepare(import_osworld_task(doc), env), env)
    assert seen == [([file_value(b"A", "a.png"), None], osworld_metrics.NO_EXPECTED)]


def test_infeasible_task() -> None:
    spec = import_osworld_task(INFEASIBLE)
    assert spec.infeasible and spec.checker.checks == ()
    env = FakeEnv()
    prepared = prepare(spec, env)
    assert evaluate(prepared, env, final_answer="infeasible: no Photoshop for Linux").reward == 1.0
    assert evaluate(prepared, env, final_answer="done").reward == 0.0


# --- what is refused, and why --------------------------------------------------------------------

BAD = [
    ("unknown task key", {**OS_TERMINAL, "extra_setup": []}, "unknown key(s) extra_setup"),
    ("unknown evaluator key", with_evaluator(func="exact_match", result=LS, flags=1), "evaluator: unknown key(s) flags"),
    ("unknown setup parameter", with_config({"type": "sleep", "parameters": {"seconds": 1, "jitter": 2}}),
     "config[0] (sleep): unknown parameter(s) jitter"),
    ("a Windows path", with_config({"type": "open", "parameters": {"path": "C:\\Users\\chenj\\a.docx"}}),
     "platform: a Windows task"),
    ("a Windows app", {**OS_TERMINAL, "related_apps": ["word"]}, "platform: a Windows task (word)"),
    ("VS Code", with_config({"type": "launch", "parameters": {"command": ["code"]}}), "VS Code is not packaged"),
    ("Google Drive", with_config({"type": "googledrive", "parameters": {}}), "Google Drive"),
    ("sudo", with_config({"type": "execute", "parameters": {"command": "sudo apt install x", "shell": True}}),
     "needs root (sudo)"),
    ("a pyautogui script's stdout",
     with_config({"type": "execute", "parameters": {"command": ["python", "-c", "import pyautogui; pyautogui.press('a')"],
                                                    "stdout": "out.txt"}}),
     "no output to save"),
    ("pyautogui beside other code",
     with_config({"type": "execute", "parameters": {"command": ["python", "-c", "import os, pyautogui; os.remove('x')"]}}),
     "pyautogui"),
    ("a misspelt key of a DevTools getter",
     with_evaluator(func="is_expected_active_tab", result={"type": "active_tab_info", "goto_prefx": "x"},
                    expected=rule(type="url")),
     "unknown key(s) goto_prefx"),
    ("a relative time without its start",
     with_evaluator(func="check_direct_json_object", result=LS,
                    expected={"type": "rule_relativeTime", "rules": {"relativeTime": {"to": "today"}}}),
     "rules.relativeTime must name at least from"),
    ("a DevTools getter for what is expected",
     with_evaluator(func="is_expected_tabs", result=LS, expected={"type": "open_tabs_info"}),
     "Chrome's state is read for the result only"),
    ("an unknown metric", with_evaluator(func="no_such_metric", result=LS), "is not one of OSWorld's metric functions"),
    ("a placeholder", with_config({"type": "execute", "parameters": {"command": "echo {CLIENT_PASSWORD}", "shell": True}}),
     "placeholder {CLIENT_PASSWORD}"),
    ("until", with_config({"type": "execute", "parameters": {"command": ["ls"], "until": {"returncode": 0}}}), "`until`"),
    ("a path outside home", with_evaluator(func="exact_match", result={"type": "vm_file", "path": "/etc/passwd", "dest": "p"},
                                           expected=rule(expected="x")), "outside /home/user"),
    ("an unknown getter", with_evaluator(func="exact_match", result={"type": "vm_mind"}), "getter is not supported"),
    ("a metric list of another length", with_evaluator(func=["exact_match", "exact_match"], result=[LS]),
     "must be a list of 2"),
    ("a bad conj", with_evaluator(func=["exact_match"], result=[LS], conj="xor"), "'xor' is not and / or"),
    ("an unknown program", with_config({"type": "launch", "parameters": {"command": ["steam"]}}), "'steam' has no counterpart"),
    ("a chrome flag for xterm", with_config({"type": "launch", "parameters": {"command": ["gnome-terminal", "--maximize"]}}),
     "flag '--maximize' of gnome-terminal"),
]  # fmt: skip


@pytest.mark.parametrize(("doc", "reason"), [(d, r) for _, d, r in BAD], ids=[n for n, _, _ in BAD])
def test_unsupported_items_give_their_reason(doc: dict[str, Any], reason: str) -> None:
    with pytest.raises(OSWorldImportError) as err:
        import_osworld_task(doc)
    assert reason in str(err.value)
    assert str(err.value).startswith(f"OSWorld task {doc['id']}: ")


@pytest.mark.parametrize(
    ("doc", "reason"),
    [({}, "id must be a non-empty string"), ([], "must be a JSON object"), ({"id": "x"}, "instruction")],
)
def test_documents_without_an_id(doc: Any, reason: str) -> None:
    with pytest.raises(OSWorldImportError, match=reason):
        import_osworld_task(doc)


def test_an_imported_task_is_a_valid_task_document() -> None:
    for doc in (OS_TERMINAL, GEDIT_FILE, CHROME_LOCAL, INFEASIBLE, CALC_TASK):
        spec = import_osworld_task(doc)
        assert parse_task(spec.to_dict()) == spec
    with pytest.raises(TaskSpecError, match="pyautogui"):
        parse_task({**spec.to_dict(), "setup": [{"op": "pyautogui", "code": "import os"}]})


def test_import_files(tmp_path: Path) -> None:
    examples = tmp_path / "evaluation_examples" / "examples"
    paths = []
    for domain, doc in (("os", OS_TERMINAL), ("multi_apps", GEDIT_FILE), ("libreoffice_calc", CALC_TASK)):
        (examples / domain).mkdir(parents=True, exist_ok=True)
        paths.append(examples / domain / f"{doc['id']}.json")
        paths[-1].write_text(json.dumps(doc))
    (tmp_path / "mine").mkdir()
    paths.append(tmp_path / "mine" / "infeasible.json")
    paths[-1].write_text(json.dumps(INFEASIBLE))
    paths.append(tmp_path / "mine" / "broken.json")
    paths[-1].write_text("{not json")
    paths.append(tmp_path / "mine" / "missing.json")
    paths.append(tmp_path / "mine" / "again.json")
    paths[-1].write_text(json.dumps(INFEASIBLE))
    (examples / "Windows" / "excel").mkdir(parents=True)
    paths.append(examples / "Windows" / "excel" / "w.json")
    paths[-1].write_text(json.dumps({**INFEASIBLE, "id": "w1"}))

    imported, skipped = import_osworld_files(paths)
    assert [s.id for s in imported] == [
        "osworld/os/5c1075ca-bb34-46a3-a7a0-029bd7463e79",
        "osworld/multi_apps/0e47de2a-32e0-456c-a366-8c607ef7a9d2",
        "osworld/libreoffice_calc/0bf05a7d-b28b-44d2-955a-50b41e24012a",
        # Outside a domain's folder: the domain its snapshot names.
        "osworld/os/f9be0997-4b7c-45c5-b05c-4612b44a6118",
    ]
    assert all(isinstance(s, TaskSpec) for s in imported)
    reasons = dict(skipped)
    assert list(reasons) == [str(p) for p in paths[4:]]
    assert "cannot read OSWorld task JSON" in reasons[str(paths[4])]
    assert "cannot read OSWorld task JSON" in reasons[str(paths[5])]
    assert "the same task file as " + str(paths[3]) in reasons[str(paths[6])]
    # A task from OSWorld's Windows folder is a Windows task, whatever it says.
    assert "a Windows task" in reasons[str(paths[7])]

    imported, _ = import_osworld_files(paths[:1], id_prefix="ow")
    assert imported[0].id == "ow/os/5c1075ca-bb34-46a3-a7a0-029bd7463e79"


class ShellEnv(FakeEnv):
    """FakeEnv whose commands really run, in bash, with HOME at `home` (as a sandbox runs them)."""

    def __init__(self, home: Path) -> None:
        super().__init__()
        self.home = home

    def exec(self, command: str, *, timeout: float = 30.0) -> ExecOutput:
        done = subprocess.run(
            ["bash", "-c", command], cwd=self.home, env={"HOME": str(self.home), "PATH": "/usr/bin:/bin"},
            capture_output=True, text=True, timeout=timeout,
        )  # fmt: skip
        return ExecOutput(exit_code=done.returncode, stdout=done.stdout, stderr=done.stderr)


def test_list_directory_walks_the_folder_in_the_sandbox_as_osworlds_server_does(tmp_path: Path) -> None:
    spec = import_osworld_task(
        with_evaluator(
            func="check_moved_jpgs",
            result={"type": "list_directory", "path": "/home/user/Desktop/cpjpg"},
            expected=rule(expected=["a.jpg"]),
        )
    )
    probe = spec.checker.checks[0].probe
    assert (probe.op, probe.args["parse"]) == ("exec", "json")
    folder = tmp_path / "Desktop" / "cpjpg"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.jpg").write_bytes(b"jpg")
    (folder / "sub" / "b.txt").write_text("b")
    tree = run_probe(probe, ShellEnv(tmp_path), {})
    # The shape of OSWorld's server's /list_directory answer, in os.listdir's order.
    want = {"type": "directory", "name": "cpjpg", "children": []}
    for entry in os.listdir(folder):
        want["children"].append(
            {"type": "directory", "name": "sub", "children": [{"type": "file", "name": "b.txt"}]}
            if entry == "sub"
            else {"type": "file", "name": entry}
        )
    assert tree == want
    # No such folder: OSWorld's server answers 400 and its getter gives None; so does the probe.
    shutil.rmtree(folder)
    assert run_probe(probe, ShellEnv(tmp_path), {}) is None
    # Outside the home folder, the only place sandboxes give files: refused at the import.
    with pytest.raises(TaskSpecError, match="outside /home/user"):
        import_osworld_task(
            with_evaluator(func="check_moved_jpgs", result={"type": "list_directory", "path": "/etc"},
                           expected=rule(expected=[]))
        )  # fmt: skip


# OSWorld's chrome task 2ae9ba84 (development split) as its file has it: Chrome with DevTools behind socat,
# quit and started again by the postconfig so that it writes its profile, whose name the getter reads.
CHROME_PROFILE_NAME: dict[str, Any] = {
    "id": "2ae9ba84-3a0d-4d4c-8338-3a1478dc5fe3",
    "snapshot": "chrome",
    "instruction": "Could you help me change the username in chrome profiles to Thomas?",
    "source": "test",
    "config": [
        {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
        {"type": "launch", "parameters": {"command": ["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]}},
    ],
    "trajectory": "trajectories/",
    "related_apps": ["chrome"],
    "evaluator": {
        "postconfig": [
            {"type": "launch", "parameters": {"command": ["pkill", "chrome"]}},
            {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
        ],
        "func": "exact_match",
        "result": {"type": "profile_name"},
        "expected": {"type": "rule", "rules": {"expected": "Thomas"}},
    },
}  # fmt: skip


def test_chromes_profile_getters_read_our_chromiums_profile_for_osworlds_own_getter() -> None:
    spec = import_osworld_task(CHROME_PROFILE_NAME)
    check = spec.checker.checks[0]
    assert (check.probe.op, check.probe.args["paths"]) == ("files", [".config/chromium/Default/Preferences"])
    assert check.options["getter"] == {
        "name": "profile_name", "config": {"type": "profile_name"}, "files": ["Default/Preferences"]
    }  # fmt: skip
    # pkill chrome quits our Chromium (the host signals it) and waits until it is gone; Chrome starts
    # again as Chromium.
    kill, relaunch = spec.to_dict()["checker"]["before"]
    assert (kill["op"], kill["method"], kill["params"]) == (
        "call",
        "pkill",
        {"names": ["chromium"], "wait_s": 10},
    )
    assert (relaunch["op"], relaunch["app"]) == ("launch", "chromium")
    # What a getter of the profile cannot be: the expected side, or a pkill of something not ours.
    with pytest.raises(TaskSpecError, match="for the result only"):
        import_osworld_task(with_evaluator(func="exact_match", result={"type": "vm_command_line", "command": "true"},
                                           expected={"type": "bookmarks"}))  # fmt: skip
    doc = copy.deepcopy(CHROME_PROFILE_NAME)
    doc["evaluator"]["postconfig"][0]["parameters"]["command"] = ["pkill", "-f", "chrome"]
    with pytest.raises(TaskSpecError, match="only `pkill NAME…` of an app"):
        import_osworld_task(doc)
    doc["evaluator"]["postconfig"][0]["parameters"]["command"] = ["killall", "nautilus"]
    with pytest.raises(TaskSpecError, match="not one of our apps' processes"):
        import_osworld_task(doc)


def test_a_command_output_saved_to_osworlds_host_cache_is_what_cache_file_reads(tmp_path: Path) -> None:
    # OSWorld's thunderbird tasks: the postconfig lists a folder into a cache file; check_list reads it.
    doc = with_evaluator(
        postconfig=[
            {"type": "command", "parameters": {"command": ["ls", "-R", "/home/user/backup"], "stdout": "backup.ls"}}
        ],
        func="check_list",
        result={"type": "cache_file", "path": "backup.ls"},
        expected=rule(expect=[r"a\.eml"]),
    )  # fmt: skip
    spec = import_osworld_task(doc)
    (before,) = spec.to_dict()["checker"]["before"]
    assert before == {"op": "exec", "command": "ls -R /home/user/backup", "check": False,
                      "save_as": "cache_0", "timeout": 120}  # fmt: skip
    check = spec.checker.checks[0]
    assert (check.probe.op, dict(check.probe.args)) == (
        "saved", {"key": "cache_0", "field": "stdout", "file": "backup.ls"}
    )  # fmt: skip
    # Run for real: the listing (whatever the exit code, as OSWorld writes it) becomes the file.
    (tmp_path / "backup").mkdir()
    (tmp_path / "backup" / "a.eml").write_text("mail")
    env = ShellEnv(tmp_path)
    env.commands = {}
    spec = import_osworld_task(
        with_evaluator(
            postconfig=[{"type": "execute", "parameters": {"command": "ls -R ~/backup; exit 3", "shell": True,
                                                           "stdout": "backup.ls"}}],
            func="check_list", result={"type": "cache_file", "path": "backup.ls"}, expected=rule(expect=["a"]),
        )
    )  # fmt: skip
    context: dict[str, Any] = {}
    step = spec.checker.before[0]
    out = env.exec(str(step.args["command"]).replace("/home/user", str(tmp_path)))
    context[step.save_as] = {"exit_code": out.exit_code, "stdout": out.stdout, "stderr": out.stderr}
    value = run_probe(spec.checker.checks[0].probe, env, context)
    assert value["name"] == "backup.ls" and "a.eml" in base64.b64decode(value["__file__"]).decode()
    # A cache file no step fills is refused, naming it.
    with pytest.raises(TaskSpecError, match="no setup or postconfig step saves its output as 'other.ls'"):
        import_osworld_task(
            with_evaluator(func="check_list", result={"type": "cache_file", "path": "other.ls"}, expected=rule(expect=[]))
        )  # fmt: skip


@pytest.mark.parametrize(
    ("command", "mapped"),
    [
        # OSWorld's development split, as its tasks have them: installs our office desktops already have.
        ("echo password | sudo -S apt-get update -y && echo password | sudo -S apt-get install unzip -y && "
         "unzip /home/user/Desktop/ext.zip -d /home/user/Desktop/ && rm /home/user/Desktop/ext.zip",
         "unzip /home/user/Desktop/ext.zip -d /home/user/Desktop/ && rm /home/user/Desktop/ext.zip"),
        ("echo password | sudo -S pip install pysrt", "true"),
        ("echo 'password' | sudo -S apt-get install -y expect", "true"),
    ],
)  # fmt: skip
def test_root_installs_our_desktops_already_have_are_satisfied_steps(command: str, mapped: str) -> None:
    spec = import_osworld_task(
        with_config({"type": "execute", "parameters": {"command": command, "shell": True}})
    )
    assert spec.to_dict()["setup"][-1] == {"op": "exec", "command": mapped, "timeout": 120, "check": False}


@pytest.mark.parametrize(
    "command",
    [
        "echo 'password' | sudo -S mkdir ~/Desktop/todo_list",  # a root-owned folder: not ours to make
        "echo password | sudo -S apt-get install -y vim",  # a package our desktops do not have
        "echo password | sudo -S apt-get install -y expect; sudo reboot",  # more than installs
    ],
)
def test_any_other_root_step_is_refused(command: str) -> None:
    with pytest.raises(TaskSpecError, match="needs root"):
        import_osworld_task(
            with_config({"type": "execute", "parameters": {"command": command, "shell": True}})
        )
