"""A sandbox host that gives its sandboxes no disk quota says why, and the Sandboxes page shows it."""

from __future__ import annotations

import pytest
from django.test import override_settings
from django.urls import reverse

from tests.webapp.sandboxes.test_heartbeat import TOKEN, beat, report
from webapp.sandboxes.models import SandboxHost


@pytest.mark.django_db
@override_settings(SANDBOX_HOST_TOKEN=TOKEN)
def test_a_host_without_disk_quotas_is_flagged_on_the_sandboxes_page(client_for, personas):
    why = "the sandbox host does not run as root (a volume per sandbox needs it)"
    assert beat({**report(), "disk_quota": {"enabled": False, "reason": why}}).status_code == 200
    page = client_for("researcher").get(reverse("sandboxes:overview")).content.decode()
    assert f"No disk quota for its sandboxes: {why}" in page

    assert beat({**report(), "disk_quota": {"enabled": True, "reason": ""}}).status_code == 200
    assert SandboxHost.objects.get().report["disk_quota"] == {"enabled": True, "reason": ""}
    assert "no-disk-quota" not in client_for("researcher").get(reverse("sandboxes:overview")).content.decode()
