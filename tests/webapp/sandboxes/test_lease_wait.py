"""sandbox_lease waits for a sandbox when asked to, even where the database's idle count is stale.

The hosts are faked at one boundary (their HTTP client); tests/webapp/rollouts/test_rollouts_real.py
leases through real hosts (its publication checks hit this case under load: the row said idle while the
host's only free sandboxes were still resetting from the previous check).
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.utils import timezone

from webapp.sandboxes import services
from webapp.sandboxes.models import Sandbox, SandboxHost
from webapp.sandboxes.services import HostUnavailable, SandboxUnavailable, sandbox_lease

pytestmark = pytest.mark.django_db


class FakeHost:
    """A host whose sandboxes are all resetting: a no-wait ask is refused, a waiting one is granted."""

    def __init__(self, name: str, *, frees: bool) -> None:
        self.name, self.frees, self.asks = name, frees, []

    def acquire(self, profile, *, holder, ttl_s, wait_s):
        self.asks.append(wait_s)
        if wait_s > 0 and self.frees:
            info = SimpleNamespace(id=f"lease-{self.name}", sandbox_id=f"sb-{self.name}", provider="xdesktop",
                                   expires_at=timezone.now().timestamp() + ttl_s)  # fmt: skip
            return SimpleNamespace(info=info)
        raise HostUnavailable(f"no idle '{profile}' sandbox on this host (1 resetting; max 1)")

    def close(self) -> None:
        pass


@pytest.fixture
def hosts(monkeypatch):
    fakes: dict[str, FakeHost] = {}

    def make(name: str, *, idle_row: bool, frees: bool) -> FakeHost:
        host = SandboxHost.objects.create(
            name=name,
            api_url="http://127.0.0.1:9",
            capacity={"desktop": {}},
            last_heartbeat_at=timezone.now(),
        )
        if idle_row:  # what the last heartbeat said
            Sandbox.objects.create(host=host, external_id=f"old-{name}", profile="desktop", state="idle",
                                   provider="xdesktop")  # fmt: skip
        fakes[name] = FakeHost(name, frees=frees)
        return fakes[name]

    monkeypatch.setattr(services, "host_client", lambda host: fakes[host.name])
    return make


def test_a_host_shown_idle_that_has_none_free_is_waited_on_when_asked_to_wait(hosts):
    host = hosts("stale", idle_row=True, frees=True)
    lease, leased = sandbox_lease(profile="desktop", holder="verify:x", wait_s=30)
    assert leased.info.sandbox_id == "sb-stale" and lease.sandbox.host.name == "stale"
    assert Sandbox.objects.get(pk=lease.sandbox.pk).state == "leased"
    assert host.asks[0] == 0 and 0 < host.asks[1] <= 30  # first without waiting, then the time left


def test_without_a_wait_a_host_with_none_free_is_asked_once(hosts):
    host = hosts("stale", idle_row=True, frees=True)
    with pytest.raises(SandboxUnavailable, match="stale: no idle 'desktop' sandbox"):
        sandbox_lease(profile="desktop", holder="verify:x")
    assert host.asks == [0]


def test_a_host_shown_idle_is_asked_before_one_shown_full_is_waited_on(hosts):
    full = hosts("a-full", idle_row=False, frees=True)
    idle = hosts("b-idle", idle_row=True, frees=False)
    lease, _ = sandbox_lease(profile="desktop", holder="verify:x", wait_s=30)
    # The idle-looking host first, without a wait; it had none: the full-looking one is waited on.
    assert idle.asks[0] == 0 and full.asks and full.asks[0] > 0
    assert lease.sandbox.host.name == "a-full"
    assert idle.asks == [0]  # not waited on too: the other granted one


@pytest.mark.django_db(transaction=True)
def test_a_lease_commits_while_a_heartbeat_of_its_host_is_in_flight(hosts):
    """A heartbeat locks its host's row, then its sandboxes; a lease inserts a sandbox row whose foreign
    key PostgreSQL checks at commit with a key-share lock on that host row. With the heartbeat's lock
    FOR UPDATE the two waited on each other (a deadlock turned an oracle episode into an env_error);
    FOR NO KEY UPDATE does not block a foreign-key check."""
    from django.db import connection, transaction

    if connection.vendor != "postgresql":
        pytest.skip("row locks and deferred foreign-key checks are PostgreSQL's")
    import threading
    import time

    hosts("busy", idle_row=False, frees=True)
    report = {
        "name": "busy",
        "api_url": "http://127.0.0.1:9",
        "profiles": {"desktop": {}},
        "sandboxes": [],
        "leases": [],
    }
    locked, done = threading.Event(), threading.Event()

    def heartbeat_held_open() -> None:
        try:
            with transaction.atomic():
                services.host_heartbeat(report=report)
                locked.set()
                done.wait(6)  # the heartbeat's transaction is still open: its locks are held
        finally:
            connection.close()

    beat = threading.Thread(target=heartbeat_held_open)
    beat.start()
    try:
        assert locked.wait(10), "the heartbeat never ran"
        t0 = time.monotonic()
        lease, _ = sandbox_lease(profile="desktop", holder="episode:1", wait_s=5)
        waited = time.monotonic() - t0
    finally:
        done.set()
        beat.join(10)
    assert lease.pk and waited < 3, f"the lease waited {waited:.1f} s on the heartbeat's lock"


def test_a_lease_the_hosts_heartbeat_recorded_first_is_adopted_not_inserted_twice(hosts, personas):
    """The host grants a lease and its next heartbeat, reporting it, lands before the web app records the
    grant: the heartbeat records the lease, and the lease's own write must take that row over. It inserted
    a second active lease for the sandbox instead: a unique violation that failed a rollout episode."""
    host = hosts("quick", idle_row=False, frees=True)
    granted = host.acquire

    def acquire_then_heartbeat(profile, *, holder, ttl_s, wait_s):
        leased = granted(profile, holder=holder, ttl_s=ttl_s, wait_s=wait_s)
        now = timezone.now().timestamp()
        services.host_heartbeat(report={
            "name": "quick", "api_url": "http://127.0.0.1:9", "profiles": {"desktop": {}},
            "sandboxes": [
                {"id": "sb-quick", "provider": "xdesktop", "profile": "desktop", "state": "leased"}
            ],
            "leases": [{"id": "lease-quick", "sandbox_id": "sb-quick", "holder": holder, "acquired_at": now,
                        "expires_at": now + ttl_s, "heartbeat_at": now}],
        })  # fmt: skip
        return leased

    host.acquire = acquire_then_heartbeat
    lease, _ = sandbox_lease(profile="desktop", holder="episode:7", user=personas.annotator, wait_s=5)
    from webapp.sandboxes.models import Lease

    active = Lease.objects.filter(sandbox__external_id="sb-quick", state="active")
    assert list(active) == [lease] and lease.external_id == "lease-quick"
    assert (lease.holder, lease.user) == ("episode:7", personas.annotator)
    # One row for the one lease (it was recorded twice: the heartbeat's row released, a copy made).
    assert Lease.objects.filter(external_id="lease-quick").count() == 1


@pytest.mark.django_db(transaction=True)
def test_a_lease_written_while_a_heartbeat_recording_it_is_in_flight_is_adopted(hosts, personas):
    """The same race with both in flight (PostgreSQL): the heartbeat has inserted the lease and not yet
    committed when the lease's own write comes. The write inserted its copy, waited on the unique index
    and failed with a unique violation; it now waits on the sandbox row and adopts the heartbeat's lease."""
    import threading

    from django.db import connection, transaction

    from webapp.sandboxes.models import Lease

    if connection.vendor != "postgresql":
        pytest.skip("concurrent transactions on PostgreSQL")
    host = hosts("racy", idle_row=False, frees=True)
    recorded, done = threading.Event(), threading.Event()
    now = timezone.now().timestamp()
    report = {
        "name": "racy", "api_url": "http://127.0.0.1:9", "profiles": {"desktop": {}},
        "sandboxes": [{"id": "sb-racy", "provider": "xdesktop", "profile": "desktop", "state": "leased"}],
        "leases": [{"id": "lease-racy", "sandbox_id": "sb-racy", "holder": "episode:8", "acquired_at": now,
                    "expires_at": now + 300, "heartbeat_at": now}],
    }  # fmt: skip

    def heartbeat_in_flight() -> None:
        try:
            with transaction.atomic():
                services.host_heartbeat(report=report)
                recorded.set()
                done.wait(3)  # still open: its rows are not committed yet
        finally:
            connection.close()

    granted = host.acquire

    def acquire_during_heartbeat(profile, *, holder, ttl_s, wait_s):
        leased = granted(profile, holder=holder, ttl_s=ttl_s, wait_s=wait_s)
        beat.start()
        assert recorded.wait(10), "the heartbeat never ran"
        threading.Timer(1.0, done.set).start()
        return leased

    beat = threading.Thread(target=heartbeat_in_flight)
    host.acquire = acquire_during_heartbeat
    try:
        lease, _ = sandbox_lease(profile="desktop", holder="episode:8", user=personas.annotator, wait_s=5)
    finally:
        done.set()
        beat.join(10)
    assert lease.external_id == "lease-racy" and lease.user == personas.annotator
    assert Lease.objects.filter(external_id="lease-racy").count() == 1
