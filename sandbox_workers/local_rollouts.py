"""Rollouts in this process: a pool of browser sandboxes, each with a thread running the agent loop.

`LocalRolloutSource` is the training RolloutSource the demonstration and benchmark scripts use (the
platform's own runs go through Celery rollouts on a sandbox host instead, webapp.training.rollout_source):
the trainer asks for rollouts, every environment thread takes the next one the moment it is free,
runs it with the newest published policy (sampling; token ids and logprobs recorded) and hands the
finished episode back. A policy published while episodes run is picked up by each thread at its next
episode: no global stop. `evaluate` scores a policy directory (greedy) or a baseline on fixed seeds.

Environment utilisation: the share of environment-time spent inside episodes (prepare, policy turns,
actions, scoring), over the window since the last call; waiting for the trainer to ask is idle.
"""

from __future__ import annotations

import logging
import os
import queue
import shutil
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_core.agent import AgentConfig, run_episode
from agent_core.env import EnvError
from agent_core.policies.base import Policy, PolicyError, make_policy
from agent_core.rl.episodes import RLEpisode
from agent_core.tasks.runner import prepare
from agent_core.tasks.spec import TaskSpec
from agent_core.training.episodes import rl_episode
from sandbox_workers.agent_env import SandboxEnv
from sandbox_workers.base import Profile, Provider, SandboxError
from sandbox_workers.providers import host_files
from sandbox_workers.providers.browser import BrowserProvider

log = logging.getLogger(__name__)
TRAIN_SEED_BASE = 10_000
"""Training rollouts draw seeds from here up; evaluation uses seeds below it (held back)."""


@dataclass(frozen=True)
class _Job:
    task_id: str
    seed: int
    max_steps: int


def _traversable(path: Path) -> None:
    """o+x on `path` and its parents up to /tmp: the confined browser's uid must traverse them."""
    for parent in [path, *path.parents]:
        if parent in (Path("/tmp"), Path("/")):  # noqa: S108 - stop at the shared roots
            break
        parent.chmod(parent.stat().st_mode | 0o011)  # noqa: S103 - traverse only (x)


class BrowserPool:
    """N started browser sandboxes (confined like the host's), one per environment thread."""

    def __init__(
        self, n: int, root: Path, *, slot_base: int = 250, width: int = 1280, height: int = 720
    ) -> None:
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        _traversable(root)
        host_files.make_readable()  # the MiniWoB pages its browsers bind (as the host does at start)
        self.providers: list[BrowserProvider] = []
        profile = Profile(name="train-browser", provider="browser", width=width, height=height)
        for i in range(n):
            # Named per process: a sandbox's name is its confinement's too (cgroup, pid file).
            p = BrowserProvider(sandbox_id=f"train{os.getpid()}-{i}", profile=profile, root=root / f"sb{i}")
            p.slot = slot_base + i
            p.start()
            self.providers.append(p)

    def envs(self) -> list[SandboxEnv]:
        return [SandboxEnv(p, platform="browser", a11y="elements") for p in self.providers]

    def close(self) -> None:
        for p in self.providers:
            try:
                p.stop()
            except Exception:  # noqa: BLE001 - stopping the rest matters more
                log.exception("stopping %s", p.sandbox_id)
        shutil.rmtree(self.root, ignore_errors=True)


def _recover(env: SandboxEnv) -> None:
    """After an env error: a sandbox whose browser died is relaunched (a fresh context), so its thread
    goes on rolling out instead of failing every episode it takes from then on."""
    provider = env.target
    if not isinstance(provider, Provider):
        return
    health = provider.health()
    if health.ok:
        return
    log.warning("sandbox %s is unhealthy (%s): relaunching it", provider.sandbox_id, health.detail)
    try:
        provider.reset()
    except Exception:  # noqa: BLE001 - the next attempt reports what is still wrong
        log.exception("relaunching sandbox %s failed", provider.sandbox_id)


def _episode(
    env: SandboxEnv,
    policy: Policy,
    spec: TaskSpec,
    seed: int,
    max_steps: int,
    history_images: int,
) -> tuple[float, Any, str]:
    """(reward, outcome, instruction) of one episode; EnvError/SandboxError propagate."""
    prepared = prepare(spec, env, seed=seed)
    outcome = run_episode(
        env,
        policy,
        prepared,
        config=AgentConfig(max_steps=max_steps, history_images=history_images, episodic_k=0),
    )
    return float(outcome.reward or 0.0), outcome, prepared.instruction


class LocalRolloutSource:
    """A RolloutSource over a BrowserPool: MiniWoB (or any browser) tasks, run by local threads."""

    def __init__(
        self,
        specs: Mapping[str, TaskSpec],
        pool: BrowserPool,
        *,
        policy: Mapping[str, Any],
        history_images: int = 3,
        seed_base: int = TRAIN_SEED_BASE,
    ) -> None:
        self.specs = dict(specs)
        self.pool = pool
        self.policy_config = {k: v for k, v in policy.items() if k != "observation"}
        self.history_images = history_images
        self._seed = seed_base
        self._jobs: queue.Queue[_Job | None] = queue.Queue()
        self._done: queue.Queue[RLEpisode] = queue.Queue()
        self._pending = 0
        self._lock = threading.Lock()
        self._current: tuple[int, Path] | None = None
        self._busy = 0.0
        self._window = time.monotonic()
        self.errors = 0
        self._threads = [
            threading.Thread(target=self._worker, args=(env,), daemon=True, name=f"rollout-{i}")
            for i, env in enumerate(pool.envs())
        ]
        for t in self._threads:
            t.start()

    # --- RolloutSource ---

    def tasks(self) -> list[str]:
        return sorted(self.specs)

    def publish(self, version: int, model_dir: Path) -> None:
        with self._lock:
            self._current = (version, Path(model_dir))

    def request(self, task_id: str, n: int, *, max_steps: int) -> int:
        if task_id not in self.specs:
            raise KeyError(f"unknown task {task_id!r}")
        with self._lock:
            seed = self._seed
            self._seed += 1
            self._pending += n
            for _ in range(n):
                self._jobs.put(_Job(task_id, seed, max_steps))
        return seed

    def poll(self, timeout: float) -> list[RLEpisode]:
        out: list[RLEpisode] = []
        try:
            out.append(self._done.get(timeout=timeout))
            while True:
                out.append(self._done.get_nowait())
        except queue.Empty:
            pass
        with self._lock:
            self._pending -= len(out)
        return out

    def pending(self) -> int:
        with self._lock:
            return self._pending

    def utilisation(self) -> float | None:
        with self._lock:
            now = time.monotonic()
            share = self._busy / max((now - self._window) * len(self._threads), 1e-9)
            self._busy, self._window = 0.0, now
        return min(1.0, share)

    def close(self) -> None:
        while True:
            try:
                self._jobs.get_nowait()
            except queue.Empty:
                break
        for _ in self._threads:
            self._jobs.put(None)
        for t in self._threads:
            t.join(timeout=120)

    # --- the environment threads ---

    def _worker(self, env: SandboxEnv) -> None:
        loaded: tuple[int, Path] | None = None
        policy: Policy | None = None
        while True:
            job = self._jobs.get()
            if job is None:
                break
            started = time.monotonic()
            with self._lock:
                current = self._current
            try:
                if current is None:
                    raise PolicyError("no policy has been published yet")
                if current != loaded:  # the newest policy, picked up between episodes
                    if policy is not None:
                        policy.close()
                    policy = make_policy("local", model_path=str(current[1]), **self.policy_config)
                    loaded = current
                assert policy is not None
                for attempt in range(3):
                    try:
                        reward, outcome, instruction = _episode(
                            env, policy, self.specs[job.task_id], job.seed, job.max_steps, self.history_images
                        )
                        break
                    except (EnvError, SandboxError) as exc:  # infrastructure: run it again
                        self.errors += 1
                        log.warning(
                            "%s seed %s: env error (%s), attempt %d", job.task_id, job.seed, exc, attempt
                        )
                        if attempt == 2:
                            raise
                        _recover(env)
                episode = rl_episode(
                    job.task_id,
                    job.seed,
                    reward,
                    instruction,
                    "browser",
                    outcome.steps,
                    policy_version=current[0],
                    history_images=self.history_images,
                    episode_id=f"{job.task_id}:{job.seed}",
                )
            except Exception:  # noqa: BLE001 - a lost episode is reported as failed with no turns
                log.exception("rollout of %s seed %s failed", job.task_id, job.seed)
                episode = RLEpisode(job.task_id, job.seed, 0.0, (), loaded[0] if loaded else -1)
            with self._lock:
                self._busy += time.monotonic() - started
            self._done.put(episode)
        if policy is not None:
            policy.close()


def evaluate(
    pool: BrowserPool,
    specs: Mapping[str, TaskSpec],
    seeds: Sequence[int],
    policy_factory: Callable[[], Policy],
    *,
    max_steps: int | None = None,
    history_images: int = 3,
    attempts: int = 3,
) -> dict[str, float]:
    """Success rate per task of a policy on fixed seeds (one episode per task and seed), in parallel.

    An episode the environment fails `attempts` times is left out of the rate (and logged)."""
    jobs: queue.Queue[tuple[str, int] | None] = queue.Queue()
    for task_id in sorted(specs):
        for seed in seeds:
            jobs.put((task_id, seed))
    results: dict[str, list[float]] = {t: [] for t in specs}
    env_errors: dict[str, int] = {}
    lock = threading.Lock()

    def worker(env: SandboxEnv) -> None:
        policy = policy_factory()
        try:
            while True:
                try:
                    item = jobs.get_nowait()
                except queue.Empty:
                    return
                if item is None:
                    return
                task_id, seed = item
                spec = specs[task_id]
                cap = max_steps or spec.limits.max_steps
                reward: float | None = None
                for _attempt in range(attempts):
                    try:
                        reward = _episode(env, policy, spec, seed, cap, history_images)[0]
                        break
                    except (EnvError, SandboxError) as exc:  # infrastructure, not the policy: re-run
                        log.warning("evaluating %s seed %s: env error (%s)", task_id, seed, exc)
                with lock:
                    if reward is None:
                        env_errors[task_id] = env_errors.get(task_id, 0) + 1
                    else:
                        results[task_id].append(float(reward >= 1.0))
        finally:
            policy.close()

    threads = [threading.Thread(target=worker, args=(env,), daemon=True) for env in pool.envs()]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if env_errors:  # episodes the environment failed three times are left out, and said so
        log.warning("evaluation left out env errors: %s", env_errors)
    return {t: sum(v) / len(v) if v else 0.0 for t, v in results.items()}
