"""Warm pools of sandboxes per profile on one host, and the leases that hand them out.

The pool lives on the host service's event loop. Every sandbox has its own single worker thread,
so a provider is only ever driven from one thread and a slow sandbox never blocks another. Leases
are held here, in memory, and written to a state file on every change so a restarted host finds
its sandboxes again (`Pool.start` adopts them) instead of leaking them. A sandbox is leased only clean
(pool_upkeep says how); `LiveInput` is how a live stream's input is held to that.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
from collections.abc import Callable
from typing import Any, TypeVar

from sandbox_workers.base import EnvError, Provider, SandboxBrokenByAgent, SandboxError
from sandbox_workers.pool_upkeep import Lease, Managed, PoolConfig, PoolUpkeep, State, reportable

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_HOLDER = 200  # the web app's Lease.holder


class SandboxUnavailable(SandboxError):
    """No sandbox of the profile became free in time (all leased, or the profile is at its maximum)."""


class LeaseNotFound(SandboxError):
    """The lease is unknown, released or expired."""


class LeaseBroken(EnvError):
    """The sandbox under a lease died or was killed; the lease is unusable (an env error)."""


class LiveInput:
    """One live stream's right to send input into a sandbox (the host's VNC relay holds one).

    It is bound to the sandbox's generation when the stream opens: when the sandbox changes hands (a
    lease granted or ended, a reset begun) `revoked` is set and its input is refused from then on, so
    input sent under one lease (or none) never reaches the next. Input outside a lease marks the
    sandbox dirty, and the sandbox waits, unleased, until the stream is gone, then is reset."""

    def __init__(self, pool: Pool, m: Managed) -> None:
        self.pool, self.m, self.generation = pool, m, m.generation
        self.revoked = asyncio.Event()
        self.touched = False
        m.streams.add(self)

    def allow_input(self, what: str = "input through a live stream") -> bool:
        """Before input goes on: False once revoked (the caller ends the stream); outside a lease the
        sandbox is marked dirty (held until this stream closes)."""
        m = self.m
        if self.revoked.is_set() or m.generation != self.generation or m.id not in self.pool.sandboxes:
            self.revoke()
            return False
        if m.state != State.LEASED and not self.touched:
            self.touched = True
            m.touching += 1
            self.pool.mark_dirty(m, f"{what} outside a lease")
        return True

    def revoke(self) -> None:
        """End the stream's right to send input (it is told through `revoked`)."""
        self.revoked.set()

    def close(self) -> None:
        """The stream is gone; a sandbox it touched is reset once no such stream is left."""
        self.revoke()
        if self in self.m.streams:
            self.m.streams.discard(self)
            if self.touched:
                self.pool.touch_ended(self.m)


class Pool(PoolUpkeep):
    """Sandboxes of several profiles on one host: warm pools, leases, health, replacement."""

    # --- lifecycle -----------------------------------------------------------------------------

    async def start(self) -> None:
        """Adopt what a previous host process left, fill the warm pools, start the health loop."""
        await self._adopt_previous()
        self.top_up()
        self._reaper = asyncio.create_task(self._reap_forever(), name="pool-reaper")

    async def wait_warm(self, timeout: float = 60.0) -> None:
        """Wait until every profile has its `min_idle` idle sandboxes (for start-up and tests)."""
        deadline = time.monotonic() + timeout
        while True:
            short = [
                name
                for name, cfg in self.configs.items()
                if sum(
                    1
                    for m in self.sandboxes.values()
                    if m.config is cfg and m.state == State.IDLE and not m.dirty
                )
                < cfg.min_idle
            ]
            if not short:
                return
            if time.monotonic() > deadline:
                raise SandboxUnavailable(f"pool not warm after {timeout:.0f} s: {', '.join(short)}")
            await asyncio.sleep(0.05)

    async def shutdown(self, *, stop_sandboxes: bool = True) -> None:
        """Stop the loops; stop every sandbox, or (for a rolling restart) keep them and their state file."""
        self._closing = True
        if self._reaper:
            self._reaper.cancel()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if stop_sandboxes:
            await asyncio.gather(*(self._stop(m, "host shutdown") for m in list(self.sandboxes.values())))
            self.leases.clear()
            self._persist()
        else:
            self._persist()
        for m in self.sandboxes.values():
            m.executor.shutdown(wait=False)

    # --- leases --------------------------------------------------------------------------------

    async def acquire(self, profile: str, *, holder: str, ttl_s: float, wait_s: float = 0.0) -> Lease:
        """Lease an idle sandbox of `profile` for `ttl_s`; wait up to `wait_s` for one to free up."""
        cfg = self.configs.get(profile)
        if cfg is None:
            raise SandboxError(f"unknown profile {profile!r}; valid: {', '.join(sorted(self.configs))}")
        if not 0 < ttl_s <= 24 * 3600:
            raise SandboxError("ttl_s must be in (0, 86400]")
        if not holder or len(holder) > MAX_HOLDER or "\x00" in holder:
            # The holder is reported in every heartbeat: one the web app cannot store would fail them all.
            raise SandboxError(f"holder must be 1 to {MAX_HOLDER} characters, without NUL")
        started = time.perf_counter()
        deadline = time.monotonic() + max(0.0, wait_s)
        while True:
            for m in list(self.sandboxes.values()):
                if m.config is cfg and m.state == State.IDLE and not m.dirty:
                    health = m.provider.health()
                    if not health.ok:
                        self._spawn(self._replace(m, f"unhealthy when leased: {health.detail}"))
                        continue
                    lease = self._grant(m, holder=holder, ttl_s=ttl_s)
                    self.lease_latency.add((time.perf_counter() - started) * 1000)
                    self.top_up()
                    return lease
            self.top_up()
            if wait_s > 0 and not self._coming(cfg):
                # Nothing clean on its way, but one held dirty by someone outside a lease: the lease
                # comes first (their stream is ended by the reset).
                held = next(
                    (
                        m
                        for m in self.sandboxes.values()
                        if m.config is cfg and m.state == State.IDLE and m.dirty
                    ),
                    None,
                )
                if held is not None:
                    self._reset_soon(held, "needed for a lease")
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxUnavailable(self._unavailable_reason(cfg))
            event = self._freed[profile]
            event.clear()
            try:
                await asyncio.wait_for(event.wait(), timeout=remaining)
            except TimeoutError:
                raise SandboxUnavailable(self._unavailable_reason(cfg)) from None

    def _coming(self, cfg: PoolConfig) -> bool:
        """Whether a sandbox of `cfg` is on its way to idle (starting or resetting)."""
        return any(
            m.config is cfg and m.state in (State.STARTING, State.RESETTING) for m in self.sandboxes.values()
        )

    def _grant(self, m: Managed, *, holder: str, ttl_s: float) -> Lease:
        now = time.time()
        lease = Lease(
            id=secrets.token_urlsafe(12),
            sandbox_id=m.id,
            profile=m.config.profile.name,
            holder=holder[:200],
            ttl_s=ttl_s,
            acquired_at=now,
            expires_at=now + ttl_s,
            heartbeat_at=now,
            clean=dict(m.prepared),
        )
        m.state = State.LEASED
        m.lease_id = lease.id
        self._bump(m)  # streams opened before the lease end: they belong to no one now
        self.leases[lease.id] = lease
        self._persist()
        return lease

    def _unavailable_reason(self, cfg: PoolConfig) -> str:
        states = [m.state for m in self.sandboxes.values() if m.config is cfg]
        busy = ", ".join(f"{states.count(s)} {s.value}" for s in State if states.count(s))
        dirty = sum(
            1 for m in self.sandboxes.values() if m.config is cfg and m.state == State.IDLE and m.dirty
        )
        if dirty:
            busy += f" ({dirty} of them touched outside a lease, reset before it is leased)"
        extra = ""
        if time.time() < self._start_backoff_until[cfg.profile.name]:
            extra = f"; sandboxes fail to start: {self._last_error_of(cfg.profile.name)}"
        return (
            f"no idle '{cfg.profile.name}' sandbox on this host ({busy or 'none'}; "
            f"max {cfg.max_total}){extra}"
        )

    def _last_error_of(self, profile: str) -> str:
        for err in reversed(self.errors):
            if err["profile"] == profile:
                return str(err["message"])
        return "unknown"

    def lease(self, lease_id: str) -> Lease:
        """The live lease `lease_id`; raises LeaseNotFound if ended, LeaseBroken if its sandbox died."""
        lease = self.leases.get(lease_id)
        if lease is None:
            raise LeaseNotFound(f"lease {lease_id!r} is unknown, released or expired")
        if lease.expires_at <= time.time():
            self._end_lease(lease, expired=True)
            raise LeaseNotFound(f"lease {lease_id!r} expired")
        if lease.broken:
            if lease.broken_by_agent:
                raise SandboxBrokenByAgent(f"the sandbox of lease {lease_id} is gone: {lease.broken}")
            raise LeaseBroken(f"the sandbox of lease {lease_id} is gone: {lease.broken}")
        return lease

    async def renew(self, lease_id: str, *, ttl_s: float | None = None) -> Lease:
        """Heartbeat: push the expiry out by `ttl_s` (default: the lease's own TTL)."""
        lease = self.lease(lease_id)
        if ttl_s is not None:
            if not 0 < ttl_s <= 24 * 3600:
                raise SandboxError("ttl_s must be in (0, 86400]")
            lease.ttl_s = ttl_s
        self._touch(lease)
        self._persist()
        return lease

    def _touch(self, lease: Lease) -> None:
        now = time.time()
        lease.heartbeat_at = now
        lease.expires_at = now + lease.ttl_s

    async def release(self, lease_id: str, *, recycle: bool = False) -> None:
        """End a lease; its sandbox is reset (or, with `recycle`, replaced) in the background."""
        lease = self.leases.get(lease_id)
        if lease is None:
            raise LeaseNotFound(f"lease {lease_id!r} is unknown, released or expired")
        self._end_lease(lease, recycle=recycle)

    def _end_lease(self, lease: Lease, *, expired: bool = False, recycle: bool = False) -> None:
        self.leases.pop(lease.id, None)
        if expired:
            self.counters["expired"] += 1
            log.info("lease %s of %s expired (holder %s)", lease.id, lease.sandbox_id, lease.holder)
        m = self.sandboxes.get(lease.sandbox_id)
        if m is not None and m.lease_id == lease.id:
            m.lease_id = None
            self._bump(m)  # the holder's live streams end with the lease
            if m.state == State.LEASED:
                if lease.broken:
                    self._spawn(self._replace(m, lease.broken))
                elif recycle:
                    # The holder's choice (an abandoned demonstration, say), not a crash of the sandbox.
                    self._spawn(self._replace(m, "recycled on release", crashed=False))
                else:
                    m.state = State.RESETTING  # never idle (nor leased) before its reset
                    self._spawn(self._reset(m, "lease expired" if expired else "released"))
        self._persist()

    async def run(self, lease_id: str, op: str, fn: Callable[[Provider], T]) -> T:
        """Run `fn(provider)` on the leased sandbox's thread; an env failure breaks the lease."""
        lease = self.lease(lease_id)
        m = self.sandboxes[lease.sandbox_id]
        if m.lease_id != lease.id or m.state != State.LEASED:
            raise LeaseNotFound(f"lease {lease_id!r} no longer holds its sandbox")
        self._touch(lease)
        started = time.perf_counter()
        try:
            result = await m.call(lambda: fn(m.provider))
        except SandboxError as exc:
            if isinstance(exc, EnvError):
                self._break(m, f"{op}: {exc}")
                raise LeaseBroken(f"the sandbox of lease {lease_id} failed during {op}: {exc}") from exc
            if isinstance(exc, SandboxBrokenByAgent):
                self._break(m, f"{op}: {exc}", by_agent=True)
            raise
        except Exception as exc:  # a provider bug or an unexpected library error is an env failure too
            log.exception("%s on %s failed", op, m.id)
            self._break(m, f"{op}: {type(exc).__name__}: {exc}")
            raise LeaseBroken(f"the sandbox of lease {lease_id} failed during {op}: {exc}") from exc
        m.latency.add((time.perf_counter() - started) * 1000, op)
        return result

    def _break(self, m: Managed, reason: str, *, by_agent: bool = False) -> None:
        """Mark the sandbox's lease broken and replace the sandbox."""
        reason = reportable(reason)
        self._record_error(m, reason)
        if m.lease_id and m.lease_id in self.leases:
            self.leases[m.lease_id].broken = reason
            self.leases[m.lease_id].broken_by_agent = by_agent
        if m.state in (State.IDLE, State.LEASED, State.RESETTING):
            self._spawn(self._replace(m, reason))

    # --- admin ---------------------------------------------------------------------------------

    def managed(self, sandbox_id: str) -> Managed:
        """The sandbox `sandbox_id`; raises SandboxError if this host has none."""
        m = self.sandboxes.get(sandbox_id)
        if m is None:
            raise SandboxError(f"no sandbox {sandbox_id!r} on this host")
        return m

    async def admin_reset(self, sandbox_id: str) -> None:
        """Reset a sandbox now; a holder's lease ends (its next call gets a clear error)."""
        m = self.managed(sandbox_id)
        if m.lease_id and m.lease_id in self.leases:
            self.leases[m.lease_id].broken = "reset by an administrator"
            m.lease_id = None
        if m.state in (State.IDLE, State.LEASED):
            await self._reset(m, "reset by an administrator")

    def touched(self, sandbox_id: str, reason: object) -> dict[str, Any]:
        """Something reached the sandbox outside the pool (an admin's shell, input the web app relayed):
        unless it is leased, it is reset before its next lease. Returns where it stands."""
        if not isinstance(reason, str) or not reason.strip():
            raise SandboxError("reason must be a non-empty string")
        m = self.managed(sandbox_id)
        marked = self.mark_dirty(m, reason.strip())
        return {"sandbox": m.id, "state": m.state.value, "marked": marked, "dirty": m.dirty}

    def live_input(self, sandbox_id: str) -> LiveInput:
        """The input gate of a live stream opening on the sandbox now (close it when the stream ends)."""
        return LiveInput(self, self.managed(sandbox_id))

    async def admin_kill(self, sandbox_id: str) -> None:
        """Kill a sandbox now and start a replacement; a holder's lease breaks."""
        m = self.managed(sandbox_id)
        if m.lease_id and m.lease_id in self.leases:
            self.leases[m.lease_id].broken = "killed by an administrator"
        await self._replace(m, "killed by an administrator", crashed=False)

    # --- health: the reaper (the rest of the pool's own work is PoolUpkeep's) --------------------

    async def _reap_forever(self) -> None:
        while True:
            await asyncio.sleep(self.health_interval)
            try:
                self.reap()
            except Exception:  # the loop must survive anything one sandbox throws
                log.exception("pool reaper failed")

    def reap(self) -> None:
        """Expire leases past their TTL, replace sandboxes whose health check fails, refill the pools."""
        now = time.time()
        for lease in list(self.leases.values()):
            if lease.expires_at <= now:
                self._end_lease(lease, expired=True)
        for m in list(self.sandboxes.values()):
            if m.state not in (State.IDLE, State.LEASED):
                continue
            health = m.provider.health()
            if not health.ok:
                self._break(m, f"health check failed: {health.detail}")
            elif health.repair and not m.repairing:
                m.repairing = True
                self._spawn(self._repair(m))
        self.top_up()

    async def _repair(self, m: Managed) -> None:
        """Have the sandbox restart what died that it can restart (on its own thread, between the
        holder's calls); the lease lives on. A repair that fails breaks it like a crash."""
        try:
            restarted = await m.call(m.provider.repair)
        except SandboxBrokenByAgent as exc:
            self._break(m, f"repair: {exc}", by_agent=True)
            return
        except Exception as exc:  # a failed repair is a crash: replace the sandbox
            if m.state in (State.IDLE, State.LEASED):  # (not one being reset or stopped meanwhile)
                self._break(m, f"repair failed: {type(exc).__name__}: {exc}")
            return
        finally:
            m.repairing = False
        if restarted:
            self.counters["repaired"] += 1
            log.warning("sandbox %s restarted %s", m.id, ", ".join(restarted))

    # --- what the host reports -----------------------------------------------------------------

    def status(self) -> dict[str, Any]:
        """Everything an admin page or a heartbeat needs, as JSON."""
        sandboxes = []
        for m in self.sandboxes.values():
            lease = self.leases.get(m.lease_id) if m.lease_id else None
            try:
                endpoints = m.provider.endpoints() if m.state != State.STARTING else {}
                pids = m.provider.pids()
            except Exception:  # a dying sandbox's endpoints are not worth failing a status for
                endpoints, pids = {}, []
            sandboxes.append(
                {
                    "id": m.id,
                    "profile": m.config.profile.name,
                    "provider": m.config.profile.provider,
                    "state": m.state.value,
                    "lease": lease.to_dict() if lease else None,
                    "last_error": m.last_error,
                    "created_at": m.created_at,
                    "endpoints": endpoints,
                    "pids": pids,
                    "latency_ms": m.latency.summary(),
                    "dirty": m.dirty,
                    "prepared": m.prepared,
                }
            )
        profiles = {}
        for name, cfg in self.configs.items():
            states = [m.state for m in self.sandboxes.values() if m.config is cfg]
            profiles[name] = {
                "provider": cfg.profile.provider,
                "min_idle": cfg.min_idle,
                "max_total": cfg.max_total,
                "states": {s.value: states.count(s) for s in State},
            }
        return {
            "profiles": profiles,
            "sandboxes": sandboxes,
            "leases": [lease.to_dict() for lease in self.leases.values()],
            "errors": list(self.errors)[-20:],
            "counters": dict(self.counters),
            "lease_latency_ms": self.lease_latency.summary(),
            **{k: v for cls in self.provider_classes() for k, v in cls.host_report().items()},
        }
