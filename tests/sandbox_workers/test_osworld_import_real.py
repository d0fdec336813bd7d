"""An imported OSWorld-format task, set up and scored on a real X desktop sandbox by OSWorld's own
metric functions (run in their own environment: marked osworld)."""

from __future__ import annotations

import copy
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_core.tasks.mirror import url_key
from agent_core.tasks.osworld import import_osworld_task
from agent_core.tasks.runner import evaluate, prepare
from sandbox_workers.agent_env import SandboxEnv
from tests.agent_core.test_osworld_import import CHROME_PROFILE_NAME, OS_TERMINAL
from tests.sandbox_workers.test_fetch_cache import server  # noqa: F401 - a fixture

pytestmark = [pytest.mark.slow, pytest.mark.osworld]
# These run at the end of make test's main pass, beside vLLM's engine starting and LibreOffice: a desktop
# may take longer than the default 20 s to start (its session D-Bus timed out once).
SLOW_START = {"start_timeout_s": 60}


def test_osworld_terminal_task_on_a_real_desktop(
    xdesktop_factory: Callable[..., Any],
    server: tuple[str, list[str]],  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    base, asked = server
    # The task names a public URL; the operator's mirror (an http one, on loopback: trusted) has its file.
    url = "https://files.example.org/osworld/readme.txt"
    (tmp_path / "www" / "by-url").mkdir()
    (tmp_path / "www" / "by-url" / url_key(url)).write_text("fetched by the host\n")
    monkeypatch.setenv("FLYWHEEL_VAR_DIR", str(tmp_path / "var"))
    monkeypatch.setenv("SANDBOX_FETCH_MIRROR", base)
    doc = copy.deepcopy(OS_TERMINAL)
    doc["config"] += [
        {
            "type": "download",
            "parameters": {"files": [{"url": url, "path": "Desktop/readme.txt"}]},
        },
        {"type": "activate_window", "parameters": {"window_name": "xterm", "by_class": True}},
        # Typed into the active terminal through the sandbox's own input path.
        {
            "type": "execute",
            "parameters": {
                "command": [
                    "python",
                    "-c",
                    "import pyautogui; pyautogui.write('touch ~/typed'); pyautogui.press('enter')",
                ]
            },
        },
    ]
    spec = import_osworld_task(doc, id_prefix="osworld/os")
    env = SandboxEnv(xdesktop_factory("osworld", options=SLOW_START), platform="desktop")

    prepared = prepare(spec, env)
    # The setup made OSWorld's home folders and the files, and opened a second terminal.
    listing = env.exec("ls -d ~/Desktop ~/Downloads && ls ~/Documents")
    assert listing.exit_code == 0, listing.stderr
    assert listing.stdout.split()[-3:] == ["a.txt", "b.txt", "c.md"]
    windows = env.call("windows")["windows"]
    assert sum("xterm" in " ".join(w["class"]).lower() for w in windows) >= 2
    assert env.get_file("Desktop/readme.txt") == b"fetched by the host\n"
    assert asked == [f"/by-url/{url_key(url)}"]
    assert env.exec("test -e ~/typed").exit_code == 0

    before = evaluate(prepared, env)
    assert before.reward == 0.0, before.details
    assert [d["score"] for d in before.details] == [0.0, 0.0]

    # The solution, done with the sandbox's shell.
    done = env.exec("mkdir ~/backup && cp ~/Documents/*.txt ~/backup/")
    assert done.exit_code == 0, done.stderr

    after = evaluate(prepared, env)
    assert after.reward == 1.0, after.details
    assert after.details[0]["artifact"] == "a.txt\nb.txt\n"

    # Copying the others too breaks the exclude rule: OSWorld's `and` of a 0 and a 1 is 0.
    env.exec("cp ~/Documents/c.md ~/backup/")
    again = evaluate(prepared, env)
    assert [d["score"] for d in again.details] == [0.0, 1.0]
    assert again.reward == 0.0


def test_a_chrome_profile_task_is_scored_by_osworlds_own_getter_on_the_real_chromiums_profile(
    xdesktop_factory: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLYWHEEL_VAR_DIR", str(tmp_path / "var"))
    spec = import_osworld_task(CHROME_PROFILE_NAME, id_prefix="osworld/chrome")
    env = SandboxEnv(xdesktop_factory("osworld-chrome", options=SLOW_START), platform="desktop")
    prepared = prepare(spec, env)
    windows = env.call("windows")["windows"]
    assert any("chromium" in " ".join(w["class"]).lower() for w in windows), windows

    # The postconfig quits Chromium (it writes its profile) and starts it again; OSWorld's get_profile_name
    # reads the Preferences the real Chromium wrote, whose name is not Thomas yet.
    untouched = evaluate(prepared, env)
    assert untouched.reward == 0.0, untouched.details
    assert untouched.details[0]["artifact"]["file"] == "Preferences", untouched.details
    assert untouched.details[0]["artifact"]["bytes"] > 100, untouched.details

    # The change, made as a script here (the agent would use Chromium's profile settings): Chromium quit,
    # its profile named Thomas.
    quit_ = env.call("pkill", names=["chromium"])
    assert quit_["signalled"] > 0 and quit_["left"] == 0, quit_
    rename = (
        "python3 -c \"import json; p = '.config/chromium/Default/Preferences'; d = json.load(open(p)); "
        "d.setdefault('profile', {})['name'] = 'Thomas'; json.dump(d, open(p, 'w'))\""
    )
    out = env.exec(rename, timeout=30)
    assert out.exit_code == 0, out.stderr
    solved = evaluate(prepared, env)
    assert solved.reward == 1.0, solved.details


TONE = (
    "import wave; w = wave.open('/home/user/Music/tone.wav', 'wb'); w.setnchannels(1); w.setsampwidth(1);"
    " w.setframerate(8000); w.writeframes(bytes([128]) * 8000 * 120); w.close()"
)
VLC_TASK: dict[str, Any] = {
    **{k: v for k, v in OS_TERMINAL.items() if k not in ("config", "evaluator")},
    "id": "0e1f2a3b-vlc-playing-and-its-config",
    "snapshot": "vlc",
    "instruction": "Let VLC's volume go up to 200 % (and keep the song playing).",
    "related_apps": ["vlc"],
    "config": [
        {"type": "execute", "parameters": {"command": "mkdir -p ~/Music", "shell": True}},
        {"type": "execute", "parameters": {"command": ["python", "-c", TONE]}},
        {"type": "launch", "parameters": {"command": ["vlc", "/home/user/Music/tone.wav"]}},
    ],
    "evaluator": {
        "func": ["is_vlc_playing", "check_qt_max_volume"],
        "conj": "and",
        "result": [
            {"type": "vlc_playing_info", "dest": "status.xml"},
            {"type": "vlc_config", "dest": "vlcrc"},
        ],
        "expected": [
            {"type": "rule", "rules": {"type": "file_name", "file_name": "tone.wav"}},
            {"type": "rule", "rules": {"expected_qt_max_volume": 200}},
        ],
    },
}


def test_vlc_as_osworlds_image_has_it_scored_through_its_http_interface_and_its_vlcrc(
    xdesktop_factory: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLYWHEEL_VAR_DIR", str(tmp_path / "var"))
    spec = import_osworld_task(VLC_TASK, id_prefix="osworld/vlc")
    env = SandboxEnv(xdesktop_factory("osworld-vlc", options=SLOW_START), platform="desktop")
    prepared = prepare(spec, env)
    # VLC wrote its full default vlcrc, with OSWorld's image's settings: no first-run question.
    vlcrc = env.get_file(".config/vlc/vlcrc").decode()
    assert "qt-privacy-ask=0\n" in vlcrc and "extraintf=http\n" in vlcrc and "#qt-max-volume=125\n" in vlcrc
    # VLC names its window after the song once it plays, a moment after the window comes (CI: later).
    deadline = time.monotonic() + 20
    while True:
        titles = [w["title"] for w in env.call("windows")["windows"]]
        if "tone.wav - VLC media player" in titles or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert "tone.wav - VLC media player" in titles and not any("privacy" in t.lower() for t in titles)
    # OSWorld's metrics on what its getters read: VLC's status.xml says playing tone.wav; the maximum
    # volume is still the default.
    untouched = evaluate(prepared, env)
    assert [d["score"] for d in untouched.details] == [1.0, 0.0], untouched.details
    assert untouched.reward == 0.0
    assert untouched.details[0]["artifact"]["file"] == "status.xml"
    # The change VLC's preferences make when saved; then a pause through the HTTP interface.
    assert env.exec("sed -i 's/^#qt-max-volume=125$/qt-max-volume=200/' ~/.config/vlc/vlcrc").exit_code == 0
    assert evaluate(prepared, env).reward == 1.0
    pause = "curl -s -u :password 'http://127.0.0.1:8080/requests/status.xml?command=pl_pause' >/dev/null"
    assert env.exec(pause).exit_code == 0
    assert [d["score"] for d in evaluate(prepared, env).details] == [0.0, 1.0]


def test_a_launch_returns_at_the_apps_own_window_not_its_splash(xdesktop_factory: Callable[..., Any]) -> None:
    desktop = xdesktop_factory("osworld-gimp", options={**SLOW_START, "apps": []})
    # GIMP shows "GIMP Startup" (a splash-type window) for seconds before its own window.
    out = desktop.call("launch", {"app": "gimp", "timeout": 60})
    assert out["window"]["title"] == "GNU Image Manipulation Program", out


PAGES = 'for n in a b c; do echo "<title>page $n</title>$n" > ~/Desktop/$n.html; done'
TABS_TASK: dict[str, Any] = {
    **{k: v for k, v in OS_TERMINAL.items() if k not in ("config", "evaluator")},
    "id": "1f2e3d4c-chrome-tabs-through-devtools",
    "snapshot": "chrome",
    "instruction": "Open c.html from the Desktop in a new tab, beside the two already open.",
    "related_apps": ["chrome"],
    "config": [
        {"type": "execute", "parameters": {"command": PAGES, "shell": True}},
        {"type": "launch", "parameters": {"command": ["google-chrome", "--remote-debugging-port=1337"]}},
        {
            "type": "launch",
            "parameters": {"command": ["socat", "tcp-listen:9222,fork", "tcp:localhost:1337"]},
        },
        # OSWorld's own step: a and b in new tabs, the browser's first tab (its new-tab page) closed.
        {
            "type": "chrome_open_tabs",
            "parameters": {"urls_to_open": [f"file:///home/user/Desktop/{n}.html" for n in "ab"]},
        },
    ],
    "evaluator": {
        "func": "is_expected_tabs",
        "result": {"type": "open_tabs_info"},
        "expected": {
            "type": "rule",
            "rules": {"type": "url", "urls": [f"file:///home/user/Desktop/{n}.html" for n in "abc"]},
        },
    },
}


ACTIVE_TAB_TASK: dict[str, Any] = {
    **{k: v for k, v in TABS_TASK.items() if k not in ("id", "config", "evaluator")},
    "id": "2a3b4c5d-chrome-active-tab-from-the-accessibility-tree",
    "config": [],
    "evaluator": {
        "func": ["is_expected_url_pattern_match", "check_accessibility_tree", "is_expected_active_tab"],
        # Chromium shows a file URL without its scheme, as Chrome shows a web URL without https://www.
        "result": [
            {"type": "active_url_from_accessTree", "goto_prefix": "file://"},
            {"type": "accessibility_tree"},
            {"type": "active_tab_info", "goto_prefix": "file://"},  # the tree's URL, then the tab over CDP
        ],
        "expected": [
            {"type": "rule", "rules": {"expected": [r"^file:///home/user/Desktop/c\.html$"]}},
            {
                "type": "rule",
                "rules": [
                    {
                        "selectors": [
                            'application[name="Google Chrome"] entry[name="Address and search bar"]'
                        ],
                        "text": "/home/user/Desktop/c.html",
                        "exact": True,
                    }
                ],
            },
            {"type": "rule", "rules": {"type": "url", "url": "file:///home/user/Desktop/c.html"}},
        ],
    },
}


def test_chromes_live_tabs_are_read_by_osworlds_own_getter_over_devtools_the_host_alone_reaches(
    xdesktop_factory: Callable[..., Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FLYWHEEL_VAR_DIR", str(tmp_path / "var"))
    spec = import_osworld_task(TABS_TASK, id_prefix="osworld/chrome")
    env = SandboxEnv(xdesktop_factory("osworld-tabs", options=SLOW_START), platform="desktop")
    prepared = prepare(spec, env)
    # Chromium's DevTools are on a pipe the host holds: nothing in the sandbox listens (OSWorld's port
    # flag and socat are dropped), so neither the agent nor another sandbox can drive the browser.
    listening = env.exec("awk '$4 == \"0A\"' /proc/net/tcp /proc/net/tcp6")
    assert listening.exit_code == 0 and listening.stdout == "", listening.stdout
    # OSWorld's get_open_tabs_info, connected through the endpoint, lists the live tabs: a, b (not c).
    untouched = evaluate(prepared, env)
    assert untouched.reward == 0.0, untouched.details
    assert "error" not in untouched.details[0], untouched.details
    # The agent opens c in a new tab (a second `chromium URL` hands it to the running browser); the getter
    # connects again (the first client's sessions were detached: the new tab did not wait for a debugger).
    env.call("launch", app="chromium", args=["file:///home/user/Desktop/c.html"], timeout=30)
    solved = evaluate(prepared, env)
    assert solved.reward == 1.0, solved.details
    # The active tab, as OSWorld's Chrome getters find it: the address bar's text in the accessibility
    # tree, in OSWorld's XML form (the browser named as OSWorld's image names it); and OSWorld's
    # check_accessibility_tree on the same tree.
    active = prepare(import_osworld_task(ACTIVE_TAB_TASK, id_prefix="osworld/chrome"), env)
    scored = evaluate(active, env)
    assert [d["score"] for d in scored.details] == [1.0, 1.0, 1.0], scored.details
    # With the browser gone, OSWorld's getter cannot connect and gives its empty tab list: 0, no
    # environment error.
    killed = env.call("pkill", names=["chromium"])
    assert killed["signalled"] > 0 and killed["left"] == 0, killed
    gone = evaluate(prepared, env)
    assert gone.reward == 0.0 and "error" not in gone.details[0], gone.details
