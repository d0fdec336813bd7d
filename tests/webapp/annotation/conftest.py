"""A demonstration task and a real desktop sandbox host heartbeating into the live test server."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.test import override_settings

from tests.procs import wait_for
from tests.sandbox_workers.hostproc import LIGHT_DESKTOP, TOKEN, HostProc
from webapp.catalog.models import Task
from webapp.catalog.services import task_create
from webapp.sandboxes.models import Sandbox

# Write a word into a file from the terminal the sandbox opens with: a click, a run of typing, Enter.
NOTE_SPEC: dict[str, Any] = {
    "format": "flywheel-task/1",
    "id": "demo/write-note",
    "title": "Write a note",
    "instruction": "In the terminal, write the word hello into ~/note.txt.",
    "platform": "desktop",
    "profile": "desktop",
    "limits": {"max_steps": 20, "max_seconds": 300},
    "checker": {
        "checks": [
            {"probe": {"op": "file", "path": "note.txt"}, "metric": "exact_match", "expected": "hello"}
        ]
    },
}


@pytest.fixture
def no_celery(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Prepare tasks are recorded, not sent to Celery: the list of the episode ids queued."""
    queued: list[int] = []
    monkeypatch.setattr("webapp.annotation.services._enqueue_prepare", queued.append)
    return queued


def note_reads(episode: Any, text: str | None, timeout: float = 30) -> None:
    """Wait, as a person watching the screen would before they submit, until the shell has run the
    typed line: ~/note.txt holds `text` (None: there is no note). Typed keys are in when the step
    returns; the shell may run the line a moment later on a loaded machine."""
    from webapp.annotation.services import demo_env

    want = "" if text is None else text + "\n"
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        env = demo_env(episode=episode)
        found = wait_for(lambda: env.exec("cat note.txt 2>/dev/null").stdout == want, timeout, interval=0.2)
        assert found, f"note.txt never read {want!r}: {env.exec('cat note.txt').stdout!r}"


def note_task() -> Task:
    task = task_create(
        slug="demo/write-note",
        title="Write a note",
        instruction=NOTE_SPEC["instruction"],
        platform="desktop",
        env_profile="desktop",
        spec=NOTE_SPEC,
    )
    Task.objects.filter(pk=task.pk).update(is_published=True)
    task.refresh_from_db()
    return task


@contextmanager
def registered_host(
    live_server: Any, tmp_path: Any, *, name: str, profile: str, spec: dict[str, Any], slot_base: int
) -> Iterator[HostProc]:
    """A sandbox host with one warm sandbox of `profile`, registered with the test database."""
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        host = HostProc(
            name=name, var=tmp_path, profiles={profile: spec}, web_url=live_server.url, slot_base=slot_base
        )
        host.start()
        try:
            assert wait_for(
                lambda: Sandbox.objects.filter(state="idle", profile=profile).exists(),
                timeout=120,
                interval=0.3,
            ), f"no idle {profile} sandbox registered"
            yield host
        finally:
            host.stop()


@pytest.fixture
def desktop_host(live_server: Any, tmp_path: Any) -> Iterator[HostProc]:
    """A host with one warm xterm desktop (profile "desktop"), registered with the test database."""
    spec = {**LIGHT_DESKTOP, "min_idle": 1, "max_total": 2}
    with registered_host(
        live_server, tmp_path, name="demo-host", profile="desktop", spec=spec, slot_base=160
    ) as h:
        yield h


@pytest.fixture
def browser_host(live_server: Any, tmp_path: Any) -> Iterator[HostProc]:
    """A host with one warm browser sandbox (profile "browser"), registered with the test database."""
    spec = {"provider": "browser", "min_idle": 1, "max_total": 1}
    with registered_host(
        live_server, tmp_path, name="demo-browser-host", profile="browser", spec=spec, slot_base=272
    ) as h:
        yield h


@pytest.fixture
def started(desktop_host: Any, personas: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """A demonstration of the note task, prepared on a real sandbox (as the Celery task would); the
    annotator holds control, and her lease lets her open control tickets for its screen."""
    from webapp.annotation.services import demo_prepare, demo_start

    monkeypatch.setattr("webapp.annotation.services._enqueue_prepare", lambda episode_id: None)
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN):
        episode = demo_start(task=note_task(), annotator=personas.annotator)
        prepared = demo_prepare(episode_id=episode.pk)
    assert prepared is not None and prepared.status == "running", prepared and prepared.error
    return prepared
