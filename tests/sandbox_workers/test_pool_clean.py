"""A sandbox is clean when it is leased: the pool's side, with the in-memory provider of test_pool.

What touches a sandbox outside a lease (a live stream's input, a `touched` report) marks it dirty; a
dirty sandbox is never leased before a reset; live streams end when the sandbox changes hands. The same
through real desktops, VNC and a host process: test_clean_lease_real.py.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from sandbox_workers.base import Profile
from sandbox_workers.pool import Pool, SandboxUnavailable
from sandbox_workers.pool_upkeep import PoolConfig, State
from tests.sandbox_workers.test_pool import RUNNING, FakeProvider, lookup, make_pool


async def until(cond: Any, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not reached in time"
        await asyncio.sleep(0.005)


async def started(tmp_path: Path) -> tuple[Pool, str]:
    """A pool of ONE sandbox (so the next lease is on the one that was touched), warm."""
    pool = make_pool(tmp_path, min_idle=1, max_total=1)
    await pool.start()
    await pool.wait_warm(5)
    (sid,) = pool.sandboxes
    return pool, sid


def resets(sid: str) -> int:
    return RUNNING[sid].resets


def test_a_sandbox_touched_outside_a_lease_is_reset_before_its_next_lease(tmp_path: Path) -> None:
    async def go() -> None:
        pool, sid = await started(tmp_path)
        assert pool.touched(sid, "an admin's shell")["marked"] is True
        await until(lambda: pool.sandboxes[sid].state == State.IDLE and resets(sid) == 1)
        lease = await pool.acquire("desk", holder="next", ttl_s=60)
        assert lease.sandbox_id == sid
        assert lease.clean is not None and lease.clean["by"] == "reset"
        assert lease.clean["dirty"] == "an admin's shell"
        assert pool.status()["counters"]["dirtied"] == 1 == pool.status()["counters"]["dirty_resets"]
        # While leased, a report changes nothing: the lease ends in a reset anyway.
        assert pool.touched(sid, "an admin's shell")["marked"] is False
        with pytest.raises(Exception, match="reason"):
            pool.touched(sid, "  ")
        await pool.shutdown()

    asyncio.run(go())


def test_live_input_outside_a_lease_holds_the_sandbox_unleased_until_the_stream_goes(tmp_path: Path) -> None:
    async def go() -> None:
        pool, sid = await started(tmp_path)
        gate = pool.live_input(sid)
        assert gate.allow_input("VNC input") is True
        m = pool.sandboxes[sid]
        assert m.state == State.IDLE and m.dirty == "VNC input outside a lease"
        # Held for whoever is on it: not leased, not reset under them.
        with pytest.raises(SandboxUnavailable, match="touched outside a lease"):
            await pool.acquire("desk", holder="next", ttl_s=60)
        await asyncio.sleep(0.05)
        assert resets(sid) == 0 and gate.allow_input() is True
        gate.close()
        await until(lambda: m.state == State.IDLE and resets(sid) == 1 and m.dirty is None)
        lease = await pool.acquire("desk", holder="next", ttl_s=60)
        assert lease.clean is not None and lease.clean["dirty"] == "VNC input outside a lease"
        assert json.loads(pool.state_file.read_text())["sandboxes"][0]["dirty"] is None
        await pool.shutdown()

    asyncio.run(go())


def test_a_lease_that_needs_the_held_sandbox_resets_it_and_ends_the_stream(tmp_path: Path) -> None:
    async def go() -> None:
        pool, sid = await started(tmp_path)
        gate = pool.live_input(sid)
        gate.allow_input()
        lease = await pool.acquire("desk", holder="next", ttl_s=60, wait_s=5)
        assert lease.sandbox_id == sid and resets(sid) == 1
        assert gate.revoked.is_set() and gate.allow_input() is False
        assert lease.clean is not None and lease.clean["why"] == "needed for a lease"
        gate.close()  # the stream goes after its revocation: nothing more happens
        await asyncio.sleep(0.05)
        assert pool.sandboxes[sid].state == State.LEASED and resets(sid) == 1
        await pool.shutdown()

    asyncio.run(go())


def test_a_stream_opened_under_a_lease_ends_with_it_and_the_next_holder_gets_a_reset_sandbox(
    tmp_path: Path,
) -> None:
    async def go() -> None:
        pool, sid = await started(tmp_path)
        idle_viewer = pool.live_input(sid)  # opened before the lease: it belongs to no one after
        lease = await pool.acquire("desk", holder="first", ttl_s=60)
        assert idle_viewer.revoked.is_set() and idle_viewer.allow_input() is False
        holders = pool.live_input(sid)
        assert holders.allow_input() is True and pool.sandboxes[sid].dirty is None  # the holder's own
        await pool.release(lease.id)
        assert holders.revoked.is_set() and holders.allow_input() is False
        assert pool.sandboxes[sid].state == State.RESETTING  # never idle, nor leased, before it
        second = await pool.acquire("desk", holder="second", ttl_s=60, wait_s=5)
        assert second.sandbox_id == sid and resets(sid) == 1
        assert second.clean is not None and (second.clean["why"], second.clean["dirty"]) == ("released", None)
        assert pool.status()["counters"]["dirtied"] == 0
        await pool.shutdown()

    asyncio.run(go())


def test_input_that_arrives_while_it_is_reset_has_it_reset_again_before_a_lease(tmp_path: Path) -> None:
    began = threading.Event()

    class SlowReset(FakeProvider):
        def reset(self) -> None:
            began.set()
            time.sleep(0.2)
            super().reset()

    async def go() -> None:
        cfg = PoolConfig(profile=Profile(name="desk", provider="fake"), min_idle=1, max_total=1)
        pool = Pool([cfg], tmp_path, providers=lambda _name: SlowReset, health_interval=3600)
        await pool.start()
        await pool.wait_warm(5)
        (sid,) = pool.sandboxes
        pool.touched(sid, "first touch")
        m = pool.sandboxes[sid]
        await until(began.is_set)
        late = pool.live_input(sid)  # opened, and typing, while the reset runs
        assert late.allow_input() is True and m.dirty
        await until(lambda: resets(sid) == 1 and m.state == State.IDLE)
        assert m.dirty  # held for the stream, not leased
        late.close()
        await until(lambda: resets(sid) == 2 and m.state == State.IDLE and m.dirty is None)
        await pool.shutdown()

    asyncio.run(go())


def test_a_restarted_host_resets_a_sandbox_left_dirty(tmp_path: Path) -> None:
    async def go() -> None:
        pool, sid = await started(tmp_path)
        pool.live_input(sid).allow_input("VNC input")
        saved = json.loads(pool.state_file.read_text())["sandboxes"]
        assert saved[0]["dirty"] == "VNC input outside a lease"
        await pool.shutdown(stop_sandboxes=False)
        before = resets(sid)
        again = Pool(list(pool.configs.values()), tmp_path, providers=lookup, health_interval=3600)
        await again.start()
        await until(lambda: again.sandboxes[sid].state == State.IDLE and resets(sid) == before + 1)
        lease = await again.acquire("desk", holder="after-restart", ttl_s=60)
        assert lease.clean is not None and lease.clean["dirty"] == "VNC input outside a lease"
        await again.shutdown()

    asyncio.run(go())
