"""Two real sandbox hosts on one machine serve one web app: they register, heartbeat, and lend sandboxes."""

from __future__ import annotations

import pytest
from django.test import override_settings

from agent_core.actions import Click
from sandbox_workers.client import HostUnreachable
from tests.procs import wait_for
from tests.sandbox_workers.hostproc import LIGHT_DESKTOP, TOKEN, HostProc
from webapp.sandboxes.models import Lease, Sandbox, SandboxHost
from webapp.sandboxes.services import SandboxUnavailable, lease_end, sandbox_admin, sandbox_lease

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def until(predicate, what: str) -> None:
    assert wait_for(predicate, timeout=60, interval=0.2), f"timed out waiting for {what}"


@override_settings(SANDBOX_HOST_TOKEN=TOKEN)
def test_two_hosts_register_and_lend_sandboxes_to_one_web_app(live_server, tmp_path):
    one_each = {"desktop": {**LIGHT_DESKTOP, "min_idle": 1, "max_total": 1}}
    hosts = [
        HostProc(name=name, var=tmp_path, profiles=one_each, web_url=live_server.url, slot_base=base)
        for name, base in (("host-a", 0), ("host-b", 50))
    ]
    for h in hosts:
        h.start()
    try:
        until(
            lambda: Sandbox.objects.filter(state="idle", profile="desktop").count() == 2,
            what="both hosts to report an idle desktop",
        )
        assert set(SandboxHost.objects.values_list("name", flat=True)) == {"host-a", "host-b"}

        # Each host has one desktop: two leases land on two different hosts.
        first, sb1 = sandbox_lease(profile="desktop", holder="episode:1", ttl_s=120)
        second, sb2 = sandbox_lease(profile="desktop", holder="episode:2", ttl_s=120)
        assert {first.sandbox.host.name, second.sandbox.host.name} == {"host-a", "host-b"}
        assert Lease.objects.filter(state="active").count() == 2
        assert sb1.act(Click(x=20, y=20)).screenshot.width == 1280
        with pytest.raises(SandboxUnavailable, match="no 'desktop' sandbox available"):
            sandbox_lease(profile="desktop", holder="episode:3", ttl_s=60)

        # An admin kills the sandbox under the first lease: the host replaces it and reports it.
        sandbox_admin(sandbox=first.sandbox, action="kill")
        until(
            lambda: (
                Lease.objects.get(pk=first.pk).state != "active"
                and Sandbox.objects.get(pk=first.sandbox.pk).state == "stopped"
            ),
            what="the kill to reach the web app",
        )
        lease_end(lease=second)
        assert Lease.objects.get(pk=second.pk).state == "released"
        until(
            lambda: Sandbox.objects.filter(state="idle", profile="desktop").count() == 2,
            what="both pools to refill",
        )

        # A host that goes away is skipped, then marked offline.
        hosts[0].stop()
        lease, sb = sandbox_lease(profile="desktop", holder="episode:4", ttl_s=60)
        assert lease.sandbox.host.name == "host-b"
        sb.release()
    finally:
        for h in hosts:
            h.stop()
    with pytest.raises(SandboxUnavailable):
        try:
            sandbox_lease(profile="desktop", holder="episode:5", ttl_s=60)
        except HostUnreachable as exc:  # must never leak out of sandbox_lease
            raise AssertionError(exc) from exc
