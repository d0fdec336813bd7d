"""Serving the policy: in-process transformers vs a real vLLM engine, a LoRA hot-load, a rolling update.

    python bench/serving_bench.py [--tasks click-test,click-button,focus-text] [--seeds 0,1,2,3] [--envs 2]
                                  [--max-steps 6] [--sft-steps 50] [--demos 4] [--model DIR]
                                  [--parts abcd] [--json PATH]

The tiny policy (agent_core.training.tiny_policy, run with its POLICY_CONFIG: text elements in,
absolute coordinates out, greedy) is built here and briefly taught by SFT on the scripted oracle's
demonstrations (so its steps act; --sft-steps 0 keeps random weights), or taken from --model. Then the
same rollout batch (the same MiniWoB tasks and seeds on the same browser sandboxes, one thread each):

(a) with the policy in this process (the local policy, transformers; one model per thread);
(b) with the same weights served by a vLLM engine this bench starts (OpenAIPolicy, text_only, the same
    sampling settings; least-outstanding routing, one server);
(c) on the engine again, a LoRA adapter of the same base (built with peft, non-zero weights) is loaded
    into it mid-batch (POST /v1/load_lora_adapter) and new episodes switch to the adapter's name;
(d) a rolling full-weight update: a second engine serves the same name, the policy spreads requests
    over both (base_urls), and while the batch runs each engine in turn is restarted on a copy of the
    weights; the policy's failover must carry the requests of the engine that went away.

With --vision the policy is a tiny Qwen2.5-VL (agent_core.tiny_models), taught on the demonstrations'
screenshots, reading the current screenshot and --history-images earlier ones; the engine is sized as
`python -m agent_core.serving` sizes it (serving.engine.vision_engine_args), the requests carry the
images (not text_only), and after (b) the trainer re-scores the engine's sampled tokens of up to 12
turns with the same screenshots: the engine/trainer log-prob gap. Parts (c) and (d) are text-only here.

Figures per batch: episodes/min, step latency (policy turn + action), policy-turn latency, generated
tokens/s (from the token ids the policy returned), and (b)/(a). Exits 1 when (c) or (d) lost a step
(a failed policy turn ends its episode) or the adapter did not load.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import warnings
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from serving_parts import (  # noqa: E402
    Batch,
    Job,
    Metered,
    Recorder,
    engine_version,
    figures,
    free_port,
    logprob_gap,
    lost_steps,
    make_adapter,
    pct,
    report_compare,
    report_lora,
    report_rolling,
    tiny_policy,
    warm_up,
)

from agent_core.policies import make_policy  # noqa: E402
from agent_core.policies.base import Policy  # noqa: E402
from agent_core.policies.openai import SERVERS  # noqa: E402
from agent_core.serving.engine import Engine, EngineError, EngineSpec, vision_engine_args  # noqa: E402
from agent_core.suites import miniwob as suite  # noqa: E402
from agent_core.training.sampling import placeholder_ids_in  # noqa: E402
from agent_core.training.tiny_policy import POLICY_CONFIG  # noqa: E402
from sandbox_workers.local_rollouts import BrowserPool  # noqa: E402

SERVED = "tiny-policy"
SCREEN = (1280, 720)
"""The browser sandboxes' screen (what a VLM engine is sized for)."""
ADAPTER = "tiny-policy-lora"


@dataclasses.dataclass
class Setup:
    """What every part runs with."""

    args: argparse.Namespace
    work: Path
    pool: BrowserPool
    specs: dict[str, Any]
    jobs: list[Job]
    model: Path
    sampling: dict[str, Any]
    engines: list[Engine] = dataclasses.field(default_factory=list)

    def batch(
        self, policy_for: Callable[[int], Policy], keep_going: Callable[[], bool] | None = None
    ) -> Batch:
        return Batch(
            self.pool,
            self.specs,
            self.jobs,
            policy_for,
            max_steps=self.args.max_steps,
            keep_going=keep_going,
            history_images=self.args.history_images,
        )

    def start_engine(self, model: Path, env: dict[str, str] | None = None) -> Engine:
        """A vLLM server for `model` under SERVED, started and healthy (kept in `engines` to stop); a
        vision-language model's sized for its screenshots as `python -m agent_core.serving` sizes it."""
        context, vision_args = vision_engine_args(
            model,
            screen=SCREEN,
            history_images=self.args.history_images,
            max_new_tokens=self.args.max_new_tokens,
        )
        spec = EngineSpec(
            model=model,
            served_name=SERVED,
            port=free_port(),
            python=self.args.vllm_python,
            max_loras=2,
            dtype=self.args.engine_dtype,
            env=env or {},
            max_model_len=context or 4096,
            extra_args=tuple(vision_args),
        )
        engine = Engine(spec, log_path=self.work / "logs" / f"vllm-{spec.port}-{len(self.engines)}.log")
        self.engines.append(engine)
        engine.start()
        engine.wait_ready(timeout_s=600)
        return engine

    def remote(self, urls: list[str], model: str, recorder: Recorder, thread: int) -> Metered:
        extra: dict[str, Any] = {"return_token_ids": True}
        if self.args.vision:  # as a served twin asks: the image placeholders are never sampled
            config = json.loads((self.model / "config.json").read_text())
            extra["logit_bias"] = {str(i): -100 for i in placeholder_ids_in(config)}
        policy = make_policy(
            "openai",
            base_url=urls[0],
            base_urls=urls[1:],
            model=model,
            text_only=not self.args.vision,
            extra_body=extra,
            **self.sampling,
        )
        return Metered(policy, recorder, thread)


def recorder(s: Setup, keep_samples: int = 0) -> Recorder:
    image_id = None
    if s.args.vision:
        config = json.loads((s.model / "config.json").read_text())
        image_id = config.get("image_token_id")
    return Recorder(image_token_id=image_id, keep_samples=keep_samples)


def part_local(s: Setup) -> dict[str, Any]:
    """(a) the policy in this process, one model per environment thread (as LocalRolloutSource runs it)."""
    rec = recorder(s)
    policies = [make_policy("local", model_path=str(s.model), **s.sampling) for _ in range(s.args.envs)]
    for p in policies:
        warm_up(p)
    batch = s.batch(lambda i: Metered(policies[i], rec, i)).run()
    for p in policies:
        p.close()
    return figures(batch, rec.turns())


def part_engine(s: Setup, engine: Engine) -> dict[str, Any]:
    """(b) the same weights and batch, served by the engine (a VLM's gap to the trainer measured after)."""
    rec = recorder(s, keep_samples=12 if s.args.vision else 0)
    policies = [s.remote([engine.spec.base_url], SERVED, rec, i) for i in range(s.args.envs)]
    for p in policies:
        warm_up(p.inner)
    batch = s.batch(lambda i: policies[i]).run()
    for p in policies:
        p.close()
    out = figures(batch, rec.turns())
    if s.args.vision:
        out["gap"] = logprob_gap(s.model, rec.turns())
    return out


def part_lora(s: Setup, engine: Engine) -> dict[str, Any]:
    """(c) an adapter loaded into the engine while the batch runs; new episodes switch to its name."""
    adapter = make_adapter(s.model, s.work / "adapter")
    rec = Recorder()
    current = {"model": SERVED}
    cache: dict[tuple[int, str], Metered] = {}

    def policy_for(i: int) -> Policy:
        key = (i, current["model"])
        if key not in cache:
            cache[key] = s.remote([engine.spec.base_url], key[1], rec, i)
        return cache[key]

    batch = s.batch(policy_for)
    batch.start()
    trigger = max(1, len(s.jobs) // 3)
    while batch.done() < trigger and batch.running():
        time.sleep(0.05)
    t0 = time.monotonic()
    load_error = ""
    try:
        engine.load_adapter(ADAPTER, adapter)
        current["model"] = ADAPTER
    except EngineError as exc:
        load_error = str(exc)
    t1 = time.monotonic()
    batch.join()
    for p in cache.values():
        p.close()
    turns = rec.turns()
    adapter_turns = [t for t in turns if t.model == ADAPTER and not t.error]
    during = [t.seconds for t in turns if not t.error and t.started < t1 and t.started + t.seconds > t0]
    steps = Counter(st.info.get("model", "?") for e in batch.episodes for st in e.steps)
    out = figures(batch, turns)
    out.update(
        load_s=round(t1 - t0, 3),
        load_after_episodes=trigger,
        load_error=load_error,
        steps_by_model=dict(steps),
        turns_by_model=dict(Counter(t.model for t in turns if not t.error)),
        turns_during_load=len(during),
        turn_p50_during_load_s=pct(during, 0.5),
        served_after=[m["id"] for m in engine.models()],
        # vLLM reads the adapter's weights on its first request, not in the load call.
        first_adapter_turn_s=round(min(adapter_turns, key=lambda t: t.started).seconds, 3)
        if adapter_turns
        else None,
    )
    return out


def _wait_for_turn(rec: Recorder, server: str, since: float, timeout_s: float) -> float | None:
    """Seconds after `since` at which a turn served by `server` (started after `since`) came back."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ends = [t.started + t.seconds for t in rec.turns() if t.server == server and t.started >= since]
        if ends:
            return min(ends) - since
        time.sleep(0.2)
    return None


def _restart(s: Setup, index: int, weights: Path, rec: Recorder) -> dict[str, Any]:
    """Stop engine `index` and start it again on `weights` at the same address; wait until it answers
    the batch again (so the other engine is not taken down while this one is out of the rotation)."""
    old = s.engines[index]
    url = old.spec.base_url
    t0 = time.monotonic()
    old.stop()
    stopped = time.monotonic() - t0
    fresh = Engine(
        dataclasses.replace(old.spec, model=weights),
        log_path=s.work / "logs" / f"vllm-{old.spec.port}-v2.log",
    )
    s.engines[index] = fresh
    fresh.start()
    fresh.wait_ready(timeout_s=600)
    ready = time.monotonic() - t0
    answered = _wait_for_turn(rec, url, t0 + ready, timeout_s=180)
    return {
        "server": url,
        "stopped_at": t0,
        "stop_s": round(stopped, 1),
        "down_s": round(ready, 1),
        "answered_batch_after_s": None if answered is None else round(ready + answered, 1),
    }


def part_rolling(s: Setup) -> dict[str, Any]:
    """(d) two engines behind base_urls; each restarted in turn on a copy of the weights mid-batch."""
    t0 = time.monotonic()
    # vLLM-CPU pins its worker to cores ("auto": all but one); a second engine on the same machine gets
    # cores of its own, or each would start (and serve) on the cores the other is busy on.
    cores = s.args.second_engine_cores
    s.start_engine(s.model, env={"VLLM_CPU_OMP_THREADS_BIND": cores} if cores else None)
    second_start = time.monotonic() - t0
    weights = Path(shutil.copytree(s.model, s.work / "weights-v2"))
    urls = [e.spec.base_url for e in s.engines[-2:]]
    SERVERS.reset()
    rec = Recorder()
    policies = [s.remote(urls, SERVED, rec, i) for i in range(s.args.envs)]
    done = threading.Event()
    batch = s.batch(lambda i: policies[i], keep_going=lambda: not done.is_set())
    batch.start()
    restarts: list[dict[str, Any]] = []
    update_error = ""
    try:
        begun = time.monotonic()
        for url in urls:  # both in the rotation before the first goes away
            _wait_for_turn(rec, url, begun, timeout_s=120)
        for index in (len(s.engines) - 2, len(s.engines) - 1):
            restarts.append(_restart(s, index, weights, rec))
    except EngineError as exc:  # an engine that did not come back: the update failed (reported)
        update_error = str(exc)
    finally:
        done.set()
        batch.join()
    for p in policies:
        p.close()
    turns = rec.turns()
    for r in restarts:  # the turns under way when the engine was stopped: carried by a retry or failover?
        at = r.pop("stopped_at")
        under_way = [t for t in turns if t.started < at < t.started + t.seconds]
        r["turns_under_way_at_stop"] = len(under_way)
        # Sent to the stopping engine first, then retried there and failed over (the others ran elsewhere).
        r["failed_over_at_stop"] = sum(1 for t in under_way if t.attempts > 1 and t.server != r["server"])
    out = figures(batch, turns)
    out.update(
        second_engine_start_s=round(second_start, 1),
        second_engine_cores=cores or "auto",
        update_error=update_error,
        restarts=restarts,
        turns_by_server=dict(Counter(t.server for t in turns if not t.error)),
        turns_retried=sum(1 for t in turns if not t.error and t.attempts > 1),
    )
    return out


def parse_args() -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="click-test,click-button,focus-text", help="MiniWoB tasks")
    ap.add_argument("--seeds", default="0,1,2,3", help="seeds per task (the batch is tasks x seeds)")
    ap.add_argument("--envs", type=int, default=2, help="browser sandboxes, one thread each")
    ap.add_argument("--max-steps", type=int, default=6, help="step budget per episode")
    ap.add_argument("--model", default="", help="serve this model directory instead of building one")
    ap.add_argument("--sft-steps", type=int, default=50, help="SFT steps on the demonstrations (0: random)")
    ap.add_argument("--demos", type=int, default=4, help="oracle demonstrations per task")
    ap.add_argument("--temperature", type=float, default=POLICY_CONFIG["temperature"])
    ap.add_argument("--max-new-tokens", type=int, default=POLICY_CONFIG["max_new_tokens"])
    ap.add_argument("--parts", default="abcd", help="which parts to run (a, b, c, d)")
    ap.add_argument("--engine-dtype", default="auto", help="the engine's --dtype (the agent runs auto)")
    ap.add_argument(
        "--vllm-python", default=os.environ.get("VLLM_PYTHON") or str(ROOT / ".venv-vllm/bin/python")
    )
    ap.add_argument(
        "--second-engine-cores",
        default=str((os.cpu_count() or 1) - 1) if (os.cpu_count() or 1) > 1 else "",
        help="VLLM_CPU_OMP_THREADS_BIND of the second engine in (d) (default: the last core, which the "
        "first engine's 'auto' leaves free; empty: auto)",
    )
    ap.add_argument("--vision", action="store_true", help="a tiny Qwen2.5-VL reading screenshots")
    ap.add_argument("--history-images", type=int, default=3, help="earlier screenshots per prompt (--vision)")
    ap.add_argument("--json", default="", help="also write the figures to this file")
    ap.add_argument("--workdir", default="", help="keep models, adapter and engine logs here")
    args = ap.parse_args()
    if not set(args.parts) <= set("abcd") or not args.parts:
        ap.error(f"--parts: letters among a, b, c, d, got {args.parts!r}")
    if args.envs < 1 or args.max_steps < 1:
        ap.error("--envs and --max-steps must be at least 1")
    return args


def header(args: argparse.Namespace, n_tasks: int, n_jobs: int) -> None:
    import torch
    import transformers

    transformers.utils.logging.disable_progress_bar()
    transformers.utils.logging.set_verbosity_error()
    warnings.filterwarnings("ignore", category=FutureWarning)  # peft on this transformers

    load = os.getloadavg()[0]
    print(
        f"serving bench: {n_tasks} MiniWoB tasks x {len(args.seeds.split(','))} seeds = {n_jobs} episodes "
        f"per batch on {args.envs} browser sandboxes (one thread each), at most {args.max_steps} steps each"
    )
    print(
        f"machine: {os.cpu_count()} cores (load average {load:.1f} at start); in-process: torch "
        f"{torch.__version__} with {torch.get_num_threads()} threads"
    )
    print(
        f"engine: {engine_version(args.vllm_python)} from {args.vllm_python} (--dtype {args.engine_dtype}, "
        f"--enable-lora; OpenAIPolicy {'with the screenshots' if args.vision else 'text_only'}, "
        "return_token_ids)"
    )


def run_parts(s: Setup) -> dict[str, Any]:
    """The parts asked for, each timed; the engine of (b) is the one (c) loads into and (d) restarts."""
    res: dict[str, Any] = {"seconds": {}}

    def timed(key: str, label: str, fn: Callable[[], dict[str, Any]]) -> None:
        t0 = time.monotonic()
        res[key] = fn()
        res["seconds"][key] = round(time.monotonic() - t0, 1)
        print(f"[{key}] {label}: {res['seconds'][key]:.0f} s", flush=True)

    if "a" in s.args.parts:
        timed("a", "in-process batch (with loading the models)", lambda: part_local(s))
    if set(s.args.parts) & set("bcd"):
        t0 = time.monotonic()
        s.start_engine(s.model)
        res["seconds"]["engine_start"] = round(time.monotonic() - t0, 1)
        print(f"[engine] vLLM started and healthy in {res['seconds']['engine_start']:.0f} s", flush=True)
    if "b" in s.args.parts:
        timed("b", "engine batch", lambda: part_engine(s, s.engines[0]))
        if "gap" in res["b"]:
            res["gap"] = res["b"].pop("gap")
    if "c" in s.args.parts:
        timed("c", "LoRA hot-load batch (with building the adapter)", lambda: part_lora(s, s.engines[0]))
    if "d" in s.args.parts:
        timed("d", "rolling update (with starting the second engine)", lambda: part_rolling(s))
    return res


def main() -> int:
    args = parse_args()
    t_start = time.monotonic()
    tasks = [suite.PREFIX + t.strip() for t in args.tasks.split(",") if t.strip()]
    all_specs = {spec.id: spec for spec in suite.tasks()}
    unknown = [t for t in tasks if t not in all_specs]
    if unknown:
        sys.exit(f"unknown MiniWoB task(s): {', '.join(unknown)}")
    specs = {t: all_specs[t] for t in tasks}
    jobs = [Job(t, int(seed)) for t in tasks for seed in args.seeds.split(",")]
    header(args, len(tasks), len(jobs))
    work = Path(args.workdir or tempfile.mkdtemp(prefix="serving-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    pool = BrowserPool(args.envs, work / "sandboxes")
    sampling = {
        "coords": POLICY_CONFIG["coords"],
        "temperature": args.temperature,
        "max_new_tokens": args.max_new_tokens,
    }
    s = Setup(args, work, pool, specs, jobs, Path(args.model), sampling)
    try:
        t0 = time.monotonic()
        if args.model:
            what = "given"
        else:
            s.model, what = tiny_policy(
                pool, specs, work / "policy", demos=args.demos, sft_steps=args.sft_steps, vision=args.vision
            )
        print(f"policy: {s.model} ({what}; {time.monotonic() - t0:.0f} s); {sampling}", flush=True)
        res = run_parts(s)
    finally:
        for engine in s.engines:
            engine.close()
        pool.close()
    report_compare(res)
    if "c" in res:
        report_lora(res["c"])
    if "d" in res:
        report_rolling(res["d"])
    lost = {k: lost_steps(res[k]) for k in ("c", "d") if k in res}
    res.update(args=vars(args), model=str(s.model), lost=lost, total_s=round(time.monotonic() - t_start, 1))
    print(f"\n{res['total_s']:.0f} s in all; engine logs and models in {work}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(res, indent=2, default=str))
    errors = {k: res[k][e] for k, e in (("c", "load_error"), ("d", "update_error")) if res.get(k, {}).get(e)}
    failed = any(lost.values()) or bool(errors)
    if failed:
        print(f"FAILED: steps lost {lost}" + "".join(f"; ({k}) {e}" for k, e in errors.items()))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
