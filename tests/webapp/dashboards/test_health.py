"""Environment health from hosts' heartbeats and ended episodes; queue depth on the real Redis broker."""

from __future__ import annotations

import uuid
from datetime import timedelta

import pytest
import redis
from django.conf import settings
from django.test import override_settings
from django.utils import timezone

from tests.factories import make_task
from tests.webapp.dashboards.conftest import ended, heartbeat
from webapp.celery import QUEUES, app
from webapp.dashboards.health import health_now, health_series, queue_depths
from webapp.dashboards.models import HealthSample
from webapp.dashboards.services import health_sample_take, health_samples_prune
from webapp.dashboards.tasks import health_sample
from webapp.sandboxes.models import Sandbox, SandboxHost

pytestmark = pytest.mark.django_db

DOWN = "redis://127.0.0.1:1/0"  # nothing listens on port 1


def by(rows: list[dict], key: str) -> dict[str, dict]:
    return {r[key]: r for r in rows}


def reset(n: int, p50: float, p95: float) -> dict:
    return {"reset": {"n": float(n), "p50": p50, "p95": p95}}


@pytest.fixture
def two_hosts() -> tuple[SandboxHost, SandboxHost]:
    a = heartbeat(
        "host-a",
        sandboxes=[
            {
                "profile": "desktop",
                "state": "leased",
                "latency": reset(3, 400.0, 900.0),
                "provider": "xdesktop",
            },
            {
                "profile": "desktop",
                "state": "idle",
                "latency": reset(1, 800.0, 800.0),
                "provider": "xdesktop",
            },
            {"profile": "miniwob", "state": "leased"},
            {"profile": "miniwob", "state": "idle"},
        ],
        counters={"started": 8, "start_failed": 1, "replaced": 1, "expired": 2},
        lease_wait={"n": 12.0, "p50": 11.5, "p95": 40.0},
        profiles={"desktop": {"max_total": 3}, "miniwob": {"max_total": 4}},
    )
    b = heartbeat(
        "host-b",
        sandboxes=[{"profile": "miniwob", "state": "leased"}],
        counters={"started": 1},
        profiles={"miniwob": {"max_total": 2}},
    )
    return a, b


def test_health_per_host_from_its_heartbeat(two_hosts) -> None:
    hosts = by(health_now()["hosts"], "host")
    a = hosts["host-a"]
    assert a["alive"] is True
    assert (a["live"], a["leased"], a["utilisation"]) == (4, 2, 0.5)
    assert (a["lease_wait_n"], a["lease_wait_p50"], a["lease_wait_p95"]) == (12, 11.5, 40.0)
    # n-weighted: (3·400 + 1·800) / 4 and (3·900 + 1·800) / 4
    assert (a["reset_n"], a["reset_p50"], a["reset_p95"]) == (4, 500.0, 875.0)
    assert (a["started"], a["start_failed"], a["replaced"], a["expired"]) == (8, 1, 1, 2)
    # (failed starts + replaced) over every start tried: 2 of 9.
    assert a["crash_rate"] == 2 / 9 and a["state"] == "degraded"
    b = hosts["host-b"]
    assert (b["utilisation"], b["crash_rate"], b["lease_wait_p50"], b["reset_p50"]) == (1.0, 0.0, None, None)


def test_health_per_profile_over_alive_hosts(two_hosts) -> None:
    profiles = by(health_now()["profiles"], "profile")
    assert (profiles["miniwob"]["live"], profiles["miniwob"]["leased"], profiles["miniwob"]["capacity"]) == (
        3,
        2,
        6,
    )
    assert profiles["desktop"]["utilisation"] == 0.5
    assert profiles["desktop"]["reset_p95"] == 875.0
    # host-b goes silent: its sandboxes no longer count towards the profile.
    SandboxHost.objects.filter(name="host-b").update(last_heartbeat_at=timezone.now() - timedelta(minutes=5))
    health = health_now()
    assert by(health["hosts"], "host")["host-b"]["alive"] is False
    miniwob = by(health["profiles"], "profile")["miniwob"]
    assert (miniwob["live"], miniwob["leased"], miniwob["capacity"]) == (2, 1, 4)


def test_stopped_sandboxes_are_not_in_the_pool(two_hosts) -> None:
    heartbeat("host-b", sandboxes=[], counters={"started": 1}, profiles={"miniwob": {"max_total": 2}})
    assert Sandbox.objects.get(host__name="host-b").state == Sandbox.State.STOPPED
    b = by(health_now()["hosts"], "host")["host-b"]
    assert (b["live"], b["leased"], b["utilisation"]) == (0, 0, None)


def test_env_error_rate_per_profile_and_host_over_the_last_day(two_hosts) -> None:
    desktop_task = make_task(slug="d/t", platform="desktop", env_profile="desktop")
    miniwob_task = make_task(slug="m/t", env_profile="miniwob")
    on_a = Sandbox.objects.filter(host__name="host-a", profile="desktop").first()
    on_b = Sandbox.objects.get(host__name="host-b")
    ended(desktop_task, reward=1.0, sandbox=on_a)
    ended(desktop_task, env_error=True, sandbox=on_a)
    ended(desktop_task, reward=0.0, sandbox=on_a)
    ended(desktop_task, env_error=True, sandbox=on_a, at=timezone.now() - timedelta(hours=25))  # too old
    ended(miniwob_task, reward=1.0, sandbox=on_b)
    health = health_now()
    desktop = by(health["profiles"], "profile")["desktop"]
    assert (desktop["ended_24h"], desktop["env_errors_24h"], desktop["env_error_rate"]) == (3, 1, 1 / 3)
    assert by(health["profiles"], "profile")["miniwob"]["env_error_rate"] == 0.0
    hosts = by(health["hosts"], "host")
    assert (hosts["host-a"]["ended_24h"], hosts["host-a"]["env_errors_24h"]) == (3, 1)
    assert (hosts["host-b"]["ended_24h"], hosts["host-b"]["env_error_rate"]) == (1, 0.0)


def test_no_hosts_no_episodes() -> None:
    health = health_now()
    assert health["hosts"] == [] and health["profiles"] == []
    assert [q["queue"] for q in health["queues"]] == list(QUEUES)


# --- Celery queues on the real broker --------------------------------------------------------------


@pytest.fixture
def scratch_queue():
    """A queue name no worker listens on, removed afterwards (priority lists included)."""
    name = f"dash-test-{uuid.uuid4().hex[:8]}"
    yield name
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    client.delete(name, *(f"{name}\x06\x16{p}" for p in (3, 6, 9)))
    client.close()


def test_queue_depth_rises_with_messages_sent_to_the_real_broker(scratch_queue) -> None:
    assert queue_depths(queues=[scratch_queue]) == {scratch_queue: 0}
    health_sample.apply_async(queue=scratch_queue)
    health_sample.apply_async(queue=scratch_queue)
    assert queue_depths(queues=[scratch_queue]) == {scratch_queue: 2}
    # A prioritised message lands in its own list, which the depth counts too.
    health_sample.apply_async(queue=scratch_queue, priority=9)
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    assert client.llen(f"{scratch_queue}\x06\x169") == 1
    client.close()
    assert queue_depths(queues=[scratch_queue]) == {scratch_queue: 3}


def test_every_configured_queue_is_read_from_the_broker() -> None:
    depths = queue_depths()
    assert list(depths) == list(QUEUES)
    assert all(isinstance(d, int) and d >= 0 for d in depths.values()), depths


def test_broker_down_gives_unavailable_not_a_crash(two_hosts) -> None:
    with override_settings(CELERY_BROKER_URL=DOWN):
        assert queue_depths() == dict.fromkeys(QUEUES)
        health = health_now()
    assert health["broker"] == "unavailable"
    assert all(q["depth"] is None for q in health["queues"])
    assert by(health["hosts"], "host")["host-a"]["live"] == 4  # the rest is still there


# --- samples over time ------------------------------------------------------------------------------


def test_samples_are_taken_pruned_after_48_hours_and_read_as_series(two_hosts) -> None:
    now = timezone.now()
    old = health_sample_take(now=now - timedelta(hours=49))
    for minutes in (60, 30, 0):
        health_sample_take(now=now - timedelta(minutes=minutes))
    assert health_samples_prune(now=now) == 1
    assert not HealthSample.objects.filter(pk=old.pk).exists()
    SandboxHost.objects.filter(name="host-b").update(last_heartbeat_at=now)
    data = health_series(since_hours=0.75, now=now + timedelta(seconds=1))
    assert len(data["labels"]) == 2
    assert data["series"]["utilisation_by_host"]["host-a"] == [0.5, 0.5]
    assert data["series"]["crash_rate_by_host"]["host-a"] == [2 / 9, 2 / 9]
    assert data["series"]["reset_p95_by_profile"]["desktop"] == [875.0, 875.0]
    assert set(data["series"]["queue_depth"]) == set(QUEUES)


def test_series_are_thinned_to_at_most_max_points(monkeypatch) -> None:
    import webapp.dashboards.health as health

    monkeypatch.setattr(health, "MAX_POINTS", 5)
    now = timezone.now()
    samples = [
        HealthSample.objects.create(
            taken_at=now - timedelta(minutes=i), data={"queues": [{"queue": "q", "depth": i}]}
        )
        for i in range(20)
    ]
    data = health_series(since_hours=1, now=now)
    assert 5 <= len(data["labels"]) <= 6
    assert data["labels"][-1] == samples[0].taken_at.isoformat()  # the newest is always kept
    assert data["series"]["queue_depth"]["q"][-1] == 0


def test_a_missing_key_in_an_old_sample_is_a_gap() -> None:
    now = timezone.now()
    HealthSample.objects.create(
        taken_at=now - timedelta(minutes=2), data={"hosts": [{"host": "h", "crash_rate": 0.1}]}
    )
    HealthSample.objects.create(
        taken_at=now - timedelta(minutes=1), data={"hosts": [{"host": "g", "crash_rate": 0.2}]}
    )
    series = health_series(since_hours=1, now=now)["series"]["crash_rate_by_host"]
    assert series == {"h": [0.1, None], "g": [None, 0.2]}


def test_the_beat_task_samples_and_prunes_and_runs_on_the_sandboxes_queue(two_hosts) -> None:
    HealthSample.objects.create(taken_at=timezone.now() - timedelta(hours=50), data={})
    sample_id = health_sample.apply().get()
    assert list(HealthSample.objects.values_list("pk", flat=True)) == [sample_id]
    assert by(HealthSample.objects.get().data["hosts"], "host")["host-a"]["leased"] == 2
    route = app.amqp.router.route({}, "webapp.dashboards.tasks.health_sample")
    assert route["queue"].name == "sandboxes"
    beat = [
        e for e in app.conf.beat_schedule.values() if e["task"] == "webapp.dashboards.tasks.health_sample"
    ]
    assert [e["schedule"] for e in beat] == [30.0]


# --- a host's state says whether its sandboxes live, not only whether it heartbeats (issue 34) -----


def test_a_heartbeating_host_whose_sandboxes_fail_to_start_is_failing_not_alive(client_for) -> None:
    # As on the fresh machine of issue 34: 72 failed starts beside 21 that worked and 2 crashes.
    heartbeat("fresh", sandboxes=[], counters={"started": 21, "start_failed": 72, "replaced": 2})
    row = by(health_now()["hosts"], "host")["fresh"]
    assert row["alive"] is True and row["state"] == "failing"
    assert 0 <= row["crash_rate"] <= 1 and row["crash_rate"] == 74 / 93
    assert row["state_detail"] == (
        "74 of 93 sandbox starts since the host started failed or crashed later "
        "(72 failed to start, 2 replaced)"
    )
    page = client_for("researcher").get("/dashboards/health/").content.decode()
    assert 'data-testid="host-state">failing</span>' in page and ">alive<" not in page


def test_host_states_from_healthy_to_silent() -> None:
    heartbeat("fine", sandboxes=[], counters={"started": 40, "replaced": 1})
    heartbeat("fresh", sandboxes=[], counters={})
    heartbeat("shaky", sandboxes=[], counters={"started": 9, "start_failed": 1, "replaced": 1})
    heartbeat("gone", sandboxes=[], counters={"started": 3})
    SandboxHost.objects.filter(name="gone").update(last_heartbeat_at=timezone.now() - timedelta(minutes=5))
    states = {h["host"]: h["state"] for h in health_now()["hosts"]}
    assert states == {"fine": "healthy", "fresh": "healthy", "shaky": "degraded", "gone": "silent"}


def test_a_host_that_recovered_is_judged_on_the_last_minutes_not_its_whole_life() -> None:
    now = timezone.now()
    heartbeat("mended", sandboxes=[], counters={"started": 30, "start_failed": 72})
    heartbeat("restarted", sandboxes=[], counters={"started": 1, "start_failed": 4})
    before = [
        {"host": "mended", "started": 10, "start_failed": 72, "replaced": 0},
        {"host": "restarted", "started": 50, "start_failed": 0, "replaced": 0},
    ]
    HealthSample.objects.create(taken_at=now - timedelta(minutes=16), data={"hosts": before})
    rows = by(health_now(now=now)["hosts"], "host")
    # 20 starts since, none failed: healthy again, though its whole life's rate is still high.
    assert rows["mended"]["state"] == "healthy" and rows["mended"]["crash_rate"] > 0.5
    assert rows["mended"]["state_detail"].startswith("0 of 20 sandbox starts since ")
    # Its counters went back: it restarted since the sample, so it is judged since it started.
    assert rows["restarted"]["state"] == "failing"
    assert "since the host started" in rows["restarted"]["state_detail"]
