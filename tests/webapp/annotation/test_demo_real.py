"""Demonstrations through the real thing: a desktop sandbox host, the session recorder, the checker."""

from __future__ import annotations

import time
from typing import Any

import pytest
from django.test import override_settings

from tests.conftest import Personas
from tests.sandbox_workers.hostproc import TOKEN
from tests.webapp.annotation.conftest import note_reads
from webapp.annotation.services import DemoError, demo_prepare, demo_start
from webapp.annotation.session import LiveSession
from webapp.episodes.models import Episode, Step
from webapp.sandboxes.control import control_request
from webapp.sandboxes.models import ControlToken, Lease

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def keys(text: str, t0: float) -> list[dict[str, Any]]:
    events = []
    for i, ch in enumerate(text):
        if ch == "\n":
            events.append({"kind": "key", "key": "enter", "t": t0 + i * 0.05})
        else:
            events.append(
                {"kind": "key", "key": "space" if ch == " " else ch.lower(), "text": ch, "t": t0 + i * 0.05}
            )
    return events


def test_a_demonstration_records_merged_steps_and_submit_scores_it(
    started: Episode, personas: Personas
) -> None:
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        assert ControlToken.objects.get(sandbox=started.sandbox).user == personas.annotator
        session = LiveSession(episode_id=started.pk, user=personas.annotator)
        t0 = time.monotonic()
        session.set_thought("The terminal is open; I focus it first.")
        session.input(
            [
                {"kind": "down", "x": 640, "y": 360, "t": t0},
                {"kind": "up", "x": 641, "y": 360, "t": t0 + 0.08},
            ]
        )
        session.tick(t0 + 5)  # the repeat window has passed: the click is a step of its own
        session.input(keys("echo hello > note.txt\n", t0 + 6))
        steps = list(Step.objects.filter(episode=started).order_by("index"))
        assert [s.action["type"] for s in steps] == ["click", "type"]
        assert steps[0].thought == "The terminal is open; I focus it first."
        assert (steps[0].action["x"], steps[0].action["y"]) == (640, 360)
        assert steps[1].action["content"] == "echo hello > note.txt\n"
        assert all(s.actor == "human" and s.screenshot for s in steps)
        assert all((s.screen_width, s.screen_height) == (1280, 720) for s in steps)
        assert steps[1].screenshot.read()[:8] == b"\x89PNG\r\n\x1a\n"
        note_reads(started, "hello")
        episode = session.submit()
        session.close()
    assert episode.status == "finished" and episode.reward == 1.0, episode.check_details
    assert not Lease.objects.filter(holder=f"episode:{started.pk}", state="active").exists()
    # The screen the annotator ended on (after the typed command ran) is kept: replay's last frame.
    assert (episode.final_screen_width, episode.final_screen_height) == (1280, 720)
    final = episode.final_screenshot.read()
    assert final[:8] == b"\x89PNG\r\n\x1a\n" and episode.final_screenshot.name != steps[1].screenshot.name


def test_a_wrong_demonstration_scores_zero(started: Episode, personas: Personas) -> None:
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        session = LiveSession(episode_id=started.pk, user=personas.annotator)
        session.input(keys("echo goodbye > note.txt\n", time.monotonic()))
        note_reads(started, "goodbye")
        episode = session.submit()
    assert episode.status == "finished" and episode.reward == 0.0


def test_input_from_someone_without_control_is_refused_and_force_take_moves_it(
    started: Episode, personas: Personas
) -> None:
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        admin_session = LiveSession(episode_id=started.pk, user=personas.admin)
        with pytest.raises(DemoError, match="do not hold control"):
            admin_session.input([{"kind": "key", "key": "a", "text": "a", "t": time.monotonic()}])
        assert not Step.objects.filter(episode=started).exists()
        token = control_request(sandbox=started.sandbox, user=personas.admin)  # asks; the annotator holds it
        assert token.user == personas.annotator and token.requested_by == personas.admin
        token = control_request(sandbox=started.sandbox, user=personas.admin, force=True)
        assert token.user == personas.admin
        annotator_session = LiveSession(episode_id=started.pk, user=personas.annotator)
        with pytest.raises(DemoError, match="do not hold control"):
            annotator_session.input([{"kind": "key", "key": "a", "text": "a", "t": time.monotonic()}])


def test_a_fork_replays_the_first_steps_in_a_fresh_sandbox(
    started: Episode, personas: Personas, monkeypatch: pytest.MonkeyPatch
) -> None:
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        session = LiveSession(episode_id=started.pk, user=personas.annotator)
        session.input(keys("echo hello > note.txt\n", time.monotonic()))
        session.input(keys("rm note.txt\n", time.monotonic() + 3))
        note_reads(started, None)
        first = session.submit()
        assert first.reward == 0.0  # the note was removed again
        fork = demo_start(task=first.task, annotator=personas.annotator, fork_of=first, fork_step=1)
        fork = demo_prepare(episode_id=fork.pk)
        assert fork is not None and fork.status == "running", fork and fork.error
        replayed = list(Step.objects.filter(episode=fork))
        assert [s.action["content"] for s in replayed] == ["echo hello > note.txt\n"]
        assert replayed[0].info["replayed_from"] == Step.objects.get(episode=first, index=0).pk
        done = LiveSession(episode_id=fork.pk, user=personas.annotator).submit()
    assert done.reward == 1.0 and done.forked_from_id == first.pk and done.fork_step == 1


def test_tools_are_listed_and_a_tool_call_is_a_step_whose_errors_are_the_persons(
    started: Episode, personas: Personas
) -> None:
    """The Tools panel's calls through the real sandbox: the servers' own list; a call is a recorded step
    with its result; a tool's error or bad arguments come back as an error to the person, nothing
    recorded; a desktop has no game clock to change."""
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        session = LiveSession(episode_id=started.pk, user=personas.annotator)
        tools = {f"{t['server']}.{t['name']}": t for t in session.tools()}
        assert {"files.read_file", "files.write_file", "shell.run", "records.lookup"} <= set(tools)
        assert tools["records.lookup"]["input_schema"]["required"] == ["key"]
        result = session.tool_call("files", "write_file", {"path": "note.txt", "content": "hello\n"})
        assert result is not None and not result["is_error"], result
        note_reads(started, "hello")
        for server, tool, arguments, why in [
            ("records", "lookup", {"key": "nobody"}, "records.json' does not exist"),
            ("files", "read_file", {"path": "../../etc/passwd"}, "outside"),
            ("files", "read_file", {"nope": 1}, "path"),
            ("teleport", "go", {}, "teleport"),
        ]:
            with pytest.raises(DemoError, match=why):
                session.tool_call(server, tool, arguments)
        with pytest.raises(DemoError, match="arguments must be a JSON object"):
            session.tool_call("files", "read_file", ["note.txt"])
        with pytest.raises(DemoError, match="clock cannot change"):
            session.game_clock("realtime")
        with pytest.raises(DemoError, match="game clock must be one of step, realtime, half"):
            session.game_clock("fast")
        steps = list(Step.objects.filter(episode=started).order_by("index"))
        assert [(s.action["type"], s.actor) for s in steps] == [("mcp_call", "human")]
        assert steps[0].info["result"]["tool"] == "write_file" and steps[0].screenshot
        episode = session.submit()
        session.close()
    assert episode.status == "finished" and episode.reward == 1.0, episode.check_details
