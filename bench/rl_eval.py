"""Does RL beat SFT? An evaluation protocol fixed before the run, on the no-browser toy task.

    python bench/rl_eval.py [--tasks toy/buttons-3,toy/buttons-4] [--train-seeds 0,1,2]
                            [--demos 24] [--demo-mistakes 0.0] [--episode-steps 3]
                            [--algorithm grpo|ppo] [--sft-grid 40,80,160,320] [--lr-grid 1e-4,3e-4,1e-3]
                            [--group-size 8] [--informative-groups 150] [--episodes-per-iteration 32]
                            [--val-seeds 32] [--test-seeds 64] [--sampled-k 2] [--primary greedy]
                            [--workdir DIR] [--out var/bench/rl_eval.json]

The toy task ("click the named button", agent_core/training/toy.py) is the known-answer check: the
right action of every page is known, demonstrations are exact, and SFT on a few of them leaves
headroom, so a working RL step must raise success; it runs in minutes before browser time is spent.

The protocol (printed and written before anything trains, so nothing is chosen after seeing test
figures):
1. Seeds of pages are disjoint: demonstrations 20000+, RL rollouts 10000+, validation 5000+, test 0+.
   With --demo-mistakes m, a share m of the demonstrations click another button than the one named
   (a demonstrator's slip, thought included): SFT imitates the slips, and the checker's reward is what
   can correct them. --episode-steps 1 scores the first click alone (no retry after a miss).
2. Per training seed s: a tiny policy built with seed s, one SFT run checkpointed at every length of
   --sft-grid. The SFT length is chosen on the validation pages only: the longest (the strongest
   SFT-only arm) whose *sampled* success (temperature 1, as RL samples) lies in [0.2, 0.8] on every
   task (RL needs headroom and a non-zero chance of success); failing that, the one whose mean sampled
   success is nearest 0.5. Both arms start from that one checkpoint (paired).
3. The learning rate is chosen on the first training seed, on the validation pages only (greedy
   success of the RL policy), then fixed for the other seeds.
4. RL: GRPO with groups of --group-size, dynamic sampling (groups that all agree are not counted), and
   iterations enough for --informative-groups informative groups; or PPO (--algorithm ppo).
5. Test pages are never seen before step 6. Each arm is evaluated greedily and sampled (--sampled-k
   samples at temperature 1, averaged) on every task and test seed; the random policy beside them.
6. The primary metric (named in advance by --primary) is the mean success over the task set (each task
   weighs alike). Per training seed the paired difference SFT+RL − SFT-only; across training seeds its
   mean ± standard error and a paired bootstrap interval (training seeds and test pages resampled).
   The verdict is "beats" only when the mean exceeds 2 standard errors over ≥ 3 training seeds.

Nothing is hard-coded: the figures are what the run gives, tasks where RL did not help included.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_core.policies import make_policy  # noqa: E402
from agent_core.rl.evaluation import Item, mean_success, paired, per_task  # noqa: E402
from agent_core.training.checkpoints import checkpoint_dir, latest_checkpoint  # noqa: E402
from agent_core.training.config import validate_config  # noqa: E402
from agent_core.training.errors import TrainingError  # noqa: E402
from agent_core.training.runner import run  # noqa: E402
from agent_core.training.tiny_policy import build_tiny_policy  # noqa: E402
from agent_core.training.toy import ToySource, oracle_examples, toy_episode  # noqa: E402
from agent_core.training.types import NullHooks, RunSpec  # noqa: E402

DEMO_SEEDS, RL_SEEDS, VAL_SEEDS, TEST_SEEDS = 20_000, 10_000, 5_000, 0
EPISODE_STEPS = 3
"""Default step budget of every episode, RL and evaluation alike (a miss may be retried twice)."""
HEADROOM = (0.2, 0.8)
POLICY = {"coords": "absolute", "max_new_tokens": 32}


class Hooks(NullHooks):
    def __init__(self, prefix: str) -> None:
        super().__init__()
        self.prefix = prefix

    def on_log(self, message: str) -> None:
        print(f"[{self.prefix}] {message}", flush=True)


def evaluate(
    model_dir: Path | None,
    tasks: list[str],
    seeds: range,
    *,
    temperature: float,
    k: int = 1,
    seed: int = 0,
    steps: int = EPISODE_STEPS,
) -> dict[Item, float]:
    """Success per (task, seed): greedy (temperature 0, k=1) or the mean of k samples; model_dir None is
    the random policy."""
    if model_dir is None:
        policy: Any = make_policy("random", seed=seed)
    else:
        policy = make_policy("local", model_path=str(model_dir), temperature=temperature, seed=seed, **POLICY)
    out: dict[Item, float] = {}
    try:
        for task in tasks:
            for s in seeds:
                out[(task, s)] = sum(toy_episode(policy, task, s, steps).reward for _ in range(k)) / k
    finally:
        close = getattr(policy, "close", None)
        if close:
            close()
    return out


def choose_sft(
    sft_dir: Path, grid: list[int], tasks: list[str], val: range, seed: int, episode_steps: int
) -> tuple[int, dict[str, Any]]:
    """The SFT length the protocol picks on the validation pages (sampled success), with the evidence."""
    evidence: dict[str, Any] = {}
    for steps in grid:  # every length is measured (the evidence); the longest with headroom is taken
        sampled = per_task(
            evaluate(
                checkpoint_dir(sft_dir, steps), tasks, val, temperature=1.0, seed=seed, steps=episode_steps
            )
        )
        evidence[str(steps)] = sampled
        print(f"[seed {seed}] SFT {steps} steps: sampled validation success {sampled}", flush=True)
    roomy = [n for n in grid if all(HEADROOM[0] <= v <= HEADROOM[1] for v in evidence[str(n)].values())]
    if roomy:
        return max(roomy), {"rule": "longest with every task's sampled success in [0.2, 0.8]", **evidence}
    best = min(grid, key=lambda n: abs(sum(evidence[str(n)].values()) / len(tasks) - 0.5))
    return best, {
        "rule": "no length had headroom on every task: mean sampled success nearest 0.5",
        **evidence,
    }


def rl_config(args: argparse.Namespace, lr: float, seed: int) -> dict[str, Any]:
    per_iteration = args.episodes_per_iteration
    iterations = max(1, math.ceil(args.informative_groups * args.group_size / per_iteration))
    raw: dict[str, Any] = {
        "iterations": iterations,
        "episodes_per_iteration": per_iteration,
        "lr": lr,
        "minibatch_size": 16,
        "checkpoint_every": 1_000_000,
        "seed": seed,
        "max_steps_per_episode": args.episode_steps,
        "max_new_tokens": POLICY["max_new_tokens"],
        "temperature": 1.0,
    }
    if args.algorithm == "grpo":
        raw |= {
            "group_size": args.group_size,
            "min_rollouts": args.group_size,
            "max_rollouts": args.group_size,
        }
    return validate_config(args.algorithm, raw)


def train_rl(
    args: argparse.Namespace, start: Path, out: Path, lr: float, seed: int
) -> tuple[Path, dict[str, Any]]:
    """An RL run from `start` (reused when finished in the same work dir); its last checkpoint and counts."""
    cfg = rl_config(args, lr, seed)
    done = latest_checkpoint(out)
    hooks = Hooks(f"seed {seed} {args.algorithm} lr {lr:g}")
    error = ""
    if done is None or done.name != f"step-{cfg['iterations']:06d}":
        source = ToySource(
            args.task_list, policy={**POLICY, "temperature": 1.0}, seed_base=RL_SEEDS + 1000 * seed
        )
        try:
            run(RunSpec(args.algorithm, cfg, start, out, resume_from=done), hooks, source=source)
        except TrainingError as exc:  # e.g. nothing to learn from: the arm is what the run left
            error = str(exc)
            print(f"[seed {seed}] RL failed: {error}", flush=True)
        finally:
            source.close()
    last = latest_checkpoint(out) or start
    counts = {
        "error": error,
        "iterations": cfg["iterations"],
        "episodes": sum(m.get("rl/episodes", 0.0) for _, m in hooks.metrics),
        "turns_trained": sum(m.get("rl/turns_trained", 0.0) for _, m in hooks.metrics),
        "success_curve": [round(m.get("rl/success", 0.0), 3) for _, m in hooks.metrics],
    }
    return last, counts


def one_seed(args: argparse.Namespace, work: Path, seed: int, lr: float | None) -> dict[str, Any]:
    """Steps 2–5 of the protocol for one training seed; `lr` None: choose it here (first seed)."""
    tasks, grid = args.task_list, args.grid
    val, test = range(VAL_SEEDS, VAL_SEEDS + args.val_seeds), range(TEST_SEEDS, TEST_SEEDS + args.test_seeds)
    examples = oracle_examples(tasks, range(DEMO_SEEDS, DEMO_SEEDS + args.demos), mistakes=args.demo_mistakes)
    base = work / f"seed{seed}" / "base"
    if not (base / "config.json").exists():
        corpus = [e.a11y or "" for e in examples] + [e.response for e in examples]
        build_tiny_policy(base, corpus=corpus, seed=seed)
    sft_out = work / f"seed{seed}" / "sft"
    last = latest_checkpoint(sft_out)
    if last is None or last.name != f"step-{max(grid):06d}":
        cfg = validate_config(
            "sft",
            {"max_steps": max(grid), "batch_size": 16, "lr": 3e-3, "warmup_steps": 10, "seed": seed,
             "checkpoint_every": math.gcd(*grid)},
        )  # fmt: skip
        run(RunSpec("sft", cfg, base, sft_out), Hooks(f"seed {seed} sft"), examples=examples)
    sft_steps, sft_evidence = choose_sft(sft_out, grid, tasks, val, seed, args.episode_steps)
    start = checkpoint_dir(sft_out, sft_steps)
    lr_evidence: dict[str, float] = {}
    if lr is None:
        for candidate in args.lrs:
            rl_dir, _ = train_rl(args, start, work / f"seed{seed}" / f"rl-lr{candidate:g}", candidate, seed)
            lr_evidence[f"{candidate:g}"] = mean_success(
                evaluate(rl_dir, tasks, val, temperature=0.0, steps=args.episode_steps)
            )
            score = lr_evidence[f"{candidate:g}"]
            print(f"[seed {seed}] lr {candidate:g}: greedy validation success {score:.3f}", flush=True)
        lr = float(max(lr_evidence, key=lambda key: lr_evidence[key]))
    rl_dir, counts = train_rl(args, start, work / f"seed{seed}" / f"rl-lr{lr:g}", lr, seed)
    arms = {}
    for name, model in (("sft", start), ("rl", rl_dir)):
        arms[name] = {
            "greedy": evaluate(model, tasks, test, temperature=0.0, seed=seed, steps=args.episode_steps),
            "sampled": evaluate(
                model, tasks, test, temperature=1.0, k=args.sampled_k, seed=seed, steps=args.episode_steps
            ),
        }
        print(f"[seed {seed}] {name}: greedy {per_task(arms[name]['greedy'])}", flush=True)
    return {"seed": seed, "sft_steps": sft_steps, "sft_choice": sft_evidence, "lr": lr,
            "lr_choice": lr_evidence, "rl": counts, "arms": arms}  # fmt: skip


def report(
    args: argparse.Namespace, seeds: list[dict[str, Any]], random_arm: dict[Item, float]
) -> dict[str, Any]:
    """The verdict per metric, per-task tables and where RL did not help."""
    out: dict[str, Any] = {"random": per_task(random_arm) | {"mean": mean_success(random_arm)}}
    for metric in ("greedy", "sampled"):
        sft = [s["arms"]["sft"][metric] for s in seeds]
        rl = [s["arms"]["rl"][metric] for s in seeds]
        result = paired(sft, rl)
        tasks = {
            t: {
                "sft": sum(per_task(a)[t] for a in sft) / len(sft),
                "rl": sum(per_task(b)[t] for b in rl) / len(rl),
            }
            for t in args.task_list
        }
        out[metric] = {
            "sft_mean": sum(mean_success(a) for a in sft) / len(sft),
            "rl_mean": sum(mean_success(b) for b in rl) / len(rl),
            "diff_per_seed": list(result.per_seed),
            "diff_mean": result.mean,
            "diff_se": result.se,
            "bootstrap_95": [result.ci_low, result.ci_high],
            "beats_by_2se": result.beats(2.0) and len(seeds) >= 3,
            "per_task": tasks,
            "not_helped": [t for t, v in tasks.items() if v["rl"] <= v["sft"]],
        }
    return out


def _print(args: argparse.Namespace, summary: dict[str, Any]) -> None:
    for metric in ("greedy", "sampled"):
        s = summary[metric]
        tag = " (primary)" if metric == args.primary else ""
        print(f"\n{metric}{tag}: SFT {s['sft_mean']:.3f}  SFT+RL {s['rl_mean']:.3f}  random "
              f"{summary['random']['mean']:.3f}")  # fmt: skip
        low, high = s["bootstrap_95"]
        verdict = "BEATS by > 2 SE" if s["beats_by_2se"] else "not shown"
        per_seed = [round(d, 3) for d in s["diff_per_seed"]]
        print(f"  paired difference {s['diff_mean']:+.3f} ± {s['diff_se']:.3f} (SE), per seed {per_seed}, "
              f"bootstrap 95% [{low:+.3f}, {high:+.3f}]: {verdict}")  # fmt: skip
        for task, v in s["per_task"].items():
            print(
                f"  {task:<18} random {summary['random'][task]:.3f}  SFT {v['sft']:.3f}  SFT+RL {v['rl']:.3f}"
            )
        if s["not_helped"]:
            print(f"  RL did not help on: {', '.join(s['not_helped'])}")


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tasks", default="toy/buttons-3,toy/buttons-4")
    ap.add_argument("--train-seeds", default="0,1,2")
    ap.add_argument("--algorithm", choices=("grpo", "ppo"), default="grpo")
    ap.add_argument("--demos", type=int, default=24, help="demonstration pages per task")
    ap.add_argument(
        "--demo-mistakes",
        type=float,
        default=0.0,
        help="share of demonstrations that click another button than the one named",
    )
    ap.add_argument(
        "--episode-steps",
        type=int,
        default=EPISODE_STEPS,
        help="step budget of every episode (1: no retry after a miss)",
    )
    ap.add_argument("--sft-grid", default="40,80,160,320", help="SFT lengths (steps) to choose from")
    ap.add_argument("--lr-grid", default="1e-4,3e-4,1e-3")
    ap.add_argument("--group-size", type=int, default=8)
    ap.add_argument("--informative-groups", type=int, default=150)
    ap.add_argument("--episodes-per-iteration", type=int, default=32)
    ap.add_argument("--val-seeds", type=int, default=32)
    ap.add_argument("--test-seeds", type=int, default=64)
    ap.add_argument("--sampled-k", type=int, default=2)
    ap.add_argument("--primary", choices=("greedy", "sampled"), default="greedy")
    ap.add_argument("--workdir", default="")
    ap.add_argument("--out", default="var/bench/rl_eval.json")
    args = ap.parse_args(argv)
    args.task_list = [t.strip() for t in args.tasks.split(",") if t.strip()]
    args.grid = sorted({int(n) for n in args.sft_grid.split(",")})
    args.lrs = [float(x) for x in args.lr_grid.split(",")]
    train_seeds = [int(s) for s in args.train_seeds.split(",")]
    if len(train_seeds) < 3:
        print(
            "note: fewer than 3 training seeds: the protocol will not call any difference a win", flush=True
        )
    work = Path(args.workdir or tempfile.mkdtemp(prefix="rl-eval-"))
    work.mkdir(parents=True, exist_ok=True)
    protocol = {k: v for k, v in vars(args).items() if k not in ("workdir", "out")}
    protocol |= {"seeds": {"demos": DEMO_SEEDS, "rl": RL_SEEDS, "validation": VAL_SEEDS, "test": TEST_SEEDS},
                 "headroom": HEADROOM}  # fmt: skip
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"protocol": protocol, "status": "running"}, indent=2))
    print(f"protocol (fixed before training): {json.dumps(protocol)}", flush=True)
    started = time.monotonic()
    seeds: list[dict[str, Any]] = []
    lr: float | None = None
    for seed in train_seeds:
        seeds.append(one_seed(args, work, seed, lr))
        lr = seeds[0]["lr"]
    test = range(TEST_SEEDS, TEST_SEEDS + args.test_seeds)
    random_arm = evaluate(None, args.task_list, test, temperature=1.0, steps=args.episode_steps)
    summary = report(args, seeds, random_arm)
    _print(args, summary)
    result = {"protocol": protocol, "summary": summary, "seconds": round(time.monotonic() - started, 1),
              "seeds": [_jsonable(s) for s in seeds]}  # fmt: skip
    out.write_text(json.dumps(result, indent=2))
    print(f"\n{result['seconds']:.0f} s; figures written to {out}")
    return result


def _jsonable(seed: dict[str, Any]) -> dict[str, Any]:
    def items(d: dict[Item, float]) -> dict[str, float]:
        return {f"{t}:{s}": v for (t, s), v in d.items()}

    arms = {name: {m: items(v) for m, v in arm.items()} for name, arm in seed["arms"].items()}
    return {**seed, "arms": arms}


if __name__ == "__main__":
    main()
