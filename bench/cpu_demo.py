"""The CPU demonstration: a tiny policy learns MiniWoB++ tasks in real Chromium, SFT then RL.

    python bench/cpu_demo.py [--tasks click-test,click-test-2,...] [--seeds 0,1] [--envs 2]
                             [--demos 24] [--sft-steps 300] [--rl-iterations 12] [--eval 20]
                             [--algorithm grpo] [--out var/bench/cpu_demo.json]

1. Demonstrations: the scripted oracle solves each task on `--demos` seeds (seed range 20000+) in
   browser sandboxes that show the page as text elements; every valid step becomes an SFT example
   with the exact prompt the agent builds.
2. For every training seed: a tiny Qwen2 policy is built from a config (random weights) with a
   byte-level BPE tokenizer trained on the demonstrations' text; SFT on the demonstrations; then RL
   (GRPO with DART's curation by default, or PPO) with live rollouts in the same browser pool,
   training seeds 10000+.
3. Evaluation on held-back seeds 0..`--eval`-1 (never seen in demonstrations or RL), one greedy
   episode per task and seed, at most 6 steps: the random policy, the SFT-only policy and the RL
   policy.

It prints a table of success per task (mean over training seeds, and each seed) and writes the
figures as JSON. Nothing is hard-coded: the numbers are whatever the run gives, including tasks
where RL did not help.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_core.agent import AgentConfig, run_episode  # noqa: E402
from agent_core.policies import make_policy  # noqa: E402
from agent_core.suites import miniwob as suite  # noqa: E402
from agent_core.tasks.runner import prepare  # noqa: E402
from agent_core.training.checkpoints import latest_checkpoint  # noqa: E402
from agent_core.training.config import validate_config  # noqa: E402
from agent_core.training.episodes import sft_examples  # noqa: E402
from agent_core.training.runner import run  # noqa: E402
from agent_core.training.tiny_policy import POLICY_CONFIG, build_tiny_policy  # noqa: E402
from agent_core.training.types import NullHooks, RunSpec, SFTExample  # noqa: E402
from sandbox_workers.local_rollouts import BrowserPool, LocalRolloutSource, evaluate  # noqa: E402

DEFAULT_TASKS = "click-test,click-test-2,click-button,click-link,focus-text,click-dialog"
DEMO_SEED_BASE = 20_000
EVAL_STEPS = 6
"""Every policy gets the same step budget per evaluation episode (the RL runs are capped at 6 too)."""


class Hooks(NullHooks):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def on_log(self, message: str) -> None:
        print(f"[{self.prefix}] {message}", flush=True)


def demonstrations(pool: BrowserPool, specs: dict[str, Any], n: int) -> tuple[list[SFTExample], list[str]]:
    """Oracle episodes on demo seeds -> SFT examples (and the texts the tokenizer learns from)."""
    env = pool.envs()[0]
    oracle = make_policy("oracle")
    examples: list[SFTExample] = []
    texts: list[str] = []
    failed = 0
    for task_id, spec in sorted(specs.items()):
        for seed in range(DEMO_SEED_BASE, DEMO_SEED_BASE + n):
            prepared = prepare(spec, env, seed=seed)
            outcome = run_episode(env, oracle, prepared, config=AgentConfig(episodic_k=0))
            if (outcome.reward or 0) < 1.0:
                failed += 1
                continue
            exs = sft_examples(prepared.instruction, "browser", outcome.steps, source=f"{task_id}:{seed}")
            examples += exs
            texts.append(prepared.instruction)
            texts += [s.observation.a11y or "" for s in outcome.steps] + [e.response for e in exs]
    print(f"demonstrations: {len(examples)} examples from {len(specs) * n - failed} oracle episodes "
          f"({failed} oracle failures skipped)", flush=True)  # fmt: skip
    return examples, texts


def table(results: dict[str, Any], tasks: list[str]) -> str:
    rows = [f"{'task':<28} {'random':>7} {'SFT':>12} {'SFT+RL':>12}  per seed (SFT -> RL)"]
    for t in tasks + ["mean"]:
        rnd = results["random"][t]
        sft = [s["sft"][t] for s in results["seeds"]]
        rl = [s["rl"][t] for s in results["seeds"]]
        per = "  ".join(f"{a:.2f}->{b:.2f}" for a, b in zip(sft, rl, strict=True))
        rows.append(
            f"{t:<28} {rnd:>7.2f} {statistics.mean(sft):>6.2f}±{_sd(sft):.2f} "
            f"{statistics.mean(rl):>6.2f}±{_sd(rl):.2f}  {per}"
        )
    return "\n".join(rows)


def _sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def _with_mean(d: dict[str, float]) -> dict[str, float]:
    return {**d, "mean": sum(d.values()) / len(d)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default=DEFAULT_TASKS)
    ap.add_argument("--seeds", default="0,1", help="training seeds (model init, data order, sampling)")
    ap.add_argument("--envs", type=int, default=2)
    ap.add_argument("--demos", type=int, default=24, help="oracle demonstrations per task")
    ap.add_argument("--sft-steps", type=int, default=300)
    ap.add_argument("--rl-iterations", type=int, default=12)
    ap.add_argument("--episodes-per-iteration", type=int, default=16)
    ap.add_argument("--algorithm", choices=("grpo", "ppo"), default="grpo")
    ap.add_argument("--rl-lr", type=float, default=5e-4)
    ap.add_argument("--rl-minibatch", type=int, default=16, help="turns per RL gradient step")
    ap.add_argument("--rl-kl-coef", type=float, default=0.0, help="KL penalty to the SFT policy")
    ap.add_argument(
        "--rl-tasks",
        default="",
        help="the subset of --tasks that RL rolls out (default: all); evaluation covers every task",
    )
    ap.add_argument("--eval", type=int, default=20, help="held-back evaluation seeds per task (0..N-1)")
    ap.add_argument(
        "--random-eval", type=int, default=0, help="held-back seeds for the random policy (default: --eval)"
    )
    ap.add_argument("--out", default="var/bench/cpu_demo.json")
    ap.add_argument("--workdir", default="")
    args = ap.parse_args()
    t_start = time.monotonic()
    tasks = [suite.PREFIX + t.strip() for t in args.tasks.split(",") if t.strip()]
    all_specs = {s.id: s for s in suite.tasks()}
    unknown = [t for t in tasks if t not in all_specs]
    if unknown:
        sys.exit(f"unknown MiniWoB task(s): {', '.join(unknown)}")
    specs = {t: all_specs[t] for t in tasks}
    rl_tasks = [suite.PREFIX + t.strip() for t in args.rl_tasks.split(",") if t.strip()] or tasks
    if not set(rl_tasks) <= set(tasks):
        sys.exit(f"--rl-tasks must be among --tasks: {', '.join(sorted(set(rl_tasks) - set(tasks)))}")
    rl_specs = {t: specs[t] for t in rl_tasks}
    rl_suffix = "" if rl_tasks == tasks else "-on-" + "+".join(t.removeprefix(suite.PREFIX) for t in rl_tasks)
    work = Path(args.workdir or tempfile.mkdtemp(prefix="cpu-demo-"))
    work.mkdir(parents=True, exist_ok=True)
    pool = BrowserPool(args.envs, work / "sandboxes")
    results: dict[str, Any] = {"tasks": tasks, "rl_tasks": rl_tasks, "args": vars(args), "seeds": []}
    eval_seeds = list(range(args.eval))
    greedy = {k: v for k, v in POLICY_CONFIG.items() if k != "observation"}

    def evaluate_greedy(model_dir: Path) -> dict[str, float]:
        """A checkpoint's success per task on the held-back seeds, greedy, EVAL_STEPS steps at most."""

        def policy() -> Any:
            return make_policy("local", model_path=str(model_dir), **greedy)

        return evaluate(pool, specs, eval_seeds, policy, max_steps=EVAL_STEPS)

    try:
        # Demonstrations and the random baseline depend only on the tasks and seeds: a run in the same
        # --workdir reuses them (the JSON says so).
        demo_cache = work / f"demos-{'+'.join(sorted(specs))}-{args.demos}.json".replace("/", "_")
        if demo_cache.exists():
            cached = json.loads(demo_cache.read_text())
            examples, texts = [SFTExample(**e) for e in cached["examples"]], cached["texts"]
            print(f"demonstrations: {len(examples)} examples reused from {demo_cache}", flush=True)
            results["demonstrations_reused"] = str(demo_cache)
        else:
            examples, texts = demonstrations(pool, specs, args.demos)
            cached = {"examples": [dataclasses.asdict(e) for e in examples], "texts": texts}
            demo_cache.write_text(json.dumps(cached))
        results["demonstrations"] = len(examples)
        random_seeds = list(range(args.random_eval or args.eval))
        random_cache = work / f"random-{'+'.join(sorted(specs))}-{len(random_seeds)}.json".replace("/", "_")
        if random_cache.exists():
            results["random"] = json.loads(random_cache.read_text())
            results["random_reused"] = str(random_cache)
            print(f"random policy: reused {random_cache}: {results['random']}", flush=True)
        else:
            t = time.monotonic()
            results["random"] = _with_mean(
                evaluate(
                    pool,
                    specs,
                    random_seeds,
                    lambda: make_policy("random", seed=0),
                    max_steps=EVAL_STEPS,
                    attempts=1,
                )
            )
            random_cache.write_text(json.dumps(results["random"]))
            print(f"random policy evaluated in {time.monotonic() - t:.0f} s: {results['random']}", flush=True)
        for seed in [int(s) for s in args.seeds.split(",")]:
            # An SFT run of the same length in the same --workdir is reused with its evaluation, so
            # RL settings can be compared from one SFT policy (the JSON says so).
            sft_dir = latest_checkpoint(work / f"seed{seed}" / "sft")
            sft_cache = work / f"seed{seed}" / f"sft_eval-{args.eval}.json"
            if sft_dir is not None and sft_dir.name == f"step-{args.sft_steps:06d}":
                if sft_cache.exists():
                    sft_eval = json.loads(sft_cache.read_text())
                else:  # the same SFT policy on another number of held-back seeds
                    sft_eval = evaluate_greedy(sft_dir)
                    sft_cache.write_text(json.dumps(sft_eval))
                sft_s = 0.0
                print(f"[seed {seed}] SFT-only (reused {sft_dir}): {sft_eval}", flush=True)
            else:
                base = build_tiny_policy(work / f"seed{seed}" / "base", corpus=texts, seed=seed)
                sft_cfg = validate_config(
                    "sft",
                    {"max_steps": args.sft_steps, "batch_size": 16, "lr": 3e-3, "warmup_steps": 20,
                     "checkpoint_every": 10_000, "seed": seed},
                )  # fmt: skip
                t = time.monotonic()
                run(RunSpec("sft", sft_cfg, base, work / f"seed{seed}" / "sft"), Hooks(f"seed {seed} sft"),
                    examples=examples)  # fmt: skip
                sft_dir = latest_checkpoint(work / f"seed{seed}" / "sft")
                assert sft_dir is not None
                sft_s = time.monotonic() - t
                sft_eval = evaluate_greedy(sft_dir)
                sft_cache.write_text(json.dumps(sft_eval))
                print(f"[seed {seed}] SFT-only: {sft_eval}", flush=True)
            rl_cfg = validate_config(
                args.algorithm,
                {"iterations": args.rl_iterations, "episodes_per_iteration": args.episodes_per_iteration,
                 "lr": args.rl_lr, "minibatch_size": args.rl_minibatch, "kl_coef": args.rl_kl_coef,
                 "checkpoint_every": 10_000, "seed": seed,
                 "max_steps_per_episode": 6, "max_new_tokens": POLICY_CONFIG["max_new_tokens"],
                 "temperature": 1.0,
                 **({"value_pretrain_steps": 2} if args.algorithm == "ppo" else {})},
            )  # fmt: skip
            source = LocalRolloutSource(rl_specs, pool, policy={**greedy, "temperature": 1.0, "seed": None})
            rl_out = (
                work
                / f"seed{seed}"
                / (
                    f"rl-{args.algorithm}-lr{args.rl_lr:g}-e{args.episodes_per_iteration}-mb{args.rl_minibatch}"
                    f"-kl{args.rl_kl_coef:g}-it{args.rl_iterations}" + rl_suffix
                )
            )
            t = time.monotonic()
            hooks = Hooks(f"seed {seed} {args.algorithm}")
            rl_dir = latest_checkpoint(rl_out)
            if rl_dir is not None and rl_dir.name == f"step-{args.rl_iterations:06d}":
                # A finished RL run with the same settings in the same --workdir is evaluated again, not
                # retrained (more held-back seeds for the same policies; the JSON says so).
                source.close()
                print(f"[seed {seed}] RL (reused {rl_dir})", flush=True)
                results.setdefault("rl_reused", []).append(str(rl_dir))
            else:
                if rl_dir is not None:  # an interrupted run with these settings goes on from its checkpoint
                    print(f"[seed {seed}] RL resumed from {rl_dir}", flush=True)
                    results.setdefault("rl_resumed", []).append(str(rl_dir))
                try:
                    run(
                        RunSpec(args.algorithm, rl_cfg, sft_dir, rl_out, resume_from=rl_dir),
                        hooks,
                        source=source,
                    )
                finally:
                    source.close()
            rl_s = time.monotonic() - t
            rl_dir = latest_checkpoint(rl_out)
            assert rl_dir is not None
            rl_eval = evaluate_greedy(rl_dir)
            print(f"[seed {seed}] SFT+RL: {rl_eval}", flush=True)
            util = [m["rl/env_utilisation"] for _, m in hooks.metrics if "rl/env_utilisation" in m]
            results["seeds"].append(
                {
                    "seed": seed,
                    "sft": _with_mean(sft_eval),
                    "rl": _with_mean(rl_eval),
                    "sft_seconds": round(sft_s, 1),
                    "rl_seconds": round(rl_s, 1),
                    "rl_success_curve": [round(m.get("rl/success", 0.0), 3) for _, m in hooks.metrics],
                    # Per task: the curator moves rollouts to failing tasks, so the overall curve mixes
                    # tasks in changing shares; these say how each task's rollouts did (null: none).
                    "rl_success_per_task": {
                        t: [
                            round(m[f"rl/success/{t}"], 3) if f"rl/success/{t}" in m else None
                            for _, m in hooks.metrics
                        ]
                        for t in rl_tasks
                    },
                    "env_utilisation_mean": round(sum(util) / len(util), 3) if util else None,
                }
            )
    finally:
        pool.close()
    results["seconds"] = round(time.monotonic() - t_start, 1)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(results, indent=2))
    print()
    print(f"success on held-back seeds 0..{args.eval - 1} (random policy: 0..{len(random_seeds) - 1}), "
          f"{args.algorithm.upper()}, "
          f"training seeds {args.seeds}, {results['seconds']:.0f} s in all")  # fmt: skip
    print(table(results, tasks))
    print(f"figures written to {out}")


if __name__ == "__main__":
    main()
