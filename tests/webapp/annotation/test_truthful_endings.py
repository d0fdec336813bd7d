"""A demonstration that ends without its annotator says why, truthfully, and at once (issue 34: an
OSWorld demonstration that failed in 0.07 s stayed "Preparing the sandbox…" for 100+ s, then "failed"
with no reason; a sandbox replaced under a connected annotator was recorded as lost "while nobody was
connected"). Without sandboxes: the host's side is its heartbeat (its lease and error reports); the
real desktop is in tests/e2e/test_tool_failure.py."""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from tests.conftest import Personas
from tests.factories import make_episode
from tests.webapp.annotation.test_pages_and_socket import _talk, published_task
from webapp.annotation.services import demo_prepare, demo_start, demos_reap
from webapp.episodes.models import Episode
from webapp.sandboxes.models import Lease, Sandbox
from webapp.sandboxes.services import host_heartbeat

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("no_celery")]


@override_settings(SANDBOX_HOST_TOKEN="t" * 20)
def test_a_preparation_that_fails_at_once_is_told_to_a_page_that_opens_after_it(personas: Personas) -> None:
    # No live host serves the task's profile: the worker fails the demonstration in a blink, before the
    # page's socket is open. The socket's first message says so, with the reason.
    demo = demo_start(task=published_task(), annotator=personas.annotator)
    demo_prepare(episode_id=demo.pk)
    demo.refresh_from_db()
    assert demo.status == "failed" and "no live host serves this profile" in demo.error
    code, got = _talk(demo.pk, personas.annotator, [])
    assert code is None and got[0]["type"] == "hello" and got[0]["status"] == "failed"
    assert got[0]["error"] == demo.error


def test_a_running_episode_says_no_error_in_its_hello(personas: Personas) -> None:
    episode = make_episode(task=published_task(), annotator=personas.annotator, finish=False)
    code, got = _talk(episode.pk, personas.annotator, [])
    assert got[0]["status"] == "running" and got[0]["error"] == ""


def test_a_task_whose_spec_no_longer_parses_fails_its_demonstration_instead_of_hanging(
    personas: Personas,
) -> None:
    demo = demo_start(task=published_task(), annotator=personas.annotator)
    type(demo.task).objects.filter(pk=demo.task_id).update(spec={"id": "broken"})
    demo_prepare(episode_id=demo.pk)
    demo.refresh_from_db()
    assert demo.status == "failed" and demo.error.startswith("the task's spec is invalid: ")


# --- the reaper's reasons ---------------------------------------------------------------------------


def _host(errors: list[dict[str, Any]]) -> Sandbox:
    host_heartbeat(
        report={
            "name": "reason-host",
            "api_url": "http://127.0.0.1:9",
            "profiles": {"desktop": {"provider": "xdesktop", "min_idle": 1, "max_total": 2}},
            "sandboxes": [],
            "leases": [],
            "errors": errors,
        }
    )
    from webapp.sandboxes.models import SandboxHost

    return Sandbox.objects.create(
        host=SandboxHost.objects.get(name="reason-host"),
        external_id="desktop-1",
        provider="xdesktop",
        profile="desktop",
        state="stopped",
    )


def _lost(personas: Personas, sandbox: Sandbox, state: str) -> Episode:
    episode = make_episode(task=published_task(), annotator=personas.annotator, finish=False)
    past = timezone.now() - timedelta(minutes=3)
    Episode.objects.filter(pk=episode.pk).update(
        prepared={"instruction": "x"}, started_at=past, sandbox=sandbox
    )
    Lease.objects.create(
        sandbox=sandbox,
        holder=f"episode:{episode.pk}",
        state=state,
        acquired_at=past,
        heartbeat_at=past,
        expires_at=past + timedelta(minutes=1),
        ended_at=past + timedelta(seconds=30),
    )
    return episode


def test_a_sandbox_that_broke_is_recorded_with_the_hosts_reason(personas: Personas) -> None:
    why = (
        "mcp_tools: the MCP server 'files' could not start: bwrap: Can't find source path: Permission denied"
    )
    sandbox = _host([{"at": time.time(), "sandbox": "desktop-1", "profile": "desktop", "message": why}])
    episode = _lost(personas, sandbox, Lease.State.BROKEN)
    assert demos_reap() == 1
    episode.refresh_from_db()
    assert episode.status == "failed"
    assert episode.error.startswith("the sandbox failed and its host ended the lease at ")
    assert episode.error.endswith(why) and "nobody was connected" not in episode.error


def test_a_lease_nobody_renewed_says_it_expired(personas: Personas) -> None:
    episode = _lost(personas, _host([]), Lease.State.EXPIRED)
    assert demos_reap() == 1
    episode.refresh_from_db()
    assert episode.error.startswith("the sandbox's lease expired at ")
    assert "nobody renewed it for" in episode.error
