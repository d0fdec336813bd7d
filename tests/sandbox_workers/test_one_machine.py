"""A desktop sandbox is one machine: every process of it (session, apps, the agent's terminal, exec'd
commands) shares one process table, as OSWorld's steps (`pkill chrome`, `ps aux`) assume; another
sandbox's processes and the host's stay out of it."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agent_core import actions as A
from tests.procs import wait_for


def comms(sb: Any) -> list[str]:
    res = sb.exec("ps -eo comm=")
    assert res.exit_code == 0, res.stderr
    return res.stdout.split()


def window_classes(sb: Any) -> str:
    return " ".join(" ".join(w["class"]).lower() for w in sb.call("windows", {})["windows"])


@pytest.mark.slow
def test_two_desktops_each_see_one_machine_of_their_own(xdesktop_factory: Callable[..., Any]) -> None:
    one, two = xdesktop_factory("m1"), xdesktop_factory("m2")
    one.exec("(exec -a marker-one sleep 1234 >/dev/null 2>&1 &)")
    two.exec("(exec -a marker-two sleep 1234 >/dev/null 2>&1 &)")
    seen = one.exec("ps -eo pid=,comm=,args=").stdout
    table = {line.split(None, 2)[1] for line in seen.splitlines() if line.strip()}
    # Its own init as pid 1, its session and apps; not the host's X server, not the test runner.
    assert seen.split(None, 2)[:2] == ["1", "init"], seen
    assert {"openbox", "xterm", "dbus-daemon", "sleep"} <= table, seen
    assert "Xvfb" not in table and "x11vnc" not in table and "pytest" not in seen, seen
    assert "marker-one" in seen and "marker-two" not in seen
    # pkill from one command reaches a background process another command left; not another sandbox's.
    assert one.exec("pkill -f marker-two").exit_code == 1
    assert one.exec("pkill -f marker-one").exit_code == 0
    assert wait_for(lambda: "marker-one" not in one.exec("ps -eo args=").stdout)
    assert "marker-two" in two.exec("ps -eo args=").stdout
    # An app of the desktop closes when a command kills it by name, as on a machine.
    assert "xterm" in window_classes(one)
    assert one.exec("pkill xterm").exit_code == 0
    assert wait_for(lambda: "xterm" not in window_classes(one))
    assert "xterm" in window_classes(two)
    # The init cannot be killed from inside (no handler: the kernel drops the signal), nor read.
    one.exec("kill -9 1; kill -TERM 1")
    assert one.health().ok and "init" in comms(one)
    assert one.exec("cat /proc/1/environ").exit_code != 0
    # Killing every process it may signal ends its own, as a user's `kill -9 -1` does; the session's
    # parts are restarted, the other sandbox is untouched.
    one.exec("kill -9 -1")
    assert one.health().ok  # the next operations restart the session's parts (as each is seen dead)
    assert wait_for(lambda: {"init", "openbox", "dbus-daemon"} <= set(comms(one)))
    assert "xterm" not in comms(one)
    assert "marker-two" in two.exec("ps -eo args=").stdout
    # A reset ends the machine's processes: a fresh one, as at start.
    one.reset()
    assert "sleep" not in comms(one) and "xterm" in comms(one)
    assert "marker-two" in two.exec("ps -eo args=").stdout


@pytest.mark.slow
def test_the_agents_terminal_and_exec_share_the_process_table(xdesktop_factory: Callable[..., Any]) -> None:
    sb = xdesktop_factory("term")
    win = next(w for w in sb.call("windows", {})["windows"] if "xterm" in " ".join(w["class"]).lower())
    sb.act(A.Click(x=win["x"] + win["width"] // 2, y=win["y"] + win["height"] // 2))
    # Started by typing into the terminal, found and killed by a command, as a setup step would.
    sb.act(A.Type(content="exec -a typed-marker sleep 999\n"))
    assert wait_for(lambda: "typed-marker" in sb.exec("ps -eo args=").stdout)
    assert sb.exec("pkill -f typed-marker").exit_code == 0
    assert wait_for(lambda: "typed-marker" not in sb.exec("ps -eo args=").stdout)
    # …and the other way: what a command left running, the terminal sees and stops.
    sb.exec("(exec -a left-marker sleep 999 >/dev/null 2>&1 &)")
    sb.call("launch", {"app": "xterm"})
    sb.act(A.Type(content="pgrep -f left-marker > found.txt; pkill -f left-marker\n"))
    found = Path(sb.conf.workspace) / "found.txt"
    assert wait_for(lambda: found.exists() and found.read_text().strip().isdigit()), found
    assert wait_for(lambda: "left-marker" not in sb.exec("ps -eo args=").stdout)
    # The MCP shell tool is one more process of the machine: it sees the desktop's apps and stops them.
    sb.exec("(exec -a mcp-marker sleep 999 >/dev/null 2>&1 &)")
    seen = sb.mcp_call(
        server="shell", tool="run", arguments={"command": "ps -eo comm=,args=; pkill -f mcp-marker"}
    )
    text = json.dumps(seen)
    assert "openbox" in text and "xterm" in text and "mcp-marker" in text, text
    assert wait_for(lambda: "mcp-marker" not in sb.exec("ps -eo args=").stdout)


@pytest.mark.slow
def test_the_ubuntu_names_osworlds_steps_use(xdesktop_factory: Callable[..., Any]) -> None:
    sb = xdesktop_factory("ubuntu", options={"apps": []})
    # gnome-terminal returns at once and a "Terminal" window comes up, in the folder it was given.
    res = sb.exec(
        "mkdir -p ~/Desktop && gnome-terminal --maximize --working-directory=/home/user/Desktop"
        " -- sh -c 'pwd > ~/at.txt; sleep 60'"
    )
    assert res.exit_code == 0 and res.duration_s < 5, res
    at = Path(sb.conf.workspace) / "at.txt"
    assert wait_for(lambda: at.exists() and at.read_text() == "/home/user/Desktop\n"), res
    assert wait_for(lambda: [w["title"] for w in sb.call("windows", {})["windows"]] == ["Terminal"])
    assert sb.exec("gnome-terminal --no-such-option").exit_code == 2
    # killall by GNOME's server's name closes it; Ctrl+Alt+T opens a new one.
    assert sb.exec("killall gnome-terminal-server").exit_code == 0
    assert wait_for(lambda: sb.call("windows", {})["windows"] == [])
    sb.act(A.Hotkey(keys=("ctrl", "alt", "t")))
    assert wait_for(lambda: [w["title"] for w in sb.call("windows", {})["windows"]] == ["Terminal"])
    # The package database answers as on a machine.
    assert "ii  xterm" in sb.exec("dpkg -l xterm").stdout
    assert "xterm/" in sb.exec("apt list --installed 2>/dev/null | grep ^xterm/").stdout
    # GNOME's settings as OSWorld's image has them (machine.GSETTINGS), read and written by gsettings
    # through dconf; a reset brings the image's value back.
    key = "org.gnome.desktop.screensaver lock-enabled"
    assert sb.exec(f"gsettings get {key}").stdout == "false\n"
    assert sb.exec(f"gsettings set {key} true").exit_code == 0
    assert sb.exec(f"gsettings get {key}").stdout == "true\n"
    sb.reset()
    assert sb.exec(f"gsettings get {key}").stdout == "false\n"
