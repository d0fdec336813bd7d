"""Warm pools of sandboxes per profile on one host, and the leases that hand them out.

The pool lives on the host service's event loop. Every sandbox has its own single worker thread,
so a provider is only ever driven from one thread and a slow sandbox never blocks another. Leases
are held here, in memory, and written to a state file on every change so a restarted host finds
its sandboxes again (`Pool.start` adopts them) instead of leaking them.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import secrets
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sandbox_workers.base import (
    EnvError,
    Profile,
    Provider,
    SandboxBrokenByAgent,
    SandboxError,
)
from sandbox_workers.registry import provider_class
from sandbox_workers.stats import LatencyLog

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_HOLDER = 200  # the web app's Lease.holder
MAX_ERROR_TEXT = 2000


def reportable(text: str) -> str:
    """An error text fit for the heartbeat: the web app refuses a report with a NUL in it (so a path an
    agent wrote would take the host offline) and keeps no novel; NUL becomes \\x00, the rest is cut."""
    text = text.replace("\x00", "\\x00")
    return text if len(text) <= MAX_ERROR_TEXT else text[: MAX_ERROR_TEXT - 1] + "…"


class SandboxUnavailable(SandboxError):
    """No sandbox of the profile became free in time (all leased, or the profile is at its maximum)."""


class LeaseNotFound(SandboxError):
    """The lease is unknown, released or expired."""


class LeaseBroken(EnvError):
    """The sandbox under a lease died or was killed; the lease is unusable (an env error)."""


@dataclass(frozen=True)
class PoolConfig:
    """How many sandboxes of one profile a host keeps."""

    profile: Profile
    min_idle: int = 1
    """Sandboxes kept started and idle, ready to lease."""
    max_total: int = 4
    """Upper bound on sandboxes of this profile on this host, whatever their state."""

    def __post_init__(self) -> None:
        if self.min_idle < 0 or self.max_total < 1 or self.min_idle > self.max_total:
            raise ValueError(
                f"profile {self.profile.name}: need 0 <= min_idle <= max_total and max_total >= 1"
            )


class State(StrEnum):
    STARTING = "starting"
    IDLE = "idle"
    LEASED = "leased"
    RESETTING = "resetting"
    STOPPING = "stopping"


@dataclass
class Lease:
    """A time-limited claim on one sandbox. Every operation under it pushes its expiry out by `ttl_s`."""

    id: str
    sandbox_id: str
    profile: str
    holder: str
    ttl_s: float
    acquired_at: float
    expires_at: float
    heartbeat_at: float
    broken: str | None = None
    broken_by_agent: bool = False
    """Whether what ran in the sandbox broke it (SandboxBrokenByAgent): the holder's failure."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Managed:
    """One sandbox as the pool sees it."""

    id: str
    config: PoolConfig
    slot: int
    provider: Provider
    executor: ThreadPoolExecutor
    state: State = State.STARTING
    lease_id: str | None = None
    last_error: str = ""
    repairing: bool = False
    created_at: float = field(default_factory=time.time)
    latency: LatencyLog = field(default_factory=LatencyLog)

    async def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on this sandbox's own thread."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)


ProviderLookup = Callable[[str], type[Provider]]


class Pool:
    """Sandboxes of several profiles on one host: warm pools, leases, health, replacement."""

    def __init__(
        self,
        configs: Sequence[PoolConfig],
        root: Path,
        *,
        providers: ProviderLookup = provider_class,
        slot_base: int = 0,
        health_interval: float = 0.5,
        state_file: Path | None = None,
    ) -> None:
        self.configs = {c.profile.name: c for c in configs}
        self.root = root
        self.providers = providers
        self.slot_base = slot_base
        self.health_interval = health_interval
        self.state_file = state_file or root / "pool-state.json"
        self.sandboxes: dict[str, Managed] = {}
        self.leases: dict[str, Lease] = {}
        self.errors: deque[dict[str, Any]] = deque(maxlen=50)
        self.counters: dict[str, int] = {
            "started": 0, "start_failed": 0, "replaced": 0, "recycled": 0, "expired": 0, "repaired": 0,
        }  # fmt: skip
        self.lease_latency = LatencyLog()
        self._freed: dict[str, asyncio.Event] = {name: asyncio.Event() for name in self.configs}
        self._start_failures: dict[str, int] = dict.fromkeys(self.configs, 0)
        self._start_backoff_until: dict[str, float] = dict.fromkeys(self.configs, 0.0)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reaper: asyncio.Task[None] | None = None
        self._closing = False
        root.mkdir(parents=True, exist_ok=True)

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
                if sum(1 for m in self.sandboxes.values() if m.config is cfg and m.state == State.IDLE)
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
            for m in self.sandboxes.values():
                if m.config is cfg and m.state == State.IDLE:
                    health = m.provider.health()
                    if not health.ok:
                        self._spawn(self._replace(m, f"unhealthy when leased: {health.detail}"))
                        continue
                    lease = self._grant(m, holder=holder, ttl_s=ttl_s)
                    self.lease_latency.add((time.perf_counter() - started) * 1000)
                    self.top_up()
                    return lease
            self.top_up()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxUnavailable(self._unavailable_reason(cfg))
            event = self._freed[profile]
            event.clear()
            try:
                await asyncio.wait_for(event.wait(), timeout=remaining)
            except TimeoutError:
                raise SandboxUnavailable(self._unavailable_reason(cfg)) from None

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
        )
        m.state = State.LEASED
        m.lease_id = lease.id
        self.leases[lease.id] = lease
        self._persist()
        return lease

    def _unavailable_reason(self, cfg: PoolConfig) -> str:
        states = [m.state for m in self.sandboxes.values() if m.config is cfg]
        busy = ", ".join(f"{states.count(s)} {s.value}" for s in State if states.count(s))
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
            if m.state == State.LEASED:
                if lease.broken:
                    self._spawn(self._replace(m, lease.broken))
                elif recycle:
                    # The holder's choice (an abandoned demonstration, say), not a crash of the sandbox.
                    self._spawn(self._replace(m, "recycled on release", crashed=False))
                else:
                    self._spawn(self._reset(m))
        self._persist()

    async def run(self, lease_id: str, op: str, fn: Callable[[Provider], T]) -> T:
        """Run `fn(provider)` on the leased sandbox's thread; an env failure breaks the lease."""
        lease = self.lease(lease_id)
        m = self.sandboxes[lease.sandbox_id]
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
            await self._reset(m)

    async def admin_kill(self, sandbox_id: str) -> None:
        """Kill a sandbox now and start a replacement; a holder's lease breaks."""
        m = self.managed(sandbox_id)
        if m.lease_id and m.lease_id in self.leases:
            self.leases[m.lease_id].broken = "killed by an administrator"
        await self._replace(m, "killed by an administrator", crashed=False)

    # --- the pool's own work -------------------------------------------------------------------

    def _spawn(self, coro: Any) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def top_up(self) -> None:
        """Start sandboxes until every profile has `min_idle` ready or coming, within `max_total`."""
        if self._closing:
            return
        now = time.time()
        for name, cfg in self.configs.items():
            if now < self._start_backoff_until[name]:
                continue
            mine = [m for m in self.sandboxes.values() if m.config is cfg]
            ready_or_coming = sum(1 for m in mine if m.state in (State.IDLE, State.STARTING, State.RESETTING))
            room = cfg.max_total - len(mine)
            for _ in range(min(cfg.min_idle - ready_or_coming, room)):
                self._spawn(self._start_new(cfg))

    def _free_slot(self) -> int:
        used = {m.slot for m in self.sandboxes.values()}
        slot = self.slot_base
        while slot in used:
            slot += 1
        return slot

    async def _start_new(self, cfg: PoolConfig) -> None:
        sid = f"{cfg.profile.name}-{secrets.token_hex(4)}"
        cls = self.providers(cfg.profile.provider)
        provider = cls(sandbox_id=sid, profile=cfg.profile, root=self.root / sid)
        m = Managed(
            id=sid,
            config=cfg,
            slot=self._free_slot(),
            provider=provider,
            executor=ThreadPoolExecutor(max_workers=1, thread_name_prefix=sid),
        )
        provider.slot = m.slot
        self.sandboxes[sid] = m
        self._persist()  # before it starts, so a host killed mid-start still knows to clean it up
        started = time.perf_counter()
        try:
            await m.call(provider.start)
        except Exception as exc:
            self.counters["start_failed"] += 1
            failures = self._start_failures[cfg.profile.name] = self._start_failures[cfg.profile.name] + 1
            self._start_backoff_until[cfg.profile.name] = time.time() + min(30.0, 0.5 * 2**failures)
            self._record_error(m, f"start failed: {exc}")
            log.warning("starting %s failed (%s); retry in %.1f s", sid, exc, min(30.0, 0.5 * 2**failures))
            await self._stop(m, "start failed")
            return
        self._start_failures[cfg.profile.name] = 0
        self.counters["started"] += 1
        m.latency.add((time.perf_counter() - started) * 1000, "start")
        if self._closing:
            await self._stop(m, "host shutting down")
            return
        self._become_idle(m)

    def _become_idle(self, m: Managed) -> None:
        m.state = State.IDLE
        self._persist()
        self._freed[m.config.profile.name].set()

    async def _reset(self, m: Managed) -> None:
        m.state = State.RESETTING
        self._persist()
        started = time.perf_counter()
        try:
            await m.call(m.provider.reset)
        except Exception as exc:
            await self._replace(m, f"reset failed: {exc}")
            return
        m.latency.add((time.perf_counter() - started) * 1000, "reset")
        if m.id in self.sandboxes and m.state == State.RESETTING:
            self._become_idle(m)

    async def _replace(self, m: Managed, reason: str, *, crashed: bool = True) -> None:
        """Stop `m` and start another; `crashed` counts it in "replaced" (the crash rate), else in
        "recycled"."""
        if m.state == State.STOPPING:
            return
        self.counters["replaced" if crashed else "recycled"] += 1
        log.warning("replacing sandbox %s: %s", m.id, reason)
        await self._stop(m, reason)
        self.top_up()

    async def _stop(self, m: Managed, reason: str) -> None:
        m.state = State.STOPPING
        try:
            await m.call(m.provider.stop)
        except Exception as exc:
            self._record_error(m, f"stop failed: {exc}")
            log.exception("stopping %s failed", m.id)
        self.sandboxes.pop(m.id, None)
        m.executor.shutdown(wait=False)
        self._persist()

    def _record_error(self, m: Managed, message: str) -> None:
        message = reportable(message)
        m.last_error = message
        self.errors.append(
            {"at": time.time(), "sandbox": m.id, "profile": m.config.profile.name, "message": message}
        )

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

    # --- persistence across host restarts ------------------------------------------------------

    def _persist(self) -> None:
        records = []
        for m in self.sandboxes.values():
            if m.state == State.STOPPING:
                continue
            try:
                provider_state = m.provider.state()
            except Exception as exc:  # a half-started provider may not know its state yet
                provider_state = {"error": str(exc)}
            lease = self.leases.get(m.lease_id) if m.lease_id else None
            records.append(
                {
                    "id": m.id,
                    "profile": m.config.profile.name,
                    "provider": m.config.profile.provider,
                    "slot": m.slot,
                    "state": m.state.value,
                    "provider_state": provider_state,
                    "lease": lease.to_dict() if lease else None,
                    "created_at": m.created_at,
                }
            )
        tmp = self.state_file.with_suffix(".tmp")
        tmp.write_text(json.dumps({"version": 1, "sandboxes": records}))
        os.replace(tmp, self.state_file)

    async def _adopt_previous(self) -> None:
        saved: dict[str, Any] = {}
        try:
            saved = json.loads(self.state_file.read_text())
        except FileNotFoundError:
            pass
        except (OSError, ValueError) as exc:
            log.error("pool state file %s unreadable (%s); starting empty", self.state_file, exc)
        records: list[Mapping[str, Any]] = saved.get("sandboxes", [])
        adopted = lost = 0
        for rec in records:
            if await self._adopt_one(rec):
                adopted += 1
            else:
                lost += 1
        lost += await self._cleanup_strays({str(r["id"]) for r in records})
        self._persist()
        if adopted or lost:
            log.info("adopted %d sandbox(es) from the previous host process; cleaned up %d", adopted, lost)

    async def _cleanup_strays(self, known: set[str]) -> int:
        """Clean up sandbox directories no record mentions (a host killed before it could write one)."""
        strays = [d for d in self.root.iterdir() if d.is_dir() and d.name not in known]
        names = {cfg.profile.provider for cfg in self.configs.values()}
        for stray in strays:
            log.warning("cleaning up %s, left by a previous host process without a record", stray.name)
            for name in sorted(names):
                try:
                    cls = self.providers(name)
                    await asyncio.to_thread(partial(cls.cleanup, root=stray, state={}))
                except Exception:  # one provider's cleanup failing must not stop the others'
                    log.exception("cleanup of %s by %s failed", stray, name)
        return len(strays)

    async def _adopt_one(self, rec: Mapping[str, Any]) -> bool:
        sid, root = str(rec["id"]), self.root / str(rec["id"])
        try:
            cls = self.providers(str(rec["provider"]))
        except SandboxError as exc:
            log.error("cannot adopt %s: %s", sid, exc)
            return False
        cfg = self.configs.get(str(rec["profile"]))
        state = rec.get("provider_state") or {}
        try:
            if cfg is None:
                raise EnvError(f"profile {rec['profile']!r} is no longer configured")
            provider = await asyncio.to_thread(
                lambda: cls.adopt(sandbox_id=sid, profile=cfg.profile, root=root, state=state)
            )
            provider.slot = int(rec["slot"])
        except Exception as exc:
            log.warning("sandbox %s from the previous host process is lost (%s); cleaning up", sid, exc)
            await asyncio.to_thread(lambda: cls.cleanup(root=root, state=state))
            return False
        m = Managed(
            id=sid,
            config=cfg,
            slot=int(rec["slot"]),
            provider=provider,
            executor=ThreadPoolExecutor(max_workers=1, thread_name_prefix=sid),
            created_at=float(rec.get("created_at") or time.time()),
        )
        self.sandboxes[sid] = m
        lease_rec = rec.get("lease")
        if lease_rec and float(lease_rec["expires_at"]) > time.time() and not lease_rec.get("broken"):
            lease = Lease(**lease_rec)
            self.leases[lease.id] = lease
            m.lease_id, m.state = lease.id, State.LEASED
        else:
            self._spawn(self._reset(m))
        return True

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
        }
