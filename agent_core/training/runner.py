"""Training runs: SFT, multi-turn PPO (the UI-TARS-2 recipe) and step-level GRPO with DART's curation.

`run(spec, hooks, examples=..., source=...)` is the one entry point: the webapp's Celery task calls it,
and so do the demonstration and benchmark scripts. The same code trains a tiny model on a CPU and a
real one on a GPU (`device: auto`), a text-only causal LM or a vision-language model alike: a checkpoint
with a processor (LLaVA, Qwen2-VL and the like, as `LocalPolicy` loads them) is trained on the screenshots
its prompts carry, encoded by the same `vision_encoding` call the policy makes. Its image tensors are
rebuilt for each minibatch from the prompt's messages rather than kept for the whole run, and a prompt
too long for `max_seq_len` is skipped (and counted) rather than cut, since cutting it would cut an image.

Checkpoints are save_pretrained directories under `out_dir/checkpoints/step-NNNNNN/` that
`LocalPolicy` loads directly, plus `trainer_state.pt` (optimizer, critic, curation state, data
position, RNG), written to a temporary directory and renamed, so a worker killed mid-save leaves the
previous checkpoint intact and `latest_checkpoint` never returns a half-written one.

torch and transformers are imported on first use only.
"""

from __future__ import annotations

import importlib
import json
import math
import random
import re
import shutil
import time
import traceback
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from agent_core.policies.local import _LOAD_LOCK, _version, is_vision_model, text_prompt, vision_encoding
from agent_core.thoughts import is_placeholder_thought
from agent_core.training.tiny_policy import LINEAGE_FILE
from agent_core.training.types import Hooks, RLEpisode, RLTurn, RolloutSource, RunResult, RunSpec, SFTExample

STATE_FILE = "trainer_state.pt"
UNUSABLE_LIMIT = 4
"""An RL run fails once this many iterations' worth of episodes in a row were unusable (stale, or with
no sampled turn): rollouts that can never train the policy must not keep a worker busy for ever."""
CHECKPOINTS = "checkpoints"


class TrainingError(ValueError):
    """The run cannot go on as asked (no usable data, an unsupported model, a missing checkpoint)."""


def _lazy(module: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise TrainingError(
            f"training needs torch and transformers: pip install '.[train]' ({exc})"
        ) from None


def checkpoint_dir(out_dir: Path, step: int) -> Path:
    return Path(out_dir) / CHECKPOINTS / f"step-{step:06d}"


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The newest complete checkpoint of a run directory (one with its trainer state), or None."""
    root = Path(out_dir) / CHECKPOINTS
    if not root.is_dir():
        return None
    done = [p for p in root.glob("step-*") if p.is_dir() and not p.name.endswith(".tmp")]
    done = [p for p in done if (p / STATE_FILE).is_file() and (p / "config.json").is_file()]
    return max(done, key=lambda p: p.name) if done else None


# --- models ------------------------------------------------------------------------------------


def _device(name: str) -> str:
    torch = _lazy("torch")
    if name == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise TrainingError("device: cuda was asked for but this machine has no CUDA device")
    return name


class PromptCodec:
    """How a checkpoint's prompts become model inputs, exactly as `LocalPolicy` builds them at rollout
    time: token ids (the text prompt, or the chat template with image tokens), plus the image tensors
    of a vision-language model."""

    def __init__(self, tokenizer: Any, processor: Any = None) -> None:
        self.tokenizer = tokenizer
        self.processor = processor

    @property
    def vision(self) -> bool:
        return self.processor is not None

    def prompt_ids(self, messages: Sequence[Mapping[str, Any]], a11y: str | None) -> list[int]:
        if self.processor is None:
            return prompt_ids(self.tokenizer, messages, a11y)
        return [int(t) for t in vision_encoding(self.processor, messages)["input_ids"][0].tolist()]

    def images(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """The prompt's image tensors (pixel_values and whatever else the processor gives, e.g. a
        Qwen2-VL image_grid_thw); empty for a text-only model or a prompt without images."""
        if self.processor is None:
            return {}
        enc = vision_encoding(self.processor, messages)
        return {k: v for k, v in enc.items() if k not in ("input_ids", "attention_mask")}

    def save(self, directory: Path) -> None:
        (self.processor or self.tokenizer).save_pretrained(str(directory))


def load_policy_model(path: Path, *, device: str, dtype: str = "float32") -> tuple[PromptCodec, Any]:
    """(prompt codec, model) of a checkpoint directory (text-only or vision-language), ready to train."""
    torch = _lazy("torch")
    tfm = _lazy("transformers")
    if not (Path(path) / "config.json").is_file():
        raise TrainingError(f"{path} is not a model directory (no config.json)")
    try:
        # One load at a time per process: concurrent from_pretrained calls (the trainer and rollout
        # threads) can leave torch's default device on "meta" (see local._LOAD_LOCK).
        with _LOAD_LOCK:
            return _load(tfm, torch, path, device, dtype)
    except TrainingError:
        raise
    except Exception as exc:  # noqa: BLE001 - any load failure ends the run with its reason
        raise TrainingError(f"cannot load {path}: {type(exc).__name__}: {exc}") from None


def _load(tfm: Any, torch: Any, path: Path, device: str, dtype: str) -> tuple[PromptCodec, Any]:
    # transformers >= 4.56 calls it `dtype`; older versions only know `torch_dtype`.
    key = "dtype" if _version(tfm.__version__) >= (4, 56) else "torch_dtype"
    kwargs = {"local_files_only": True, key: getattr(torch, dtype)}
    if is_vision_model(path):
        processor = tfm.AutoProcessor.from_pretrained(str(path), local_files_only=True)
        if not getattr(processor, "chat_template", None):
            raise TrainingError(f"{path} has no chat template for its processor: its prompts cannot be built")
        tokenizer = getattr(processor, "tokenizer", processor)
        model = tfm.AutoModelForImageTextToText.from_pretrained(str(path), **kwargs)
        codec = PromptCodec(tokenizer, processor)
    else:
        tokenizer = tfm.AutoTokenizer.from_pretrained(str(path), local_files_only=True)
        model = tfm.AutoModelForCausalLM.from_pretrained(str(path), **kwargs)
        codec = PromptCodec(tokenizer)
    model.to(device)
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    return codec, model


def prompt_ids(tokenizer: Any, messages: Sequence[Mapping[str, Any]], a11y: str | None) -> list[int]:
    """The prompt's token ids, exactly as LocalPolicy builds them at rollout time."""
    text, special = text_prompt(tokenizer, messages, a11y)
    return list(tokenizer(text, add_special_tokens=special)["input_ids"])


def response_ids(tokenizer: Any, response: str) -> list[int]:
    """A target response's ids, ending with the end-of-turn token the policy stops at."""
    return list(tokenizer(response + tokenizer.eos_token, add_special_tokens=False)["input_ids"])


@dataclass
class _Sample:
    prompt: list[int]
    response: list[int]
    messages: Sequence[Mapping[str, Any]] = ()
    """The prompt's messages, kept (by reference) where a vision-language model needs their images."""
    rollout_logprobs: list[float] = field(default_factory=list)
    advantages: list[float] = field(default_factory=list)
    returns: list[float] = field(default_factory=list)
    old_logprobs: list[float] = field(default_factory=list)
    old_values: list[float] = field(default_factory=list)
    entropy: float = 0.0


def _fit(prompt: list[int], response: list[int], max_len: int) -> list[int]:
    """The prompt cut from the left so prompt + response fit in `max_len` (the response is kept)."""
    room = max(1, max_len - len(response))
    return prompt[-room:]


def _batch(samples: Sequence[_Sample], pad: int, device: str) -> tuple[Any, Any, Any, list[int]]:
    """(ids [B,T], attention [B,T], response mask over the *shifted* positions [B,T-1], prompt lens)."""
    torch = _lazy("torch")
    width = max(len(s.prompt) + len(s.response) for s in samples)
    ids = torch.full((len(samples), width), pad, dtype=torch.long)
    attn = torch.zeros((len(samples), width), dtype=torch.long)
    mask = torch.zeros((len(samples), width - 1), dtype=torch.float32)
    for i, s in enumerate(samples):
        seq = s.prompt + s.response
        ids[i, : len(seq)] = torch.tensor(seq)
        attn[i, : len(seq)] = 1
        # Position t of the shifted logits predicts token t+1: the response tokens sit at
        # prompt_len .. prompt_len+len(response)-1, predicted from positions one earlier.
        mask[i, len(s.prompt) - 1 : len(s.prompt) - 1 + len(s.response)] = 1.0
    return ids.to(device), attn.to(device), mask.to(device), [len(s.prompt) for s in samples]


def _token_logprobs(
    model: Any, ids: Any, attn: Any, *, entropy: bool = False, images: Mapping[str, Any] | None = None
) -> tuple[Any, Any]:
    """Log-probabilities of each next token [B,T-1] (and the entropies of those distributions)."""
    torch = _lazy("torch")
    logits = model(input_ids=ids, attention_mask=attn, **(images or {})).logits[:, :-1].float()
    logp = torch.log_softmax(logits, dim=-1)
    chosen = logp.gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    ent = None
    if entropy:
        from agent_core.rl.losses import entropy_from_logits

        ent = entropy_from_logits(logits)
    return chosen, ent


def _scatter(values: Sequence[Sequence[float]], mask: Any, prompt_lens: Sequence[int]) -> Any:
    """Per-sample response values laid out like `mask` ([B,T-1])."""
    torch = _lazy("torch")
    out = torch.zeros_like(mask)
    for i, (vals, p) in enumerate(zip(values, prompt_lens, strict=True)):
        if vals:
            out[i, p - 1 : p - 1 + len(vals)] = torch.tensor(list(vals), dtype=out.dtype)
    return out


def _gather(x: Any, mask: Any, prompt_lens: Sequence[int], lengths: Sequence[int]) -> list[list[float]]:
    """The inverse of _scatter: each sample's response values as a list."""
    rows = x.detach().float().cpu()
    return [
        rows[i, p - 1 : p - 1 + n].tolist() for i, (p, n) in enumerate(zip(prompt_lens, lengths, strict=True))
    ]


def _critic_class() -> Any:
    torch = _lazy("torch")

    class Critic(torch.nn.Module):  # type: ignore[misc, name-defined]
        """A value model: the policy's architecture (initialised from its weights) with a scalar head."""

        def __init__(self, backbone: Any) -> None:
            super().__init__()
            self.backbone = backbone
            config = backbone.config
            # A vision-language config keeps the decoder's width in its text config.
            hidden = getattr(config, "hidden_size", None) or config.get_text_config().hidden_size
            self.head = torch.nn.Linear(hidden, 1)
            torch.nn.init.zeros_(self.head.weight)
            torch.nn.init.zeros_(self.head.bias)

        def forward(self, ids: Any, attn: Any, images: Mapping[str, Any] | None = None) -> Any:
            out = self.backbone(
                input_ids=ids, attention_mask=attn, output_hidden_states=True, **(images or {})
            )
            return self.head(out.hidden_states[-1].float()).squeeze(-1)

    return Critic


# --- the common loop machinery -------------------------------------------------------------------


class _Trainer:
    def __init__(self, spec: RunSpec, hooks: Hooks) -> None:
        self.spec = spec
        self.cfg = dict(spec.config)
        self.hooks = hooks
        self.torch = _lazy("torch")
        self.device = _device(str(self.cfg.get("device", "auto")))
        self.step = 0
        self.out_dir = Path(spec.out_dir)
        self.out_dir.mkdir(parents=True, exist_ok=True)
        start = Path(spec.resume_from) if spec.resume_from else Path(spec.base_model)
        if spec.resume_from and not (start / STATE_FILE).is_file():
            raise TrainingError(f"cannot resume: {start} is not a complete checkpoint (no {STATE_FILE})")
        self.start_dir = start
        self.codec, self.model = load_policy_model(start, device=self.device, dtype=self.cfg["dtype"])
        self.tokenizer = self.codec.tokenizer
        self.too_long = 0  # vision-language samples skipped because they do not fit in max_seq_len
        self.torch.manual_seed(int(self.cfg["seed"]))
        self.optimizer = self.torch.optim.AdamW(
            self.model.parameters(), lr=float(self.cfg["lr"]), weight_decay=float(self.cfg["weight_decay"])
        )
        self.lineage = self._lineage(start)
        self.state: dict[str, Any] = {}
        if spec.resume_from:
            self.state = self.torch.load(start / STATE_FILE, map_location=self.device, weights_only=False)
            self.optimizer.load_state_dict(self.state["optimizer"])
            self.step = int(self.state["step"])
            self.hooks.on_log(f"resumed from {start.name} (step {self.step})")

    @staticmethod
    def _lineage(start: Path) -> dict[str, Any]:
        try:
            data = json.loads((start / LINEAGE_FILE).read_text())
            return data if isinstance(data, dict) else {}
        except (OSError, ValueError):
            return {}

    def _clip(self, params: Iterable[Any]) -> float:
        limit = float(self.cfg["grad_clip"])
        if limit <= 0:
            norms = [p.grad.detach().norm() for p in params if p.grad is not None]
            return float(self.torch.stack(norms).norm()) if norms else 0.0
        return float(self.torch.nn.utils.clip_grad_norm_(list(params), limit))

    def save(self, extra: Mapping[str, Any], metrics: Mapping[str, float]) -> Path:
        """A checkpoint at the current step (atomic: a temporary directory renamed into place)."""
        final = checkpoint_dir(self.out_dir, self.step)
        tmp = final.with_name(final.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        self.model.save_pretrained(str(tmp))
        self.codec.save(tmp)
        lineage = {
            **{k: v for k, v in self.lineage.items() if k in ("base", "seed", "built_by")},
            "algorithm": self.spec.algorithm,
            "step": self.step,
            "parent": str(self.start_dir),
        }
        (tmp / LINEAGE_FILE).write_text(json.dumps(lineage, indent=2))
        state = {"step": self.step, "optimizer": self.optimizer.state_dict(), **extra}
        self.torch.save(state, tmp / STATE_FILE)
        if final.exists():
            shutil.rmtree(final)
        tmp.rename(final)
        self._prune()
        self.hooks.on_checkpoint(self.step, final, dict(metrics))
        return final

    def _sample(
        self, messages: Sequence[Mapping[str, Any]], a11y: str | None, response: list[int]
    ) -> _Sample | None:
        """A sample of the prompt and `response` (cut to max_seq_len - 1). A text prompt too long for
        max_seq_len loses its start; a vision-language one cannot (its images would be cut): None."""
        max_len = int(self.cfg["max_seq_len"])
        resp = response[: max_len - 1]
        prompt = self.codec.prompt_ids(messages, a11y)
        if not self.codec.vision:
            return _Sample(_fit(prompt, resp, max_len), resp)
        if len(prompt) + len(resp) > max_len:
            self.too_long += 1
            return None
        return _Sample(prompt, resp, messages=messages)

    def _images(self, samples: Sequence[_Sample]) -> dict[str, Any]:
        """The minibatch's image tensors, concatenated in sample order (the order of their image tokens
        in the batch), in the model's dtype, on its device; empty for a text-only model."""
        if not self.codec.vision:
            return {}
        parts: dict[str, list[Any]] = defaultdict(list)
        for s in samples:
            for key, value in self.codec.images(s.messages).items():
                parts[key].append(value)
        dtype = next(self.model.parameters()).dtype
        out: dict[str, Any] = {}
        for key, values in parts.items():
            value = self.torch.cat(values, dim=0).to(self.device)
            out[key] = value.to(dtype) if value.is_floating_point() else value
        return out

    def _prune(self) -> None:
        keep = int(self.cfg.get("keep_checkpoints", 0))
        if keep <= 0:
            return
        done = sorted(p for p in (self.out_dir / CHECKPOINTS).glob("step-*") if not p.name.endswith(".tmp"))
        for old in done[:-keep]:
            shutil.rmtree(old, ignore_errors=True)


# --- SFT ---------------------------------------------------------------------------------------


class SFTTrainer(_Trainer):
    """Supervised fine-tuning: cross-entropy on the assistant's tokens only, token-mean over a batch."""

    def encode(self, examples: Iterable[SFTExample]) -> list[_Sample]:
        out: list[_Sample] = []
        placeholders = 0
        for ex in examples:
            if ex.placeholder_thought or _teaches_placeholder(ex.response):
                placeholders += 1
                ex = _without_placeholder(ex)
            sample = self._sample(ex.messages, ex.a11y, response_ids(self.tokenizer, ex.response))
            if sample is not None:
                out.append(sample)
        if placeholders:
            self.hooks.on_log(
                f"{placeholders} example(s) recorded a placeholder thought (like 'oracle step 3'): "
                "they teach their action only, never the placeholder"
            )
        if self.too_long:
            self.hooks.on_log(
                f"{self.too_long} example(s) longer than max_seq_len ({self.cfg['max_seq_len']} tokens) "
                "skipped: a vision-language prompt cannot be cut without cutting its images"
            )
        return out

    def run(self, examples: Iterable[SFTExample] | None) -> RunResult:
        if examples is None:
            raise TrainingError("an SFT run needs a dataset version to train on")
        t0 = time.monotonic()
        data = self.encode(examples)
        if not data and self.too_long:
            raise TrainingError(
                f"max_seq_len: every example is longer than {self.cfg['max_seq_len']} tokens "
                "(a vision-language prompt is never cut); raise it"
            )
        if not data:
            raise TrainingError("the dataset version has no usable examples (no valid steps to learn)")
        n = len(data)
        bs = int(self.cfg["batch_size"])
        total = int(self.cfg["max_steps"]) or max(1, math.ceil(float(self.cfg["epochs"]) * n / bs))
        tokens = sum(len(s.prompt) + len(s.response) for s in data)
        self.hooks.on_log(
            f"SFT on {n} examples ({tokens} tokens, {sum(len(s.response) for s in data)} target tokens; "
            f"encoded in {time.monotonic() - t0:.1f} s): {total} steps of {bs} on {self.device}"
        )
        seed = int(self.cfg["seed"])
        perms: dict[int, list[int]] = {}

        def index(g: int) -> int:
            epoch, offset = divmod(g, n)
            if epoch not in perms:
                perm = list(range(n))
                random.Random(seed * 1_000_003 + epoch).shuffle(perm)  # noqa: S311 - data order
                perms.clear()
                perms[epoch] = perm
            return perms[epoch][offset]

        pad = int(self.tokenizer.pad_token_id)
        warmup = int(self.cfg["warmup_steps"])
        base_lr = float(self.cfg["lr"])
        metrics: dict[str, float] = {}
        self.model.train()
        while self.step < total:
            if self.hooks.should_stop():
                self.hooks.on_log(f"stop requested: saving step {self.step}")
                path = self.save({}, metrics)
                return RunResult("stopped", self.step, path, metrics)
            started = time.monotonic()
            batch = [data[index(self.step * bs + k)] for k in range(bs)]
            lr = base_lr * min(1.0, (self.step + 1) / warmup) if warmup else base_lr
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            ids, attn, mask, _ = _batch(batch, pad, self.device)
            logp, _ = _token_logprobs(self.model, ids, attn, images=self._images(batch))
            loss = -(logp * mask).sum() / mask.sum().clamp(min=1.0)
            self.optimizer.zero_grad(set_to_none=True)
            loss.backward()
            grad_norm = self._clip(self.model.parameters())
            self.optimizer.step()
            self.step += 1
            elapsed = time.monotonic() - started
            n_tok = int(attn.sum())
            metrics = {
                "train/loss": float(loss.detach()),
                "train/lr": lr,
                "train/grad_norm": grad_norm,
                "train/tokens_per_s": n_tok / max(elapsed, 1e-9),
                "train/step_time_s": elapsed,
                "train/epoch": self.step * bs / n,
            }
            self.hooks.on_metrics(self.step, metrics)
            if self.step % 10 == 0 or self.step == total:
                self.hooks.on_log(
                    f"step {self.step}/{total} loss {metrics['train/loss']:.4f} "
                    f"({metrics['train/tokens_per_s']:.0f} tokens/s)"
                )
            if self.step % int(self.cfg["checkpoint_every"]) == 0 or self.step == total:
                self.save({}, metrics)
        last = latest_checkpoint(self.out_dir)
        return RunResult("succeeded", self.step, last, metrics)


def _teaches_placeholder(response: str) -> bool:
    """Whether a response's Thought section is a placeholder (a source that did not mask it)."""
    m = _THOUGHT.match(response)
    return m is not None and is_placeholder_thought(m.group(1))


def _without_placeholder(ex: SFTExample) -> SFTExample:
    """The example with a placeholder Thought section taken out of its target."""
    m = _THOUGHT.match(ex.response)
    if m is None or not is_placeholder_thought(m.group(1)):
        return ex
    return replace(ex, response=ex.response[m.end() :], placeholder_thought=True)


_THOUGHT = re.compile(r"\s*Thought:[ \t]*(.*?)\s*\n(?=\s*(?:Action_Summary|Action):)", re.S)


# --- RL ----------------------------------------------------------------------------------------


class RLTrainer(_Trainer):
    """Multi-turn PPO (algorithm "ppo") or step-level GRPO with DART's curation ("grpo"), streaming.

    Each iteration: keep enough rollouts asked for that environments never wait on the trainer;
    take finished episodes as they arrive, dropping those from policies more than `max_policy_lag`
    versions behind (and, for GRPO, outside the latest K versions); update; every `publish_every`
    iterations save a checkpoint and publish it as the next policy version.
    """

    def __init__(self, spec: RunSpec, hooks: Hooks) -> None:
        super().__init__(spec, hooks)
        from agent_core.rl.curation import Curator, ExperiencePool

        cfg = self.cfg
        self.grpo = spec.algorithm == "grpo"
        self.version = int(self.state.get("version", 0))
        self.versions_seen: list[int] = list(self.state.get("versions_seen", [self.version]))
        self.value_pretrained = int(self.state.get("value_pretrained", 0))
        self.curator = Curator(
            min_rollouts=int(cfg.get("min_rollouts", 1)),
            max_rollouts=int(cfg.get("max_rollouts", 1)),
            window=int(cfg.get("success_window", 8)),
            max_steps=int(cfg["max_steps_per_episode"]),
            length_margin=int(cfg.get("length_margin", 0)),
            min_steps_cap=int(cfg.get("min_steps_cap", 1)),
        )
        self.pool = ExperiencePool(int(cfg.get("pool_size", 0)))
        if "curator" in self.state:
            self.curator.load_state_dict(self.state["curator"])
        if "pool" in self.state:
            self.pool.load_state_dict(self.state["pool"])
        self.critic: Any = None
        self.critic_opt: Any = None
        if not self.grpo:
            backbone = load_policy_model(self.start_dir, device=self.device, dtype=cfg["dtype"])[1]
            self.critic = _critic_class()(backbone).to(self.device)
            self.critic_opt = self.torch.optim.AdamW(self.critic.parameters(), lr=float(cfg["critic_lr"]))
            if "critic" in self.state:
                self.critic.load_state_dict(self.state["critic"])
                self.critic_opt.load_state_dict(self.state["critic_opt"])
        self.ref: Any = None
        if float(cfg["kl_coef"]) > 0:
            self.ref = load_policy_model(Path(spec.base_model), device=self.device, dtype=cfg["dtype"])[1]
            self.ref.eval()
        # Rollouts still to come per group (task, seed), and the group's finished ones so far.
        self.wanted: dict[tuple[str, int], int] = {}
        self.buffers: dict[tuple[str, int], list[RLEpisode]] = defaultdict(list)
        self.next_task = 0
        self.dropped = 0
        # Turns the policy was updated on, over every attempt of the run: a run that trained none
        # fails with the reasons counted below, rather than passing its starting weights off as a result.
        self.turns_trained = int(self.state.get("turns_trained", 0))
        self.untrained: Counter[str] = Counter()
        self.unusable_run = 0  # episodes in a row that training could not use (stale or turnless)

    # --- state ---

    def extra_state(self) -> dict[str, Any]:
        state: dict[str, Any] = {
            "version": self.version,
            "versions_seen": self.versions_seen,
            "value_pretrained": self.value_pretrained,
            "turns_trained": self.turns_trained,
            "curator": self.curator.state_dict(),
            "pool": self.pool.state_dict(),
        }
        if self.critic is not None:
            state["critic"] = self.critic.state_dict()
            state["critic_opt"] = self.critic_opt.state_dict()
        return state

    # --- rollouts ---

    def _top_up(self, source: RolloutSource, tasks: Sequence[str]) -> None:
        """Ask for rollouts until twice an iteration's worth is outstanding (environments stay busy)."""
        target = 2 * int(self.cfg["episodes_per_iteration"])
        while source.pending() < target:
            task = tasks[self.next_task % len(tasks)]
            self.next_task += 1
            if self.grpo:
                n, cap = max(2, self.curator.rollouts(task)), self.curator.length_cap(task)
            else:
                n, cap = 1, int(self.cfg["max_steps_per_episode"])
            seed = source.request(task, n, max_steps=cap)
            self.wanted[(task, seed)] = self.wanted.get((task, seed), 0) + n

    def _fresh(self, episodes: list[RLEpisode]) -> set[int]:
        """Ids of the episodes training may use: within the policy lag, and (GRPO) from the latest K."""
        from agent_core.rl.curation import latest_k, within_lag

        lag = int(self.cfg["max_policy_lag"])
        kept = [ep for ep in episodes if within_lag(ep.policy_version, self.version, lag)]
        if self.grpo:
            kept = latest_k(
                kept,
                current_version=self.version,
                k=int(self.cfg["latest_k"]),
                versions_seen=self.versions_seen,
            )
        return {id(ep) for ep in kept}

    def _collect(self, source: RolloutSource, tasks: Sequence[str]) -> list[list[RLEpisode]] | None:
        """Groups of finished episodes (one episode per group for PPO); None when a stop was asked."""
        want = int(self.cfg["episodes_per_iteration"])
        groups: list[list[RLEpisode]] = []
        got = 0
        while got < want:
            if self.hooks.should_stop():
                return None
            self._top_up(source, tasks)
            polled = source.poll(timeout=1.0)
            if self.unusable_run >= UNUSABLE_LIMIT * want:
                # Waiting on would never end: say why nothing can be trained instead of hanging.
                raise TrainingError(self._why_untrained(self.step, waiting=self.unusable_run))
            fresh = self._fresh(polled)
            for ep in polled:
                if ep.turns:  # one with none was lost to the infrastructure: it says nothing of the task
                    self.curator.record(ep.task_id, success=ep.success, steps=ep.steps)
                if ep.success:
                    self.pool.add(ep)
                # A group is the rollouts of one request: one instance (seed) of the task.
                key = (ep.task_id, ep.seed)
                left = self.wanted.pop(key, 1)  # an episode nobody asked for is a group of its own
                if id(ep) not in fresh or not ep.turns:
                    self.dropped += 1  # its group completes with one fewer
                    self.untrained["stale" if ep.turns else "turnless"] += 1
                    self.unusable_run += 1
                else:
                    self.buffers[key].append(ep)
                    self.unusable_run = 0
                if left > 1:
                    self.wanted[key] = left - 1
                else:
                    group = self.buffers.pop(key, [])
                    if group:
                        groups.append(group)
                        got += len(group)
        return groups

    # --- the update ---

    def _encode_turn(self, turn: RLTurn) -> _Sample | None:
        sample = self._sample(turn.messages, turn.a11y, list(turn.response_ids))
        if sample is not None:
            sample.rollout_logprobs = list(turn.rollout_logprobs)[: len(sample.response)]
        return sample

    def _minibatches(self, samples: list[_Sample]) -> list[list[_Sample]]:
        size = int(self.cfg["minibatch_size"])
        return [samples[i : i + size] for i in range(0, len(samples), size)]

    def _score(self, samples: list[_Sample], *, values: bool) -> None:
        """π_old log-probabilities and entropies (and critic values) of every sample, without gradients."""
        pad = int(self.tokenizer.pad_token_id)
        self.model.eval()
        with self.torch.no_grad():
            for mb in self._minibatches(samples):
                ids, attn, mask, plen = _batch(mb, pad, self.device)
                images = self._images(mb)
                lens = [len(s.response) for s in mb]
                logp, ent = _token_logprobs(self.model, ids, attn, entropy=True, images=images)
                ents = _gather(ent, mask, plen, lens)
                vals = _gather(self.critic(ids, attn, images)[:, :-1], mask, plen, lens) if values else None
                for i, (s, lp) in enumerate(zip(mb, _gather(logp, mask, plen, lens), strict=True)):
                    s.old_logprobs = lp
                    s.entropy = sum(ents[i]) / max(1, len(ents[i]))
                    if vals is not None:
                        s.old_values = vals[i]
        self.model.train()

    def _samples(self, groups: list[list[RLEpisode]], metrics: dict[str, float]) -> list[_Sample]:
        from agent_core.rl.advantages import adaptive_lambda, decoupled_gae, group_advantages

        torch = self.torch
        samples: list[_Sample] = []
        if self.grpo:
            injected = 0
            for group in groups:
                group, used = self.pool.inject(group)
                injected += int(used)
                advs = group_advantages([ep.reward for ep in group])
                if not any(advs):
                    solved = all(ep.success for ep in group)
                    self.untrained["agreed_solved" if solved else "agreed_failed"] += 1
                for ep, adv in zip(group, advs, strict=True):
                    if adv == 0.0:
                        continue  # nothing to learn from a group that all agrees
                    for turn in ep.turns:
                        s = self._encode_turn(turn)
                        if s is None:
                            continue  # too long for max_seq_len (counted)
                        s.advantages = [adv] * len(s.response)
                        samples.append(s)
            metrics["rl/injected"] = float(injected)
            self._score(samples, values=False)
            return samples
        # PPO: per episode, its turns' tokens in one sequence; format penalties on unparsable turns'
        # last tokens, the episode's reward on its last token; decoupled GAE over the sequence.
        # An episode with a turn too long for max_seq_len is left out whole: its turns are one sequence.
        kept: list[tuple[RLEpisode, list[_Sample]]] = []
        for group in groups:
            for ep in group:
                encoded = [self._encode_turn(t) for t in ep.turns]
                if all(s is not None for s in encoded):
                    kept.append((ep, [s for s in encoded if s is not None]))
        self._score([s for _, turns in kept for s in turns], values=True)
        lambdas = []
        for ep, turns in kept:
            rewards: list[float] = []
            for t, s in zip(ep.turns, turns, strict=True):
                r = [0.0] * len(s.response)
                if not t.parsed and r:
                    r[-1] += float(self.cfg["format_reward"])
                rewards += r
            if not rewards:
                continue
            rewards[-1] += float(ep.reward)
            values = [v for s in turns for v in s.old_values]
            lam = adaptive_lambda(len(rewards), float(self.cfg["alpha"]))
            lambdas.append(lam)
            adv, ret = decoupled_gae(
                torch.tensor(rewards),
                torch.tensor(values),
                gamma=float(self.cfg["gamma"]),
                lambda_value=float(self.cfg["lambda_value"]),
                lambda_policy=lam,
            )
            pos = 0
            for s in turns:
                s.advantages = adv[pos : pos + len(s.response)].tolist()
                s.returns = ret[pos : pos + len(s.response)].tolist()
                pos += len(s.response)
            samples += turns
        if lambdas:
            metrics["rl/lambda_policy"] = sum(lambdas) / len(lambdas)
        return samples

    def _update(self, samples: list[_Sample], metrics: dict[str, float]) -> int:
        """PPO epochs over minibatches; returns the tokens processed."""
        from agent_core.rl.curation import top_entropy_mask
        from agent_core.rl.losses import (
            explained_variance,
            kl_penalty,
            ppo_policy_loss,
            truncated_is_weights,
            value_loss,
        )

        torch = self.torch
        cfg = self.cfg
        pad = int(self.tokenizer.pad_token_id)
        pretraining = not self.grpo and self.value_pretrained < int(cfg["value_pretrain_steps"])
        if self.grpo and samples:
            keep = top_entropy_mask([s.entropy for s in samples], float(cfg["entropy_top"]))
            samples = [s for s, k in zip(samples, keep, strict=True) if k]
        stats: dict[str, list[float]] = defaultdict(list)
        tokens = 0
        rng = random.Random(int(cfg["seed"]) * 7919 + self.step)  # noqa: S311 - minibatch order
        for _ in range(int(cfg["ppo_epochs"])):
            order = samples[:]
            rng.shuffle(order)
            for mb in self._minibatches(order):
                ids, attn, mask, plen = _batch(mb, pad, self.device)
                images = self._images(mb)
                tokens += int(attn.sum())
                if self.critic is not None:
                    vals = self.critic(ids, attn, images)[:, :-1]
                    returns = _scatter([s.returns for s in mb], mask, plen)
                    old_v = _scatter([s.old_values for s in mb], mask, plen)
                    clip = float(cfg["value_clip"])
                    vloss = value_loss(vals, returns, mask, old_values=old_v if clip > 0 else None, clip=clip)
                    self.critic_opt.zero_grad(set_to_none=True)
                    vloss.backward()
                    self._clip(self.critic.parameters())
                    self.critic_opt.step()
                    stats["value_loss"].append(float(vloss.detach()))
                    stats["explained_var"].append(explained_variance(vals.detach(), returns, mask))
                if pretraining:
                    continue
                logp, _ = _token_logprobs(self.model, ids, attn, images=images)
                old = _scatter([s.old_logprobs for s in mb], mask, plen)
                adv = _scatter([s.advantages for s in mb], mask, plen)
                weights = None
                if self.grpo:
                    rollout = _scatter([s.rollout_logprobs for s in mb], mask, plen)
                    weights = truncated_is_weights(old, rollout, float(cfg["is_cap"]))
                    m = mask.bool()
                    raw = torch.exp(old - rollout)[m]
                    if raw.numel():
                        stats["is_weight_mean"].append(float(weights[m].mean()))
                        stats["is_weight_max"].append(float(raw.max()))
                        stats["is_weight_min"].append(float(raw.min()))
                        stats["is_truncated_frac"].append(float((raw > float(cfg["is_cap"])).float().mean()))
                dual = float(cfg["dual_clip"]) if self.grpo and float(cfg.get("dual_clip", 0)) > 1 else None
                loss, pstats = ppo_policy_loss(
                    logp,
                    old,
                    adv,
                    mask,
                    eps_low=float(cfg["eps_low"]),
                    eps_high=float(cfg["eps_high"]),
                    dual_clip=dual,
                    is_weights=weights,
                )
                if self.ref is not None:
                    with torch.no_grad():
                        ref_lp, _ = _token_logprobs(self.ref, ids, attn, images=images)
                    kl = (kl_penalty(logp, ref_lp) * mask).sum() / mask.sum().clamp(min=1.0)
                    loss = loss + float(cfg["kl_coef"]) * kl
                    stats["kl_ref"].append(float(kl.detach()))
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                stats["grad_norm"].append(self._clip(self.model.parameters()))
                self.optimizer.step()
                stats["policy_loss"].append(float(loss.detach()))
                for key in ("clip_frac", "approx_kl", "dual_clip_frac", "ratio_max"):
                    if key in pstats:
                        stats[key].append(float(pstats[key]))
        if pretraining:
            self.value_pretrained += 1
            metrics["rl/value_pretraining"] = 1.0
            self.untrained["value_pretraining"] += 1
        else:
            self.turns_trained += len(samples)
        for key, vals in stats.items():
            if vals:
                name = {"approx_kl": "rl/kl"}.get(key, f"rl/{key}")
                if key in ("is_weight_max", "ratio_max"):
                    metrics[name] = max(vals)
                elif key == "is_weight_min":
                    metrics[name] = min(vals)
                else:
                    metrics[name] = sum(vals) / len(vals)
        if samples:
            metrics["rl/entropy"] = sum(s.entropy for s in samples) / len(samples)
            metrics["rl/response_len"] = sum(len(s.response) for s in samples) / len(samples)
        metrics["rl/turns_trained"] = float(len(samples))
        return tokens

    def run(self, source: RolloutSource | None) -> RunResult:
        if source is None:
            raise TrainingError(f"a {self.spec.algorithm} run needs live rollouts (a rollout source)")
        tasks = list(source.tasks())
        if not tasks:
            raise TrainingError("there are no tasks to roll out on")
        cfg = self.cfg
        total = int(cfg["iterations"])
        metrics: dict[str, float] = {}
        if self.spec.resume_from is None:
            current = self.save(self.extra_state(), {})  # step 0: the starting policy, published as v0
        else:
            current = Path(self.spec.resume_from)
        source.publish(self.version, current)
        self.hooks.on_log(
            f"{self.spec.algorithm.upper()} on {len(tasks)} task(s): {total} iterations of "
            f"{cfg['episodes_per_iteration']} episodes, policy v{self.version}, on {self.device}"
        )
        source.utilisation()  # starts its window
        while self.step < total:
            waited = time.monotonic()
            groups = self._collect(source, tasks)
            if groups is None:
                self.hooks.on_log(f"stop requested: saving iteration {self.step}")
                path = self.save(self.extra_state(), metrics)
                return RunResult("stopped", self.step, path, metrics)
            wait_s = time.monotonic() - waited
            started = time.monotonic()
            episodes = [ep for g in groups for ep in g]
            metrics = {
                "rl/reward": sum(ep.reward for ep in episodes) / len(episodes),
                "rl/success": sum(ep.success for ep in episodes) / len(episodes),
                "rl/episodes": float(len(episodes)),
                "rl/policy_lag": sum(self.version - ep.policy_version for ep in episodes) / len(episodes),
                "rl/dropped_stale": float(self.dropped),
                "rl/wait_s": wait_s,
            }
            by_task: dict[str, list[float]] = defaultdict(list)
            for ep in episodes:
                by_task[ep.task_id].append(float(ep.success))
            for task, vals in by_task.items():
                metrics[f"rl/success/{task}"] = sum(vals) / len(vals)
            samples = self._samples(groups, metrics)
            if self.too_long:  # vision-language turns over max_seq_len so far (never cut: see the top)
                metrics["rl/skipped_too_long"] = float(self.too_long)
            tokens = self._update(samples, metrics) if samples else 0
            self.step += 1
            elapsed = time.monotonic() - started
            metrics["train/step_time_s"] = elapsed
            metrics["train/tokens_per_s"] = tokens / max(elapsed, 1e-9)
            util = source.utilisation()
            if util is not None:
                metrics["rl/env_utilisation"] = util
            self.hooks.on_metrics(self.step, metrics)
            self.hooks.on_log(
                f"iteration {self.step}/{total}: success {metrics['rl/success']:.2f} over "
                f"{len(episodes)} episodes, {len(samples)} turns trained, {elapsed:.1f} s update, "
                f"{wait_s:.1f} s waiting"
            )
            publish = self.step % int(cfg["publish_every"]) == 0
            if publish or self.step % int(cfg["checkpoint_every"]) == 0 or self.step == total:
                if publish:
                    self.version += 1
                    self.versions_seen.append(self.version)
                path = self.save(self.extra_state(), metrics)
                if publish:
                    source.publish(self.version, path)
        if self.turns_trained == 0:
            raise TrainingError(self._why_untrained(total))
        return RunResult("succeeded", self.step, latest_checkpoint(self.out_dir), metrics)

    def _why_untrained(self, iterations: int, *, waiting: int = 0) -> str:
        """Why a run's policy was updated on no turn at all (or, `waiting`, why the next iteration
        cannot get episodes to train on), from what this attempt counted."""
        n = self.untrained
        reasons = []
        agreed = n["agreed_failed"] + n["agreed_solved"]
        if agreed:
            reasons.append(
                f"{agreed} group(s) of rollouts all scored alike ({n['agreed_failed']} all failed, "
                f"{n['agreed_solved']} all solved), so every advantage was 0: roll out on tasks the "
                "policy solves some of the time, or raise group_size"
            )
        if n["turnless"]:
            reasons.append(
                f"{n['turnless']} episode(s) came back with no sampled turn (lost to the infrastructure, "
                "or their policy kept no token ids and logprobs)"
            )
        if n["stale"]:
            reasons.append(f"{n['stale']} episode(s) came from policies older than max_policy_lag allows")
        if self.too_long:
            limit = self.cfg["max_seq_len"]
            reasons.append(f"{self.too_long} turn(s) were longer than max_seq_len ({limit})")
        if n["value_pretraining"]:
            pretrained = n["value_pretraining"]
            reasons.append(f"{pretrained} iteration(s) trained only the critic (value_pretrain_steps)")
        why = "; ".join(reasons) or "no episode gave a turn to learn from"
        if waiting:
            return (
                f"{self.spec.algorithm.upper()} stopped at iteration {iterations + 1}: the last {waiting} "
                f"episodes were all unusable, so no batch to train on would ever fill: {why}"
            )
        return (
            f"{self.spec.algorithm.upper()} trained the policy on 0 turns in {iterations} iteration(s), "
            f"so the run learned nothing: {why}"
        )


def run(
    spec: RunSpec,
    hooks: Hooks,
    *,
    examples: Iterable[SFTExample] | None = None,
    source: RolloutSource | None = None,
) -> RunResult:
    """Train as `spec` says; returns when done or stopped. TrainingError for what the user must fix."""
    if spec.algorithm == "sft":
        return SFTTrainer(spec, hooks).run(examples)
    if spec.algorithm in ("ppo", "grpo"):
        return RLTrainer(spec, hooks).run(source)
    raise TrainingError(f"unknown algorithm {spec.algorithm!r}")


def format_exception(exc: BaseException) -> str:
    """A traceback as text, for a run's log."""
    return "".join(traceback.format_exception(exc))
