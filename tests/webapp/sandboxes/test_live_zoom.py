"""Live pages know the area a MiniWoB++ task draws in (the browser test: tests/e2e/test_miniwob_zoom.py)."""

from __future__ import annotations

import json
import re

import pytest
from django.urls import reverse

from agent_core.suites.miniwob import VIEW_AREA, task_doc
from tests.factories import make_episode, make_task
from tests.webapp.annotation.conftest import NOTE_SPEC
from webapp.catalog.selectors import task_view_area
from webapp.episodes.models import Episode
from webapp.episodes.services import episode_finish
from webapp.sandboxes.models import Sandbox, SandboxHost

pytestmark = pytest.mark.django_db


def view_area(page: bytes) -> object:
    found = re.search(r'<script id="view-area" type="application/json">(.*?)</script>', page.decode(), re.S)
    assert found, "the page has no view-area"
    return json.loads(found[1])


def test_miniwob_pages_zoom_to_their_corner_and_desktops_do_not(client_for):
    miniwob = make_task(slug="miniwob/click-test", spec=task_doc("click-test"), platform="browser")
    desktop = make_task(slug="demo/note", spec=NOTE_SPEC, platform="desktop", env_profile="desktop")
    assert task_view_area(task=miniwob) == VIEW_AREA and task_view_area(task=desktop) is None
    host = SandboxHost.objects.create(name="h", api_url="http://127.0.0.1:1")
    sandbox = Sandbox.objects.create(host=host, external_id="b1", provider="browser", profile="browser",
                                     state="leased")  # fmt: skip
    live = reverse("sandboxes:live", args=[sandbox.pk])
    assert view_area(client_for("admin").get(live).content) is None  # nothing runs there yet
    for task, area in ((miniwob, VIEW_AREA), (desktop, None)):
        episode = make_episode(task=task, finish=False)
        Episode.objects.filter(pk=episode.pk).update(sandbox=sandbox)
        session = reverse("annotation:session", args=[episode.pk])
        assert view_area(client_for("admin").get(session).content) == area
        assert view_area(client_for("admin").get(live).content) == area
        episode_finish(episode=episode, reward=0.0)
