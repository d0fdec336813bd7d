"""A task whose download names a loopback or private address is refused through the API with a 400
naming the field, and nothing is stored (the host refuses it again at fetch time)."""

from __future__ import annotations

import pytest

from tests.webapp.api.helpers import bearer_client, send, task_body
from webapp.catalog.models import Task
from webapp.catalog.services import suite_get_or_create

pytestmark = pytest.mark.django_db


def test_the_api_refuses_a_task_downloading_from_loopback_naming_the_field(personas, monkeypatch):
    monkeypatch.delenv("SANDBOX_FETCH_ALLOW_NETS", raising=False)
    suite_get_or_create(slug="miniwob", name="MiniWoB++")
    body = task_body()
    body["spec"]["setup"] = [{"op": "fetch", "url": "http://127.0.0.1:6379/", "path": "x.txt"}]
    response = send(bearer_client(personas.admin), "POST", "/tasks", body)
    assert response.status_code == 400, response.content
    message = response.content.decode()
    assert "spec" in response.json()["errors"][0]["field"], message
    assert "setup[0] (fetch): url 'http://127.0.0.1:6379/' is refused" in message
    assert "127.0.0.1 is a loopback address" in message
    assert not Task.objects.filter(slug=body["slug"]).exists()
