"""Training throughput on the tiny policy: SFT, PPO and GRPO; environment utilisation while streaming.

    python bench/train_bench.py [--sft-steps 30] [--iterations 4] [--envs 2] [--no-browser]

- SFT: optimizer steps of 16 examples (toy oracle demonstrations, ~110 tokens each).
- PPO and GRPO: iterations on the toy rollout source (real samples of the policy, parsed by the
  project's parser; no sandbox), so the figures are the trainer's own: tokens per second through
  forward + backward of the update, and the update's time per iteration.
- Streaming: GRPO on MiniWoB++ tasks in real Chromium (a pool of `--envs` browser sandboxes), with
  the trainer keeping rollouts asked for while it updates; environment utilisation is the share of
  environment-time spent inside episodes.

Figures are medians over steps after the first (warm-up); the device is printed with them.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agent_core.training.config import validate_config  # noqa: E402
from agent_core.training.runner import latest_checkpoint, run  # noqa: E402
from agent_core.training.tiny_policy import POLICY_CONFIG, build_tiny_policy  # noqa: E402
from agent_core.training.toy import ToySource, oracle_examples  # noqa: E402
from agent_core.training.types import NullHooks, RunSpec  # noqa: E402

TASKS = ["toy/buttons-2", "toy/buttons-3"]


def med(hooks: NullHooks, name: str) -> float:
    vals = [m[name] for _, m in hooks.metrics[1:] if name in m] or [
        m[name] for _, m in hooks.metrics if name in m
    ]
    return statistics.median(vals) if vals else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sft-steps", type=int, default=30)
    ap.add_argument("--iterations", type=int, default=4)
    ap.add_argument("--episodes", type=int, default=16, help="episodes per RL iteration")
    ap.add_argument("--envs", type=int, default=2)
    ap.add_argument("--no-browser", action="store_true", help="skip the streaming run in Chromium")
    args = ap.parse_args()
    import torch

    device = "cuda" if torch.cuda.is_available() else f"cpu ({torch.get_num_threads()} threads)"
    work = Path(tempfile.mkdtemp(prefix="train-bench-"))
    base = build_tiny_policy(work / "base")
    n_params = sum(
        p.numel()
        for p in __import__("transformers").AutoModelForCausalLM.from_pretrained(str(base)).parameters()
    )
    print(f"tiny policy: {n_params / 1e6:.2f} M parameters, device {device}")
    rows: list[tuple[str, float, float, str]] = []

    hooks = NullHooks(quiet=True)
    cfg = validate_config(
        "sft", {"max_steps": args.sft_steps, "batch_size": 16, "lr": 3e-3, "checkpoint_every": 10_000}
    )
    run(RunSpec("sft", cfg, base, work / "sft"), hooks, examples=oracle_examples(TASKS, range(200)))
    rows.append(
        (
            "sft",
            med(hooks, "train/tokens_per_s"),
            med(hooks, "train/step_time_s"),
            f"{args.sft_steps} steps x 16 examples",
        )
    )
    start = latest_checkpoint(work / "sft")
    assert start is not None

    rl: dict[str, Any] = {"iterations": args.iterations, "episodes_per_iteration": args.episodes,
                          "max_steps_per_episode": 3, "max_new_tokens": 32, "minibatch_size": 16,
                          "checkpoint_every": 10_000}  # fmt: skip
    for alg, extra in (("ppo", {"value_pretrain_steps": 1}), ("grpo", {})):
        hooks = NullHooks(quiet=True)
        cfg = validate_config(alg, {**rl, **extra})
        t = time.monotonic()
        run(RunSpec(alg, cfg, start, work / alg), hooks, source=ToySource(TASKS, seed_base=10_000))
        turns = sum(m.get("rl/turns_trained", 0) for _, m in hooks.metrics)
        took = time.monotonic() - t
        note = f"{args.iterations} iterations, {turns:.0f} turns trained, {took:.0f} s with rollouts"
        rows.append((alg, med(hooks, "train/tokens_per_s"), med(hooks, "train/step_time_s"), note))

    print(f"\n{'algorithm':<10} {'tokens/s':>10} {'step time':>10}  notes")
    for name, tps, st, note in rows:
        print(f"{name:<10} {tps:>10.0f} {st:>9.2f}s  {note}")

    if args.no_browser:
        return
    from agent_core.suites import miniwob as suite
    from sandbox_workers.local_rollouts import BrowserPool, LocalRolloutSource

    specs = {
        s.id: s
        for s in suite.tasks()
        if s.id in ("miniwob/click-test", "miniwob/click-test-2", "miniwob/focus-text")
    }
    pool = BrowserPool(args.envs, work / "sandboxes")
    try:
        policy = {k: v for k, v in POLICY_CONFIG.items() if k != "observation"}
        source = LocalRolloutSource(specs, pool, policy={**policy, "temperature": 1.0, "seed": None})
        hooks = NullHooks(quiet=True)
        cfg = validate_config("grpo", {**rl, "max_steps_per_episode": 4, "max_new_tokens": 48})
        t = time.monotonic()
        try:
            run(RunSpec("grpo", cfg, start, work / "stream"), hooks, source=source)
        finally:
            source.close()
        util = [m["rl/env_utilisation"] for _, m in hooks.metrics if "rl/env_utilisation" in m]
        eps = sum(m["rl/episodes"] for _, m in hooks.metrics)
        print(
            f"\nstreaming GRPO on {len(specs)} MiniWoB tasks, {args.envs} Chromium sandboxes: "
            f"environment utilisation {statistics.mean(util):.1%} (per iteration: "
            f"{', '.join(f'{u:.0%}' for u in util)}), {eps:.0f} episodes in {time.monotonic() - t:.0f} s, "
            f"policy lag {statistics.mean(m['rl/policy_lag'] for _, m in hooks.metrics):.2f} versions"
        )
    finally:
        pool.close()


if __name__ == "__main__":
    main()
