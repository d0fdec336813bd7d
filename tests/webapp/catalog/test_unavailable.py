"""A task whose profile no sandbox host serves is imported, shown unavailable, and refused at every start."""

from __future__ import annotations

import html
import json
from datetime import timedelta
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from tests.agent_core.test_osworld_import import CALC_TASK
from tests.factories import make_task
from tests.webapp.api.helpers import bearer_client, send
from webapp.catalog.models import Task
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.rollouts.models import RolloutBatch
from webapp.sandboxes.models import SandboxHost

pytestmark = pytest.mark.django_db

SLUG = "osworld/libreoffice_calc/0bf05a7d-b28b-44d2-955a-50b41e24012a"
WHY = "no sandbox host serves profile 'office' now (a host started with SANDBOX_OFFICE=1 serves it)"


def host(*, profiles: tuple[str, ...], silent_s: float = 0) -> SandboxHost:
    """A host's row as its heartbeats leave it: what it serves and when it last spoke."""
    return SandboxHost.objects.create(
        name=f"host-{SandboxHost.objects.count()}",
        api_url="http://127.0.0.1:9",
        capacity={p: {"max_total": 1, "min_idle": 0} for p in profiles},
        last_heartbeat_at=timezone.now() - timedelta(seconds=silent_s),
    )


def text_of(response: Any) -> str:
    return html.unescape(response.content.decode())


def start_demo(client: Client, task: Task) -> Any:
    return client.post(reverse("annotation:start"), {"task": task.pk})


def launch(client: Client) -> Any:
    PolicyVersion.objects.get_or_create(name="oracle-v1", defaults={"backend": "oracle"})
    body = {"suite": "osworld-libreoffice_calc", "policy": "oracle-v1", "tasks": [SLUG], "seeds": [0]}
    return send(client, "POST", "/rollout-batches", body)


def test_an_office_task_with_no_host_serving_office_is_imported_marked_and_refused_at_start(
    client_for: Any, personas: Any
) -> None:
    admin = client_for("admin")
    host(profiles=("desktop", "browser"))  # a host is up, but not with office
    calc = SimpleUploadedFile("calc.json", json.dumps(CALC_TASK).encode(), "application/json")
    page = text_of(admin.post(reverse("catalog:osworld_upload"), {"files": [calc]}, follow=True))
    assert "Imported 1 of 1 OSWorld task files (1 new, 0 changed)." in page
    assert f"1 of them cannot be started yet: {WHY}." in page
    task = Task.objects.get(slug=SLUG)
    # Shown so: the Tasks page, the task's page, the API.
    listed = text_of(admin.get(reverse("catalog:task_list"), {"q": "0bf05a7d"}))
    assert 'data-testid="unavailable"' in listed and WHY in listed
    assert WHY in text_of(admin.get(reverse("catalog:task_detail", args=[task.pk])))
    api = bearer_client(personas.researcher)
    assert send(api, "GET", f"/tasks/{task.pk}").json()["unavailable"] == WHY
    # A demonstration is refused before anything is queued: no episode waits for a sandbox that cannot come.
    annotator = client_for("annotator")
    refused = start_demo(annotator, task)
    assert refused.status_code == 409
    assert f"task {SLUG} is unavailable: {WHY}" in text_of(refused)
    # A rollout batch of it too (published, so that this is the only reason left).
    Task.objects.filter(pk=task.pk).update(is_published=True)
    refused = launch(api)
    assert refused.status_code == 400
    assert refused.json()["errors"] == [{"field": "tasks", "message": f"unavailable ({WHY}): {SLUG}"}]
    assert not Episode.objects.exists() and not RolloutBatch.objects.exists()

    # A host that serves office is up: startable, and no longer marked.
    office = host(profiles=("office",))
    listed = text_of(admin.get(reverse("catalog:task_list"), {"q": "0bf05a7d"}))
    assert SLUG in listed and 'data-testid="unavailable"' not in listed
    assert send(api, "GET", f"/tasks/{task.pk}").json()["unavailable"] == ""
    assert launch(api).status_code == 202
    Task.objects.filter(pk=task.pk).update(is_published=False)  # back to unproven: demonstrable
    started = start_demo(annotator, task)
    assert started.status_code == 302 and "/annotate/episodes/" in started["Location"]
    # It falls silent past the grace period: unavailable again.
    SandboxHost.objects.filter(pk=office.pk).update(last_heartbeat_at=timezone.now() - timedelta(minutes=5))
    assert start_demo(annotator, task).status_code == 409


def test_a_task_on_a_built_in_profile_stays_startable_while_its_host_restarts(client_for: Any) -> None:
    # desktop and browser are what every host serves by default: their episodes wait for a sandbox.
    task = make_task(platform="desktop", env_profile="desktop")
    assert SandboxHost.objects.count() == 0
    page = text_of(client_for("admin").get(reverse("catalog:task_detail", args=[task.pk])))
    assert 'data-testid="unavailable"' not in page
