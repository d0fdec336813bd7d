"""Environment health through the real thing: a sandbox host heartbeating into the live server, a lease
taken and given back, the figures the dashboard and /metrics show following along."""

from __future__ import annotations

import pytest
from django.test import override_settings
from prometheus_client.parser import text_string_to_metric_families

from tests.procs import wait_for
from tests.sandbox_workers.hostproc import LIGHT_DESKTOP, TOKEN, HostProc
from tests.webapp.api.helpers import bearer_client
from webapp.dashboards.health import health_now, health_series
from webapp.dashboards.services import health_sample_take
from webapp.sandboxes.models import Sandbox
from webapp.sandboxes.services import lease_end, sandbox_lease

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

HOST = "dash-health-host"


def until(predicate, what: str, timeout: float = 120):
    found = wait_for(predicate, timeout=timeout, interval=0.3)
    assert found, f"timed out waiting for {what}"
    return found


def host_row() -> dict | None:
    return next((h for h in health_now()["hosts"] if h["host"] == HOST), None)


def profile_row() -> dict | None:
    return next((p for p in health_now()["profiles"] if p["profile"] == "desktop"), None)


def test_health_follows_a_real_host_through_a_lease(live_server, tmp_path, personas) -> None:
    profiles = {"desktop": {**LIGHT_DESKTOP, "min_idle": 1, "max_total": 2}}
    with override_settings(SANDBOX_HOST_TOKEN=TOKEN, SANDBOX_HOST_GRACE_SECONDS=3):
        host = HostProc(name=HOST, var=tmp_path, profiles=profiles, web_url=live_server.url, slot_base=190)
        host.start()
        try:
            until(lambda: Sandbox.objects.filter(host__name=HOST, state="idle").exists(), "an idle sandbox")
            before = until(lambda: (r := host_row()) and r["started"] >= 1 and r, "the host's counters")
            assert before["alive"] is True
            assert before["leased"] == 0 and before["utilisation"] == 0.0
            assert profile_row()["capacity"] == 2

            lease, leased = sandbox_lease(profile="desktop", holder="test:dashboards")
            try:
                during = until(
                    lambda: (r := host_row()) and r["leased"] == 1 and r["lease_wait_n"] >= 1 and r,
                    "the lease in a heartbeat",
                )
                assert during["utilisation"] == pytest.approx(1 / during["live"])
                assert during["lease_wait_p50"] is not None and during["lease_wait_p50"] >= 0
                health_sample_take()
                resets_before = profile_row()["reset_n"]
                lease_end(lease=lease)
            finally:
                leased.client.close()
            after = until(
                lambda: (r := profile_row()) and r["reset_n"] > resets_before and r["leased"] == 0 and r,
                "the reset after the release",
            )
            assert after["reset_p50"] > 0 and after["reset_p95"] >= after["reset_p50"]
            health_sample_take()

            series = health_series(since_hours=1)["series"]["utilisation_by_host"][HOST]
            assert series[0] == pytest.approx(during["utilisation"]) and series[-1] == 0.0

            scrape = bearer_client(personas.researcher).get("/metrics").content.decode()
            samples = {
                (s.name, tuple(sorted(s.labels.items()))): s.value
                for family in text_string_to_metric_families(scrape)
                for s in family.samples
            }
            assert samples[("flywheel_sandbox_host_up", (("host", HOST),))] == 1
            started = samples[("flywheel_sandbox_events_total", (("event", "started"), ("host", HOST)))]
            assert started >= before["started"]
        finally:
            host.stop()
        # A host that stopped heartbeating is shown silent, and leaves the profiles' pools.
        until(lambda: (r := host_row()) and not r["alive"], "the stopped host to go silent", timeout=30)
        assert profile_row() is None or profile_row()["live"] == 0
