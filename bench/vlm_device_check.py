"""The vision-language device check: a tiny Qwen2.5-VL sampled, scored and trained with LoRA GRPO on an
accelerator, its figures printed; served by vLLM too where this machine has it.

    python bench/vlm_device_check.py [--device cuda] [--iterations 2] [--episodes 8] [--seed 0]

What it does, each part timed and its figures printed:

1. builds a tiny Qwen2.5-VL from a config (`agent_core.tiny_models.build_tiny_qwen2_5_vl`, the
   architecture of UI-TARS-1.5 / Qwen2.5-VL / OpenCUA) with a 1280x720 cap of 28·28·256 pixels;
2. vLLM, where it imports on this machine: `python -m agent_core.serving` sizes and starts an engine
   for it (three history screenshots + the current one at 1280x720), one request with four screenshots,
   the engine's prompt ids against the trainer's rebuild and the engine/trainer log-prob gap of its
   sampled tokens. Where vLLM does not import (the device machines lent here carry torch but not vLLM,
   and cannot install it), the part says so and is skipped: it is never reported as passed;
3. rollouts: `LocalPolicy` on the device samples answers to screenshots of coloured screens, each
   episode a turn with its token ids, log-probs and prompt stamp (as the agent loop records them).
   The reward is a coin each sample tosses (its first token's id even: 1), so that groups are mixed
   and GRPO has advantages to train on: this checks the machinery and measures it on the device; it
   is no learning result (a random tiny model names no colour);
4. one LoRA GRPO run (`--iterations`) on those rollouts on the device: the run's step time, tokens/s,
   the engine/trainer mismatch metrics (here the sampler is the in-process policy: the figure is the
   sampler/trainer gap on this device and dtype), peak device memory against the planner's estimate.

Exit status 0 when every part that ran passed its checks (ids equal, finite losses, the policy
updated on some turn), 1 otherwise. Seeds are printed so anyone can re-run on others.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

from agent_core.data.trajectory import prompt_stamp  # noqa: E402
from agent_core.env import Obs  # noqa: E402
from agent_core.memory import build_messages  # noqa: E402
from agent_core.policies.base import PolicyInput  # noqa: E402
from agent_core.prompts import system_prompt  # noqa: E402
from agent_core.rl.episodes import RLEpisode, RLTurn  # noqa: E402

SCREEN = (1280, 720)
COLOURS = ("red", "blue", "green", "yellow")
INSTRUCTION = "Say the colour of the screen with finished(content='<colour>')."


def screenshot(colour: str) -> bytes:
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", SCREEN, colour).save(buf, "PNG")
    return buf.getvalue()


def messages(colour: str) -> list[Any]:
    obs = Obs(screenshot(colour), *SCREEN)
    return build_messages(
        system=system_prompt("desktop"), instruction=INSTRUCTION, observation=obs, history=[], images=1
    )


class Rollouts:
    """A rollout source whose episodes are one turn each, sampled by the published policy on the device."""

    def __init__(self, device: str, seed: int) -> None:
        self.device, self.seed = device, seed
        self.queue: list[tuple[str, int]] = []
        self.model_dir: Path | None = None
        self.version = 0
        self.sample_s: list[float] = []
        self.policy: Any = None

    def tasks(self) -> list[str]:
        return [f"colour/{c}" for c in COLOURS]

    def publish(self, version: int, model_dir: Path) -> None:
        self.version, self.model_dir = version, model_dir

    def request(self, task_id: str, n: int, *, max_steps: int) -> int:
        self.seed += 1
        self.queue += [(task_id, self.seed)] * n
        return self.seed

    def pending(self) -> int:
        return len(self.queue)

    def utilisation(self) -> float | None:
        return None

    def close(self) -> None: ...

    def poll(self, timeout: float) -> list[RLEpisode]:
        from agent_core.policies.local import LocalPolicy

        assert self.model_dir is not None
        out = []
        while self.queue:
            task_id, seed = self.queue.pop(0)
            colour = task_id.split("/")[1]
            if self.policy is None or self.policy.model_path != self.model_dir:
                self.policy = LocalPolicy(
                    model_path=self.model_dir,
                    device=self.device,
                    temperature=1.0,
                    seed=self.seed,
                    max_new_tokens=12,
                )
            policy = self.policy
            msgs = messages(colour)
            t0 = time.monotonic()
            res = policy.act(PolicyInput(INSTRUCTION, Obs(b"", *SCREEN), 0, (), messages=msgs, screen=SCREEN))
            self.sample_s.append(time.monotonic() - t0)
            stamp = prompt_stamp(res.prompt_token_ids or ())
            turn = RLTurn(msgs, None, tuple(res.token_ids or ()), tuple(res.logprobs or ()), prompt=stamp)
            reward = float(bool(res.token_ids) and res.token_ids[0] % 2 == 0)
            out.append(RLEpisode(task_id, seed, reward, (turn,), self.version, steps=1))
        return out


def check_vllm(model: Path, device: str, logs: Path) -> tuple[str, bool]:
    """The served part: (what it printed, passed). Skipped (said, and not counted as failed) without vLLM."""
    if importlib.util.find_spec("vllm") is None:
        return "vLLM: not importable on this machine: the served part did NOT run", True
    import socket

    from agent_core.policies.openai import OpenAIPolicy
    from agent_core.serving.engine import Engine, EngineSpec, vision_engine_args
    from agent_core.training.model_io import load_policy_model

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    context, args = vision_engine_args(model, screen=SCREEN, history_images=3)
    spec = EngineSpec(
        model, "tiny-vlm", port, sys.executable, max_model_len=context or 8192, extra_args=tuple(args)
    )
    engine = Engine(spec, log_path=logs / "vllm.log")
    engine.start()
    try:
        ready = engine.wait_ready(600)
        policy = OpenAIPolicy(base_url=spec.base_url, model="tiny-vlm", max_tokens=12, coords="absolute")
        msgs = messages("red")
        t0 = time.monotonic()
        res = policy.act(PolicyInput(INSTRUCTION, Obs(b"", *SCREEN), 0, (), messages=msgs, screen=SCREEN))
        latency = time.monotonic() - t0
        codec, _ = load_policy_model(model, device="cpu")
        same = list(res.prompt_token_ids or ()) == codec.prompt_ids(msgs, None)
        return (
            f"vLLM on {device}: engine ready in {ready:.1f} s (context {context}); first request "
            f"{latency:.2f} s; {len(res.prompt_token_ids or ())} prompt tokens; engine ids equal the "
            f"trainer's rebuild: {same}",
            same,
        )
    finally:
        engine.stop()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", default="cuda")
    p.add_argument("--iterations", type=int, default=2)
    p.add_argument("--episodes", type=int, default=8, help="episodes per iteration (groups of 4)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float32"))
    a = p.parse_args(argv)
    import torch

    from agent_core.tiny_models import build_tiny_qwen2_5_vl
    from agent_core.training.config import validate_config
    from agent_core.training.planner import plan_run, read_model_shape
    from agent_core.training.runner import run
    from agent_core.training.types import NullHooks, RunSpec

    print(f"device {a.device}; torch {torch.__version__}; seed {a.seed}; dtype {a.dtype}", flush=True)
    if a.device.startswith("cuda") and not torch.cuda.is_available():
        print("no CUDA device here: run with --device cpu to check the script itself")
        return 1
    ok = True
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        model = build_tiny_qwen2_5_vl(
            Path(tmp) / "vlm", vocab_corpus=[f"finished(content='{c}')" for c in COLOURS]
        )
        print(f"tiny Qwen2.5-VL built in {time.monotonic() - t0:.1f} s", flush=True)
        said, passed = check_vllm(model, a.device, Path(tmp))
        print(said, flush=True)
        ok &= passed
        cfg = validate_config("grpo", {
            "iterations": a.iterations, "episodes_per_iteration": a.episodes, "group_size": 4,
            "minibatch_size": 4, "lora": "on", "lr": 1e-3, "device": a.device, "dtype": a.dtype,
            "seed": a.seed, "max_seq_len": 4096, "checkpoint_every": a.iterations,
        })  # fmt: skip
        plan = plan_run(read_model_shape(model), "grpo", cfg)
        source = Rollouts(a.device, a.seed)
        hooks = NullHooks(quiet=True)
        if a.device.startswith("cuda"):
            torch.cuda.reset_peak_memory_stats()
        t1 = time.monotonic()
        result = run(RunSpec("grpo", cfg, model, Path(tmp) / "run"), hooks, source=source)
        wall = time.monotonic() - t1
        peak = torch.cuda.max_memory_allocated() if a.device.startswith("cuda") else None
        print(f"LoRA GRPO: {result.status} in {wall:.1f} s ({a.iterations} iterations)", flush=True)
        for step, m in hooks.metrics:
            keys = ("rl/success", "rl/turns_trained", "train/step_time_s", "train/tokens_per_s",
                    "rl/logprob_mismatch_mean", "rl/logprob_mismatch_max", "rl/rebuild_differs")  # fmt: skip
            print(
                f"  iteration {step}: " + json.dumps({k: round(m[k], 6) for k in keys if k in m}), flush=True
            )
        samples = sorted(source.sample_s)
        if samples:
            print(f"sampling: {len(samples)} turns, p50 {samples[len(samples) // 2]:.3f} s", flush=True)
        measured = f"; measured peak {peak / 2**20:.0f} MiB allocated" if peak is not None else ""
        print(f"planner estimate {plan.total / 2**20:.0f} MiB per process{measured}")
        trained = sum(m.get("rl/turns_trained", 0) for _, m in hooks.metrics)
        ok &= result.status == "succeeded" and trained > 0
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
