"""Pool and lease logic, with an in-memory provider standing in at the provider boundary.

The same behaviour is exercised through real desktops in test_host_service.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from agent_core.actions import Action, Click
from sandbox_workers.base import (
    EnvBrokenByAgent,
    EnvError,
    ExecResult,
    Health,
    Observation,
    Profile,
    Provider,
    SandboxBrokenByAgent,
    SandboxError,
    Screenshot,
)
from sandbox_workers.pool import LeaseBroken, LeaseNotFound, Pool, SandboxUnavailable
from sandbox_workers.pool_upkeep import PoolConfig, State

RUNNING: dict[str, FakeProvider] = {}
CLEANED: list[str] = []


class FakeProvider(Provider):
    name = "fake"
    fail_start = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.alive = False
        self.resets = 0
        self.actions: list[Action] = []
        self.explode: Exception | None = None
        self.dead_parts: tuple[str, ...] = ()
        self.repair_error: Exception | None = None
        self.repair_threads: list[str] = []

    def start(self) -> None:
        if self.fail_start:
            raise EnvError("no display available")
        time.sleep(0.01)
        self.alive = True
        RUNNING[self.sandbox_id] = self

    def health(self) -> Health:
        detail = "" if self.alive else "Xvfb exited (signal 9)"
        return Health(ok=self.alive, detail=detail, repair=self.dead_parts)

    def repair(self) -> list[str]:
        self.repair_threads.append(threading.current_thread().name)
        if self.repair_error is not None:
            raise self.repair_error
        restarted, self.dead_parts = list(self.dead_parts), ()
        return restarted

    def reset(self) -> None:
        self.resets += 1
        self.actions.clear()

    def stop(self) -> None:
        self.alive = False
        RUNNING.pop(self.sandbox_id, None)

    def observe(self, *, fmt: Any = "png", a11y: bool = False, quality: int = 80) -> Observation:
        return Observation(screenshot=Screenshot(data=b"img", format="png", width=1, height=1))

    def act(self, action: Action) -> None:
        if self.explode:
            raise self.explode
        self.actions.append(action)

    def exec(self, command: Any, *, timeout: float = 30.0, output_cap: int = 65536) -> ExecResult:
        return ExecResult(0, "", "", False, False, 0.0)

    def put_file(self, path: str, data: bytes) -> None: ...

    def get_file(self, path: str) -> bytes:
        return b""

    def state(self) -> dict[str, Any]:
        return {"fake": self.sandbox_id}

    @classmethod
    def adopt(cls, *, sandbox_id: str, profile: Profile, root: Path, state: Mapping[str, Any]) -> Provider:
        found = RUNNING.get(str(state.get("fake")))
        if found is None:
            raise EnvError("gone")
        return found

    @classmethod
    def cleanup(cls, *, root: Path, state: Mapping[str, Any]) -> None:
        CLEANED.append(str(state.get("fake")))


def lookup(name: str) -> type[Provider]:
    return FakeProvider


def make_pool(tmp_path: Path, *, min_idle: int = 1, max_total: int = 2) -> Pool:
    cfg = PoolConfig(profile=Profile(name="desk", provider="fake"), min_idle=min_idle, max_total=max_total)
    return Pool([cfg], tmp_path, providers=lookup, health_interval=3600)


def run(coro: Any) -> Any:
    return asyncio.run(coro)


@pytest.fixture(autouse=True)
def _clean():
    RUNNING.clear()
    CLEANED.clear()
    FakeProvider.fail_start = False
    yield


async def settle(pool: Pool) -> None:
    while pool._tasks:
        await asyncio.gather(*list(pool._tasks), return_exceptions=True)


def test_pool_warms_to_min_idle_and_leases_from_it(tmp_path):
    async def go():
        pool = make_pool(tmp_path, min_idle=2, max_total=3)
        await pool.start()
        await pool.wait_warm(5)
        lease = await pool.acquire("desk", holder="episode:1", ttl_s=60)
        assert pool.sandboxes[lease.sandbox_id].state == State.LEASED
        await settle(pool)  # the pool tops itself back up to two idle
        states = [m.state for m in pool.sandboxes.values()]
        assert states.count(State.IDLE) == 2 and len(states) == 3
        await pool.shutdown()
        assert not RUNNING

    run(go())


def test_acquire_when_full_fails_with_reason_or_waits_for_a_release(tmp_path):
    async def go():
        pool = make_pool(tmp_path, min_idle=1, max_total=1)
        await pool.start()
        await pool.wait_warm(5)
        first = await pool.acquire("desk", holder="a", ttl_s=60)
        with pytest.raises(SandboxUnavailable, match="no idle 'desk' sandbox.*1 leased.*max 1"):
            await pool.acquire("desk", holder="b", ttl_s=60)

        async def release_soon():
            await asyncio.sleep(0.05)
            await pool.release(first.id)

        asyncio.create_task(release_soon())
        second = await pool.acquire("desk", holder="b", ttl_s=60, wait_s=5)
        assert second.sandbox_id == first.sandbox_id
        assert RUNNING[second.sandbox_id].resets == 1  # released sandboxes are reset before reuse
        await pool.shutdown()

    run(go())


def test_unknown_profile_lists_the_valid_ones(tmp_path):
    async def go():
        pool = make_pool(tmp_path)
        with pytest.raises(SandboxError, match="unknown profile 'nope'; valid: desk"):
            await pool.acquire("nope", holder="a", ttl_s=5)

    run(go())


def test_expired_lease_is_reaped_and_the_sandbox_reset(tmp_path):
    async def go():
        pool = make_pool(tmp_path)
        await pool.start()
        await pool.wait_warm(5)
        lease = await pool.acquire("desk", holder="a", ttl_s=0.05)
        await asyncio.sleep(0.1)
        pool.reap()
        await settle(pool)
        with pytest.raises(LeaseNotFound):
            await pool.run(lease.id, "act", lambda p: p.act(Click(x=1, y=1)))
        assert pool.sandboxes[lease.sandbox_id].state == State.IDLE
        assert pool.counters["expired"] == 1
        await pool.shutdown()

    run(go())


def test_activity_and_renew_push_the_expiry_out(tmp_path):
    async def go():
        pool = make_pool(tmp_path)
        await pool.start()
        await pool.wait_warm(5)
        lease = await pool.acquire("desk", holder="a", ttl_s=0.3)
        for _ in range(4):
            await asyncio.sleep(0.1)
            await pool.run(lease.id, "act", lambda p: p.act(Click(x=1, y=1)))
        renewed = await pool.renew(lease.id, ttl_s=30)
        assert renewed.expires_at > time.time() + 25
        pool.reap()
        assert lease.id in pool.leases
        await pool.shutdown()

    run(go())


def test_a_crashed_sandbox_breaks_its_lease_and_is_replaced(tmp_path):
    async def go():
        pool = make_pool(tmp_path, min_idle=1, max_total=2)
        await pool.start()
        await pool.wait_warm(5)
        lease = await pool.acquire("desk", holder="a", ttl_s=60)
        await settle(pool)
        RUNNING[lease.sandbox_id].alive = False  # as if Xvfb was killed
        pool.reap()
        with pytest.raises(LeaseBroken, match="Xvfb exited"):
            await pool.run(lease.id, "observe", lambda p: p.observe())
        await settle(pool)
        assert lease.sandbox_id not in pool.sandboxes and lease.sandbox_id not in RUNNING
        assert [m.state for m in pool.sandboxes.values()] == [State.IDLE]
        assert pool.errors[-1]["message"].startswith("health check failed")
        await pool.release(lease.id)  # releasing a broken lease is fine
        await pool.shutdown()

    run(go())


def test_what_died_and_can_be_restarted_is_repaired_on_the_sandbox_thread_and_the_lease_lives(tmp_path):
    async def go():
        pool = make_pool(tmp_path, min_idle=1, max_total=2)
        await pool.start()
        await pool.wait_warm(5)
        lease = await pool.acquire("desk", holder="a", ttl_s=60)
        await settle(pool)
        sandbox = RUNNING[lease.sandbox_id]
        sandbox.dead_parts = ("openbox",)  # as if the agent killed the window manager
        pool.reap()
        await settle(pool)
        assert sandbox.repair_threads and sandbox.repair_threads[0].startswith(lease.sandbox_id)
        assert pool.counters["repaired"] == 1 and pool.counters["replaced"] == 0
        await pool.run(lease.id, "act", lambda p: p.act(Click(x=1, y=1)))  # the lease lives on
        # A sandbox whose own contents keep breaking it: the holder's failure, not an env error.
        sandbox.dead_parts, sandbox.repair_error = ("openbox",), SandboxBrokenByAgent("openbox died 11 times")
        pool.reap()
        await settle(pool)
        with pytest.raises(SandboxBrokenByAgent, match="openbox died 11 times") as err:
            await pool.run(lease.id, "observe", lambda p: p.observe())
        assert isinstance(err.value, EnvBrokenByAgent) and not isinstance(err.value, EnvError)
        assert lease.sandbox_id not in pool.sandboxes
        await pool.release(lease.id)
        await pool.shutdown()

    run(go())


def test_a_recycle_on_release_is_not_counted_as_a_crash(tmp_path):
    async def go():
        pool = make_pool(tmp_path, min_idle=1, max_total=2)
        await pool.start()
        await pool.wait_warm(5)
        lease = await pool.acquire("desk", holder="an abandoned demonstration", ttl_s=60)
        await pool.release(lease.id, recycle=True)
        await settle(pool)
        assert pool.counters["recycled"] == 1 and pool.counters["replaced"] == 0
        await pool.shutdown()

    run(go())


def test_env_error_during_an_action_is_reported_as_env_error_and_the_sandbox_replaced(tmp_path):
    async def go():
        pool = make_pool(tmp_path)
        await pool.start()
        await pool.wait_warm(5)
        lease = await pool.acquire("desk", holder="a", ttl_s=60)
        RUNNING[lease.sandbox_id].explode = RuntimeError("X connection broken")
        with pytest.raises(LeaseBroken, match="failed during act: X connection broken"):
            await pool.run(lease.id, "act", lambda p: p.act(Click(x=1, y=1)))
        await settle(pool)
        assert lease.sandbox_id not in pool.sandboxes
        await pool.shutdown()

    run(go())


def test_failing_starts_back_off_and_say_why(tmp_path):
    async def go():
        FakeProvider.fail_start = True
        pool = make_pool(tmp_path)
        await pool.start()
        await settle(pool)
        with pytest.raises(SandboxUnavailable, match="fail to start: start failed: no display available"):
            await pool.acquire("desk", holder="a", ttl_s=5)
        assert pool.counters["start_failed"] == 1  # backing off, not retrying in a hot loop
        await pool.shutdown()

    run(go())


def test_a_restarted_pool_adopts_live_sandboxes_and_keeps_their_leases(tmp_path):
    async def go():
        pool = make_pool(tmp_path, min_idle=2, max_total=2)
        await pool.start()
        await pool.wait_warm(5)
        lease = await pool.acquire("desk", holder="episode:7", ttl_s=60)
        await pool.shutdown(stop_sandboxes=False)
        saved = json.loads((tmp_path / "pool-state.json").read_text())
        assert len(saved["sandboxes"]) == 2
        # One of the two died while no host was running.
        lost = next(sid for sid in RUNNING if sid != lease.sandbox_id)
        RUNNING.pop(lost)

        again = make_pool(tmp_path, min_idle=1, max_total=2)
        await again.start()
        assert [lost] == CLEANED
        assert again.lease(lease.id).holder == "episode:7"
        await again.run(lease.id, "act", lambda p: p.act(Click(x=3, y=4)))
        await again.wait_warm(5)
        await again.shutdown()
        assert not RUNNING

    run(go())


def test_admin_kill_breaks_the_lease_with_a_clear_reason(tmp_path):
    async def go():
        pool = make_pool(tmp_path)
        await pool.start()
        await pool.wait_warm(5)
        lease = await pool.acquire("desk", holder="a", ttl_s=60)
        await pool.admin_kill(lease.sandbox_id)
        with pytest.raises(LeaseBroken, match="killed by an administrator"):
            pool.lease(lease.id)
        await pool.shutdown()

    run(go())


def test_what_the_heartbeat_reports_never_holds_text_the_web_app_refuses(tmp_path):
    """A NUL in an error (an agent's path) or an oversized holder would fail every heartbeat of the host."""

    async def go():
        pool = make_pool(tmp_path)
        await pool.start()
        await pool.wait_warm(5)
        for holder in ("", "x" * 201, "episode:\x001"):
            with pytest.raises(SandboxError, match="holder must be 1 to 200 characters, without NUL"):
                await pool.acquire("desk", holder=holder, ttl_s=60)
        lease = await pool.acquire("desk", holder="h" * 200, ttl_s=60)
        RUNNING[lease.sandbox_id].explode = RuntimeError("cannot open /tmp/a\x00b" + "y" * 5000)
        with pytest.raises(LeaseBroken):
            await pool.run(lease.id, "act", lambda p: p.act(Click(x=1, y=1)))
        report = json.dumps(pool.status())
        assert "\\u0000" not in report and "/tmp/a\\\\x00b" in report
        assert all(len(e["message"]) <= 2000 for e in pool.status()["errors"])
        assert len(pool.leases[lease.id].broken or "") <= 2000
        await pool.shutdown()

    run(go())
