"""What a pool keeps and the work of keeping it: each profile's `PoolConfig`, the `Managed` sandboxes
with their `State`, the `Lease` records, and `PoolUpkeep`, which starts, resets, replaces and stops
sandboxes and writes the state file a restarted host adopts them from (see `pool`).

A sandbox is clean when it is leased: freshly started, or reset since anyone last reached it. A lease's
end resets it; anything that touches it outside a lease (input through a live stream, a `touched`
report) marks it `dirty`, and a dirty sandbox is never leased: it is reset first, as soon as whoever
touched it is gone (or at once when a lease needs it). Its `generation` changes whenever who may drive
it changes, which ends the live streams opened before (see `pool.LiveInput`)."""

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

from sandbox_workers.base import EnvError, Profile, Provider, SandboxError
from sandbox_workers.registry import provider_class
from sandbox_workers.stats import LatencyLog

log = logging.getLogger(__name__)
T = TypeVar("T")

MAX_ERROR_TEXT = 2000


def reportable(text: str) -> str:
    """An error text fit for the heartbeat: the web app refuses a report with a NUL in it (so a path an
    agent wrote would take the host offline) and keeps no novel; NUL becomes \\x00, the rest is cut."""
    text = text.replace("\x00", "\\x00")
    return text if len(text) <= MAX_ERROR_TEXT else text[: MAX_ERROR_TEXT - 1] + "…"


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
    clean: dict[str, Any] | None = None
    """How the sandbox was made clean for this lease (`Managed.prepared` when it was granted)."""

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
    dirty: str | None = None
    """What touched the sandbox outside a lease; it is reset before it is leased again. None: clean."""
    generation: int = 0
    """Changes when who may drive the sandbox changes (a lease granted or ended, a reset begun)."""
    streams: set[Any] = field(default_factory=set)
    """The live input streams open on it (`pool.LiveInput`): ended when the generation changes."""
    touching: int = 0
    """Of those, the ones whose input touched it outside a lease: it is reset once they are gone."""
    prepared: dict[str, Any] = field(default_factory=dict)
    """How it was last made clean: {"by": "start" | "reset", "why", "dirty" (what it cleared), "at",
    "ms"}; a lease carries it as `Lease.clean`."""

    async def call(self, fn: Callable[[], T]) -> T:
        """Run `fn` on this sandbox's own thread."""
        return await asyncio.get_running_loop().run_in_executor(self.executor, fn)


ProviderLookup = Callable[[str], type[Provider]]


class PoolUpkeep:
    """The pool's sandboxes and their upkeep; `Pool` adds the leases, health checks and reports."""

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
            "dirtied": 0, "dirty_resets": 0,
        }  # fmt: skip
        self.lease_latency = LatencyLog()
        self._freed: dict[str, asyncio.Event] = {name: asyncio.Event() for name in self.configs}
        self._start_failures: dict[str, int] = dict.fromkeys(self.configs, 0)
        self._start_backoff_until: dict[str, float] = dict.fromkeys(self.configs, 0.0)
        self._tasks: set[asyncio.Task[Any]] = set()
        self._reaper: asyncio.Task[None] | None = None
        self._closing = False
        root.mkdir(parents=True, exist_ok=True)

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
            # An idle sandbox held dirty (someone is on it outside a lease) is not ready for a lease.
            ready_or_coming = sum(
                1
                for m in mine
                if m.state in (State.STARTING, State.RESETTING) or (m.state == State.IDLE and not m.dirty)
            )
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
        ms = (time.perf_counter() - started) * 1000
        m.latency.add(ms, "start")
        m.prepared = {"by": "start", "why": "new", "dirty": None, "at": time.time(), "ms": round(ms, 1)}
        if self._closing:
            await self._stop(m, "host shutting down")
            return
        if m.dirty:  # reached while it started
            await self._reset(m, "touched while it started")
            return
        self._become_idle(m)

    def mark_dirty(self, m: Managed, reason: str) -> bool:
        """Note that something reached `m` outside a lease: it is reset before its next lease, at once
        unless a live stream that touched it is still on it. False if it is leased (the holder's
        business; every lease ends in a reset anyway) or going."""
        if m.state in (State.LEASED, State.STOPPING) or m.id not in self.sandboxes:
            return False
        if m.dirty is None:
            self.counters["dirtied"] += 1
            log.warning(
                "sandbox %s was touched outside a lease (%s): reset before its next lease", m.id, reason
            )
        m.dirty = reportable(reason)[:300]
        self._persist()
        if not m.touching:
            self._reset_soon(m, "touched outside a lease")
        return True

    def touch_ended(self, m: Managed) -> None:
        """A live stream that touched `m` outside a lease is gone: reset it once the last one is."""
        m.touching = max(0, m.touching - 1)
        if not m.touching and m.dirty and m.id in self.sandboxes:
            self._reset_soon(m, "touched outside a lease")

    def _reset_soon(self, m: Managed, why: str) -> None:
        """Reset an idle `m` in the background (once: it is resetting from now on)."""
        if m.state != State.IDLE:
            return  # starting or resetting: that finishes with a reset when it is dirty
        m.state = State.RESETTING
        self._spawn(self._reset(m, why))

    def _become_idle(self, m: Managed) -> None:
        m.state = State.IDLE
        self._persist()
        self._freed[m.config.profile.name].set()

    def _bump(self, m: Managed) -> None:
        """Who may drive `m` changes: the live streams opened before end (their input is refused)."""
        m.generation += 1
        for stream in list(m.streams):
            stream.revoke()

    async def _reset(self, m: Managed, why: str = "released") -> None:
        """Reset `m` (replace it if that fails) and make it idle; again if it was touched meanwhile,
        unless whoever touched it is still on it (then it waits for them, dirty: see `touch_ended`)."""
        while True:
            m.state = State.RESETTING
            self._bump(m)
            cleared, m.dirty = m.dirty, None
            if cleared:
                self.counters["dirty_resets"] += 1
            self._persist()
            started = time.perf_counter()
            try:
                await m.call(m.provider.reset)
            except Exception as exc:
                await self._replace(m, f"reset failed: {exc}")
                return
            ms = (time.perf_counter() - started) * 1000
            m.latency.add(ms, "reset")
            if m.id not in self.sandboxes or m.state != State.RESETTING:
                return
            m.prepared = {"by": "reset", "why": why, "dirty": cleared, "at": time.time(), "ms": round(ms, 1)}
            if m.dirty is None or m.touching:
                break
            why = "touched while it was reset"
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
        self._bump(m)
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
                    "dirty": m.dirty,
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
        # What no sandbox directory leads to (a disk of a host killed while it made one), and what the
        # host gives each kind of sandbox (probed once: logged, and in the status).
        for cls in self.provider_classes():
            await asyncio.to_thread(partial(cls.sweep, pool_root=self.root))
            await asyncio.to_thread(cls.host_report)
        self._persist()
        if adopted or lost:
            log.info("adopted %d sandbox(es) from the previous host process; cleaned up %d", adopted, lost)

    def provider_classes(self) -> list[type[Provider]]:
        """The provider classes of the configured profiles, each once."""
        return [self.providers(name) for name in sorted({c.profile.provider for c in self.configs.values()})]

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
            # Whatever happened to it while no host process watched is unknown: reset, dirty or not.
            m.dirty = rec.get("dirty") or None
            self._spawn(self._reset(m, "adopted after a host restart"))
        return True
