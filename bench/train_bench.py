"""Training throughput on the tiny policy: SFT, PPO and GRPO; environment utilisation while streaming.

    python bench/train_bench.py [--sft-steps 30] [--iterations 4] [--envs 2] [--no-browser]
                                [--hidden 128 --layers 4 --heads 4] [--dtype float32] [--vlm]

- SFT: optimizer steps of 16 examples (toy oracle demonstrations, ~110 tokens each).
- PPO and GRPO: iterations on the toy rollout source (real samples of the policy, parsed by the
  project's parser; no sandbox), so the figures are the trainer's own: tokens per second through
  forward + backward of the update, and the update's time per iteration.
- Streaming: GRPO on MiniWoB++ tasks in real Chromium (a pool of `--envs` browser sandboxes), with
  the trainer keeping rollouts asked for while it updates; environment utilisation is the share of
  environment-time spent inside episodes.

Figures are medians over steps after the first (warm-up); the device is printed with them. Training
and the rollouts' policy run on CUDA where there is one (`device: auto`), so the same command measures
a GPU machine; `--hidden/--layers/--heads` size the policy (the default is the tiny policy) and
`--dtype bfloat16` trains in bf16. For GRPO it also prints how far the trainer's log-probabilities of
the sampled tokens are from those the rollout policy reported (π_old/π_rollout; 1.0 means they agree).
`--vlm` measures a tiny LLaVA-style vision-language policy instead (the screenshots of the prompts are
encoded by its processor; `--image-size` sets the vision tower's input), on the same toy data.
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

from agent_core.training.checkpoints import latest_checkpoint  # noqa: E402
from agent_core.training.config import validate_config  # noqa: E402
from agent_core.training.runner import run  # noqa: E402
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
    ap.add_argument("--hidden", type=int, default=128, help="hidden size of the policy")
    ap.add_argument("--layers", type=int, default=4, help="decoder layers of the policy")
    ap.add_argument("--heads", type=int, default=4, help="attention heads of the policy")
    ap.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32")
    ap.add_argument("--batch", type=int, default=16, help="SFT examples per step and RL turns per minibatch")
    ap.add_argument("--rl", default="ppo,grpo", help="RL algorithms to measure, comma-separated")
    ap.add_argument("--sft-lr", type=float, default=3e-3, help="SFT learning rate (larger models want less)")
    ap.add_argument("--vlm", action="store_true", help="a tiny vision-language policy (LLaVA-style)")
    ap.add_argument("--image-size", type=int, default=224, help="--vlm: the vision tower's input size")
    args = ap.parse_args()
    import torch

    cuda = torch.cuda.is_available()
    device = f"cuda ({torch.cuda.get_device_name(0)})" if cuda else f"cpu ({torch.get_num_threads()} threads)"
    rollout_device = "cuda" if cuda else "cpu"
    work = Path(tempfile.mkdtemp(prefix="train-bench-"))
    tfm = __import__("transformers")
    if args.vlm:
        from agent_core.tiny_models import build_tiny_vlm

        base = build_tiny_vlm(
            work / "base", hidden_size=args.hidden, num_layers=args.layers, image_size=args.image_size
        )
        model_cls, kind = tfm.AutoModelForImageTextToText, f"vision-language, {args.image_size}px images"
    else:
        base = build_tiny_policy(
            work / "base", hidden_size=args.hidden, num_layers=args.layers, num_heads=args.heads
        )
        model_cls, kind = tfm.AutoModelForCausalLM, "text"
    n_params = sum(p.numel() for p in model_cls.from_pretrained(str(base)).parameters())
    print(
        f"policy: {n_params / 1e6:.2f} M parameters ({kind}; hidden {args.hidden}, {args.layers} layers), "
        f"{args.dtype}, device {device}"
    )
    rows: list[tuple[str, float, float, str]] = []

    hooks = NullHooks(quiet=True)
    cfg = validate_config(
        "sft",
        {"max_steps": args.sft_steps, "batch_size": args.batch, "lr": args.sft_lr, "checkpoint_every": 10_000,
         "dtype": args.dtype},
    )  # fmt: skip
    run(RunSpec("sft", cfg, base, work / "sft"), hooks, examples=oracle_examples(TASKS, range(200)))
    rows.append(
        (
            "sft",
            med(hooks, "train/tokens_per_s"),
            med(hooks, "train/step_time_s"),
            f"{args.sft_steps} steps x {args.batch} examples",
        )
    )
    start = latest_checkpoint(work / "sft")
    assert start is not None

    rl: dict[str, Any] = {"iterations": args.iterations, "episodes_per_iteration": args.episodes,
                          "max_steps_per_episode": 3, "max_new_tokens": 32, "minibatch_size": args.batch,
                          "checkpoint_every": 10_000, "dtype": args.dtype}  # fmt: skip
    rollout_policy = {"device": rollout_device, "dtype": args.dtype}
    for alg, extra in (("ppo", {"value_pretrain_steps": 1}), ("grpo", {})):
        if alg not in args.rl.split(","):
            continue
        hooks = NullHooks(quiet=True)
        cfg = validate_config(alg, {**rl, **extra})
        t = time.monotonic()
        source = ToySource(TASKS, seed_base=10_000, policy=rollout_policy)
        run(RunSpec(alg, cfg, start, work / alg), hooks, source=source)
        turns = sum(m.get("rl/turns_trained", 0) for _, m in hooks.metrics)
        took = time.monotonic() - t
        success = statistics.mean(m["rl/success"] for _, m in hooks.metrics)
        note = (
            f"{args.iterations} iterations, rollout success {success:.2f}, {turns:.0f} turns trained, "
            f"{took:.0f} s with rollouts"
        )
        if alg == "grpo" and not turns:
            note += " (every group agreed: nothing to learn, no update timed)"
        hi = [m["rl/is_weight_max"] for _, m in hooks.metrics if "rl/is_weight_max" in m]
        lo = [m["rl/is_weight_min"] for _, m in hooks.metrics if "rl/is_weight_min" in m]
        if hi and lo:
            note += f"; pi_old/pi_rollout per token in [{min(lo):.4f}, {max(hi):.4f}]"
        rows.append((alg, med(hooks, "train/tokens_per_s"), med(hooks, "train/step_time_s"), note))

    print(f"\n{'algorithm':<10} {'tokens/s':>10} {'step time':>10}  notes")
    for name, tps, st, note in rows:
        print(f"{name:<10} {tps:>10.0f} {st:>9.2f}s  {note}")

    if args.no_browser or args.vlm:  # the streaming run measures the environments, with the text policy
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
        source = LocalRolloutSource(
            specs, pool, policy={**policy, **rollout_policy, "temperature": 1.0, "seed": None}
        )
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
