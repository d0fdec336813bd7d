"""Hosts heartbeat into the web app; the web app mirrors their sandboxes and leases."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.test import Client, override_settings
from django.utils import timezone

from webapp.sandboxes.models import Lease, Sandbox, SandboxHost
from webapp.sandboxes.services import hosts_mark_offline

TOKEN = "host-token-for-tests-0123456789"


def report(*, leases: list[dict] | None = None, sandboxes: list[dict] | None = None) -> dict:
    now = time.time()
    return {
        "name": "host-a",
        "api_url": "http://127.0.0.1:8101",
        "version": "1",
        "profiles": {"desktop": {"provider": "xdesktop", "min_idle": 1, "max_total": 4,
                                 "states": {"idle": 1}}},
        "sandboxes": sandboxes
        if sandboxes is not None
        else [
            {"id": "desktop-1", "profile": "desktop", "provider": "xdesktop", "state": "leased",
             "latency_ms": {"act": {"n": 3, "p50": 9.5, "p95": 12.0}}},
            {"id": "desktop-2", "profile": "desktop", "provider": "xdesktop", "state": "idle"},
        ],
        "leases": leases
        if leases is not None
        else [
            {"id": "L1", "sandbox_id": "desktop-1", "holder": "episode:1", "acquired_at": now,
             "expires_at": now + 60, "heartbeat_at": now}
        ],
        "errors": [{"at": now, "sandbox": "desktop-9", "profile": "desktop",
                    "message": "start failed: boom"}],
        "counters": {"started": 3, "start_failed": 1, "replaced": 0, "expired": 0},
        "lease_latency_ms": {"all": {"n": 1, "p50": 0.4, "p95": 0.4}},
    }  # fmt: skip


def beat(payload: dict, token: str | None = TOKEN):
    headers = {"HTTP_AUTHORIZATION": f"Bearer {token}"} if token else {}
    url = "/api/v1/sandbox-hosts/heartbeat"
    return Client().post(url, payload, content_type="application/json", **headers)


@pytest.mark.django_db
@override_settings(SANDBOX_HOST_TOKEN=TOKEN)
def test_heartbeat_needs_the_host_token():
    assert beat(report(), token=None).status_code == 401
    assert beat(report(), token="wrong-token-wrong-token").status_code == 401
    assert not SandboxHost.objects.exists()


@pytest.mark.django_db
@override_settings(SANDBOX_HOST_TOKEN="")
def test_heartbeat_is_refused_when_no_host_token_is_configured():
    assert beat(report(), token="anything-at-all-1234").status_code == 401


@pytest.mark.django_db
@override_settings(SANDBOX_HOST_TOKEN=TOKEN)
def test_heartbeat_registers_the_host_and_mirrors_sandboxes_and_leases():
    resp = beat(report())
    assert resp.status_code == 200, resp.content
    host = SandboxHost.objects.get(name="host-a")
    assert host.status == "online" and host.is_alive(now=timezone.now())
    assert host.report["counters"]["start_failed"] == 1
    states = dict(Sandbox.objects.values_list("external_id", "state"))
    assert states == {"desktop-1": "leased", "desktop-2": "idle"}
    lease = Lease.objects.get(external_id="L1")
    assert lease.state == "active" and lease.holder == "episode:1"
    assert lease.sandbox.external_id == "desktop-1"
    assert Sandbox.objects.get(external_id="desktop-1").latency["act"]["p50"] == 9.5

    # The host released L1, a new lease L2 is on the same sandbox, and desktop-2 is gone.
    now = time.time()
    second = report(
        leases=[{"id": "L2", "sandbox_id": "desktop-1", "holder": "user:3", "acquired_at": now,
                 "expires_at": now + 60, "heartbeat_at": now}],
        sandboxes=[{"id": "desktop-1", "profile": "desktop", "provider": "xdesktop", "state": "leased"}],
    )  # fmt: skip
    assert beat(second).status_code == 200
    assert Lease.objects.get(external_id="L1").state == "released"
    assert Lease.objects.get(external_id="L2").state == "active"
    assert Sandbox.objects.get(external_id="desktop-2").state == "stopped"


@pytest.mark.django_db
@override_settings(SANDBOX_HOST_TOKEN=TOKEN)
def test_a_broken_lease_is_recorded_as_broken():
    now = time.time()
    assert beat(report()).status_code == 200
    broken = report(
        leases=[{"id": "L1", "sandbox_id": "desktop-1", "holder": "episode:1", "acquired_at": now,
                 "expires_at": now + 60, "heartbeat_at": now, "broken": "health check failed: Xvfb died"}]
    )  # fmt: skip
    assert beat(broken).status_code == 200
    assert Lease.objects.get(external_id="L1").state == "broken"


@pytest.mark.django_db
@override_settings(SANDBOX_HOST_TOKEN=TOKEN)
def test_malformed_heartbeat_gets_a_400_naming_the_field():
    bad = report()
    bad["api_url"] = "ftp://nope"
    resp = beat(bad)
    assert resp.status_code == 400 and "api_url" in resp.json()["detail"]


@pytest.mark.django_db
@override_settings(SANDBOX_HOST_TOKEN=TOKEN)
def test_silent_hosts_go_offline():
    assert beat(report()).status_code == 200
    assert hosts_mark_offline(now=timezone.now() + timedelta(seconds=5)) == 0
    assert hosts_mark_offline(now=timezone.now() + timedelta(seconds=120)) == 1
    assert SandboxHost.objects.get().status == "offline"


@pytest.mark.django_db
@override_settings(SANDBOX_HOST_TOKEN=TOKEN)
def test_sandboxes_page_shows_hosts_errors_and_latency_and_only_admins_get_buttons(client_for):
    assert beat(report()).status_code == 200
    page = client_for("researcher").get("/sandboxes/")
    html = page.content.decode()
    assert page.status_code == 200
    assert "host-a" in html and "desktop-1" in html and "episode:1" in html
    assert "start failed: boom" in html and "9.5 / 12.0 ms" in html
    assert 'data-testid="kill"' not in html
    admin_html = client_for("admin").get("/sandboxes/").content.decode()
    assert 'data-testid="kill"' in admin_html and 'data-testid="reset"' in admin_html
    # The htmx poll gets the fragment only.
    fragment = client_for("admin").get("/sandboxes/", HTTP_HX_REQUEST="true").content.decode()
    assert fragment.lstrip().startswith('<div id="live"') and "<html" not in fragment
    for who in ("annotator", "reviewer", "outsider"):
        assert client_for(who).get("/sandboxes/").status_code == 403
    assert client_for(None).get("/sandboxes/").status_code == 302


@pytest.mark.django_db
@override_settings(SANDBOX_HOST_TOKEN=TOKEN)
def test_only_admins_may_reset_or_kill_and_an_unreachable_host_is_reported(client_for):
    assert beat(report()).status_code == 200
    sandbox = Sandbox.objects.get(external_id="desktop-1")
    url = f"/sandboxes/{sandbox.pk}/kill/"
    assert client_for("researcher").post(url).status_code == 403
    resp = client_for("admin").post(url, follow=True)
    # Nothing listens on host-a's port: the admin is told, nothing crashes.
    assert "Could not kill" in resp.content.decode() and "unreachable" in resp.content.decode()


@pytest.mark.django_db
@override_settings(SANDBOX_HOST_TOKEN=TOKEN)
def test_a_heartbeat_assembled_before_a_lease_was_taken_does_not_end_it():
    from datetime import timedelta

    assert beat(report(leases=[])).status_code == 200
    sandbox = Sandbox.objects.get(external_id="desktop-1")
    now = timezone.now()
    # The web app just leased desktop-1 (its row has the user), and the host's next report predates it.
    fresh = Lease.objects.create(sandbox=sandbox, external_id="L9", holder="episode:9", acquired_at=now,
                                 heartbeat_at=now, expires_at=now + timedelta(minutes=5))  # fmt: skip
    assert beat(report(leases=[])).status_code == 200
    assert Lease.objects.get(pk=fresh.pk).state == "active"
    # Long after it was taken, a report without it means the host no longer holds it.
    Lease.objects.filter(pk=fresh.pk).update(acquired_at=now - timedelta(minutes=1))
    assert beat(report(leases=[])).status_code == 200
    assert Lease.objects.get(pk=fresh.pk).state == "released"
