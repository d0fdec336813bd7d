"""What the RL audit found wrong with sampling and log-probabilities, each checked on a tiny model.

A seed makes a policy's sequence of samples reproducible, not every sample the same; the sampler
records the log-probabilities of the distribution it drew from (temperature, top-p) and the trainer
scores π_old and π under the same one; an RL turn longer than max_seq_len is skipped and counted,
never cut; log-probabilities are computed only where the loss reads them, in chunks, equal to the
straightforward computation; the vLLM engine is started to return processed log-probabilities.
"""

from __future__ import annotations

import math
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from agent_core.env import Obs  # noqa: E402
from agent_core.policies import PolicyInput  # noqa: E402
from agent_core.policies.local import LocalPolicy  # noqa: E402
from agent_core.rl.losses import entropy_from_logits  # noqa: E402
from agent_core.serving.engine import EngineSpec  # noqa: E402
from agent_core.training import batching, rl_trainer  # noqa: E402
from agent_core.training.batching import Sample, gather, pad_batch, token_logprobs  # noqa: E402
from agent_core.training.config import validate_config  # noqa: E402
from agent_core.training.model_io import load_policy_model  # noqa: E402
from agent_core.training.rl_trainer import RLTrainer  # noqa: E402
from agent_core.training.trainer import Trainer  # noqa: E402
from agent_core.training.types import NullHooks, RunSpec  # noqa: E402

PROMPT = ({"role": "user", "content": "Click the OK button"},)


def policy_input(text: str = "Click the OK button") -> PolicyInput:
    obs = Obs(screenshot=b"", width=64, height=48)
    messages = ({"role": "user", "content": text},)
    return PolicyInput(instruction=text, observation=obs, step_index=0, messages=messages)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agent_core.tiny_models import build_tiny_causal_lm

    return build_tiny_causal_lm(tmp_path_factory.mktemp("tiny-lm"))


@pytest.fixture(scope="module")
def model(tiny: Path) -> Any:
    return load_policy_model(tiny, device="cpu")[1]


def straightforward(model: Any, ids: Any, attn: Any) -> tuple[Any, Any]:
    """The old computation: float32 log-softmax and entropy over the whole vocabulary everywhere."""
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    chosen = torch.log_softmax(logits, dim=-1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    return chosen, entropy_from_logits(logits)


def batch(vocab: int, lengths: list[tuple[int, int]], seed: int = 0) -> tuple[Any, Any, Any, list[int]]:
    """A padded batch of random prompts and responses of the given (prompt, response) lengths."""
    g = torch.Generator().manual_seed(seed)

    def tokens(n: int) -> list[int]:
        return torch.randint(3, vocab, (n,), generator=g).tolist()

    samples = [Sample(tokens(p), tokens(r)) for p, r in lengths]
    return pad_batch(samples, 0, "cpu")


# --- 1. a seed makes the sequence of samples reproducible, not every sample the same ---


def test_a_seeded_policy_draws_different_samples_and_the_seed_reproduces_the_sequence(tiny: Path) -> None:
    def four(seed: int | None) -> list[tuple[int, ...]]:
        policy = LocalPolicy(model_path=tiny, temperature=1.0, seed=seed, max_new_tokens=6)
        return [policy.act(policy_input()).token_ids or () for _ in range(4)]

    rng = torch.get_rng_state()
    first = four(7)
    assert len(set(first)) > 1, "every sample of one prompt was the same: the seed is re-applied per sample"
    assert four(7) == first  # a rerun with the same seed draws the same sequence
    # The policy draws with its own generator: the process's global RNG is neither re-seeded nor used.
    assert torch.equal(torch.get_rng_state(), rng)


# --- 2. the sampler's log-probabilities are the trainer's, under temperature and top-p ---


@pytest.mark.parametrize(("temperature", "top_p"), [(0.7, 0.9), (1.0, 1.0)])
def test_the_sampler_records_the_logprob_the_trainer_computes(
    tiny: Path, model: Any, temperature: float, top_p: float
) -> None:
    policy = LocalPolicy(model_path=tiny, temperature=temperature, top_p=top_p, seed=3, max_new_tokens=10)
    out = policy.act(policy_input())
    assert out.token_ids and out.logprobs and out.prompt_token_ids
    ids, attn, mask, plen = pad_batch([Sample(list(out.prompt_token_ids), list(out.token_ids))], 0, "cpu")
    with torch.no_grad():
        lp, _ = token_logprobs(
            model, ids, attn, mask=mask, sampling={"temperature": temperature, "top_p": top_p}
        )
        raw, _ = token_logprobs(model, ids, attn, mask=mask)
    n = len(out.token_ids)
    ours = gather(lp, mask, plen, [n])[0]
    assert ours == pytest.approx(list(out.logprobs), abs=1e-5)
    if (temperature, top_p) != (1.0, 1.0):
        # Not the raw distribution's: with these settings the two must differ for the test to mean anything.
        unprocessed = gather(raw, mask, plen, [n])[0]
        assert max(abs(a - b) for a, b in zip(unprocessed, out.logprobs, strict=True)) > 1e-3


def test_the_rl_trainer_scores_pi_old_and_pi_under_the_runs_temperature_and_top_p(
    tiny: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    config = validate_config("grpo", {"temperature": 0.7, "top_p": 0.9, "device": "cpu", "minibatch_size": 2})
    trainer = RLTrainer(RunSpec("grpo", config, tiny, tmp_path / "out"), NullHooks(quiet=True))
    policy = LocalPolicy(model_path=tiny, temperature=0.7, top_p=0.9, seed=5, max_new_tokens=8)
    outs = [policy.act(policy_input(text)) for text in ("Click OK", "Type hello")]
    samples = [Sample(list(o.prompt_token_ids or ()), list(o.token_ids or ())) for o in outs]
    for sample, out in zip(samples, outs, strict=True):
        sample.rollout_logprobs = list(out.logprobs or ())
        sample.advantages = [1.0] * len(sample.response)
    trainer.score(samples, values=False)
    # π_old on the weights that sampled is π_rollout: every importance weight is 1.
    for sample, out in zip(samples, outs, strict=True):
        assert sample.old_logprobs == pytest.approx(list(out.logprobs or ()), abs=1e-5)
    # The policy step scores π under the same distribution.
    asked: list[Any] = []
    scored = rl_trainer.token_logprobs

    def spy(*args: Any, **kwargs: Any) -> Any:
        asked.append(kwargs.get("sampling"))
        return scored(*args, **kwargs)

    monkeypatch.setattr(rl_trainer, "token_logprobs", spy)
    stats: dict[str, list[float]] = defaultdict(list)
    trainer._policy_step(trainer_batch(trainer, samples), stats)
    assert asked and all((s["temperature"], s["top_p"]) == (0.7, 0.9) for s in asked)
    assert stats["is_weight_max"][0] == pytest.approx(1.0, abs=1e-4)
    assert stats["outside_nucleus_frac"] == [0.0]


def trainer_batch(trainer: RLTrainer, samples: list[Sample]) -> Any:
    ids, attn, mask, plen = pad_batch(samples, int(trainer.tokenizer.pad_token_id), "cpu")
    return rl_trainer._Minibatch(samples, ids, attn, mask, plen, {})


def test_a_sampled_token_outside_the_trainers_nucleus_is_scored_finite_and_counted(model: Any) -> None:
    ids, attn, mask, _ = batch(model.config.vocab_size, [(5, 6), (3, 4)])
    stats: dict[str, list[float]] = {}
    model.zero_grad()
    lp, _ = token_logprobs(
        model, ids, attn, mask=mask, sampling={"temperature": 0.5, "top_p": 0.05}, stats=stats
    )
    picked = lp[mask > 0]
    assert torch.isfinite(picked).all()
    # Random tokens under a 5% nucleus of a near-uniform model: most fall outside it, and are counted.
    assert stats["outside_nucleus_frac"] and 0.5 < stats["outside_nucleus_frac"][0] <= 1.0
    # Each is scored over the nucleus plus itself.
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float() / 0.5
    row, col = (mask > 0).nonzero()[0].tolist()
    token = int(ids[row, col + 1])
    probs = logits[row, col].softmax(-1)
    ordered, order = probs.sort()
    keep = torch.zeros_like(probs, dtype=torch.bool)
    keep[order[ordered.cumsum(-1) > 0.95]] = True
    keep[order[-1]] = keep[token] = True
    expected = torch.log_softmax(logits[row, col].masked_fill(~keep, float("-inf")), -1)[token]
    assert float(lp[row, col].detach()) == pytest.approx(float(expected), abs=1e-5)
    # Its gradient is finite too.
    (-(lp * mask).sum()).backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    model.zero_grad()


# --- 3. an RL turn over max_seq_len is skipped and counted, never cut ---


@pytest.mark.parametrize("algorithm", ["grpo", "sft"])
def test_an_rl_turn_over_max_seq_len_is_skipped_and_counted_never_cut(
    tiny: Path, tmp_path: Path, algorithm: str
) -> None:
    config = validate_config(algorithm, {"max_seq_len": 40, "device": "cpu"})
    trainer = Trainer(RunSpec(algorithm, config, tiny, tmp_path / "out"), NullHooks(quiet=True))
    long_prompt = ({"role": "user", "content": "Click the OK button " * 20},)
    prompt = trainer.codec.prompt_ids(long_prompt, None)
    assert len(prompt) > 40
    fits = trainer._sample(PROMPT, None, [5, 6, 7])
    assert fits is not None and fits.prompt == trainer.codec.prompt_ids(PROMPT, None)
    assert fits.response == [5, 6, 7]
    sample = trainer._sample(long_prompt, None, [5, 6, 7])
    if algorithm == "sft":
        # SFT has no sampler to disagree with: its text prompt keeps its end.
        assert sample is not None and sample.prompt == prompt[-37:] and trainer.too_long == 0
    else:
        assert sample is None and trainer.too_long == 1
        # A response alone over the limit is skipped too, not cut.
        assert trainer._sample(PROMPT, None, list(range(5, 60))) is None and trainer.too_long == 2


def test_a_turn_rebuilt_to_another_prompt_than_its_sampler_read_is_counted_never_trained(
    tiny: Path, tmp_path: Path
) -> None:
    """Token in, token out: a turn's stamp (what the sampler read) against the trainer's rebuild; the
    engine/trainer log-prob mismatch of what is trained, by turn index."""
    from agent_core.data.trajectory import prompt_stamp
    from agent_core.rl.episodes import RLTurn
    from agent_core.training.untrained import why_untrained

    config = validate_config("grpo", {"device": "cpu", "minibatch_size": 2})
    trainer = RLTrainer(RunSpec("grpo", config, tiny, tmp_path / "out"), NullHooks(quiet=True))
    policy = LocalPolicy(model_path=tiny, seed=5, max_new_tokens=6)
    out = policy.act(policy_input("Click OK"))
    assert out.prompt_token_ids and out.token_ids and out.logprobs
    stamp = prompt_stamp(out.prompt_token_ids)
    sampled = {"response_ids": out.token_ids, "rollout_logprobs": out.logprobs}
    read = ({"role": "user", "content": "Click OK"},)
    other = ({"role": "user", "content": "Click OK, then Cancel"},)
    same = trainer.encode_turn(RLTurn(messages=read, a11y=None, index=0, prompt=stamp, **sampled))
    assert same is not None and same.prompt == list(out.prompt_token_ids) and same.turn_index == 0
    assert trainer.encode_turn(RLTurn(messages=other, a11y=None, index=1, prompt=stamp, **sampled)) is None
    assert trainer.rebuild_differs == 1 and trainer.untrained["rebuild_differs"] == 1
    assert "1 turn(s) rebuilt to a prompt other than" in why_untrained(
        "grpo", trainer.untrained, too_long=0, max_seq_len=2048, iterations=1
    )
    # No stamp (a sampler that gave no prompt ids): nothing to tell by, trained as before.
    unstamped = trainer.encode_turn(RLTurn(messages=other, a11y=None, index=12, prompt=None, **sampled))
    assert unstamped is not None and unstamped.turn_index == 12
    trainer.score([same, unstamped], values=False)
    metrics: dict[str, float] = {}
    trainer.mismatch.report(metrics, rebuild_differs=trainer.rebuild_differs)
    # The same prompt on the weights that sampled: no mismatch. Another prompt: the one it shows.
    assert metrics["rl/logprob_mismatch/turn_0"] < 1e-5
    assert metrics["rl/logprob_mismatch/turn_9+"] > 1e-4  # turn 12, in the last bucket
    assert metrics["rl/logprob_mismatch_max"] == max(
        metrics["rl/logprob_mismatch_max/turn_0"], metrics["rl/logprob_mismatch_max/turn_9+"]
    )
    assert metrics["rl/rebuild_differs"] == 1.0
    # A turn an older version sampled: its gap holds the policy's own change, reported apart.
    older = trainer.encode_turn(
        RLTurn(messages=read, a11y=None, index=0, prompt=stamp, **sampled), version=-1
    )
    assert older is not None and not older.on_policy
    older.rollout_logprobs = [lp - 0.5 for lp in older.rollout_logprobs]
    trainer.score([older], values=False)
    lagged: dict[str, float] = {}
    trainer.mismatch.report(lagged)
    assert lagged["rl/logprob_mismatch_lagged_mean"] == pytest.approx(0.5, abs=1e-4)
    assert lagged["rl/logprob_mismatch_lagged_share"] == 1.0 and "rl/logprob_mismatch_mean" not in lagged
    after: dict[str, float] = {}
    trainer.mismatch.report(after)  # reset for the next iteration
    assert "rl/logprob_mismatch_mean" not in after


# --- 4. log-probabilities only where the loss reads them, in chunks, equal to the full computation ---


@pytest.mark.parametrize("chunk", [1024, 3])
def test_masked_chunked_logprobs_equal_the_full_computation_with_the_same_gradient(
    model: Any, monkeypatch: pytest.MonkeyPatch, chunk: int
) -> None:
    monkeypatch.setattr(batching, "LOGPROB_CHUNK", chunk)
    ids, attn, mask, _ = batch(model.config.vocab_size, [(12, 5), (7, 2), (20, 1)])
    projected: list[tuple[int, ...]] = []
    hook = model.lm_head.register_forward_hook(lambda m, i, o: projected.append(tuple(o.shape)))
    try:
        lp, ent = token_logprobs(model, ids, attn, mask=mask, entropy=True)
    finally:
        hook.remove()
    # Only the masked positions reached the vocabulary projection (8 of 3 x 20).
    assert projected == [(int(mask.sum()), model.config.vocab_size)]
    full_lp, full_ent = straightforward(model, ids, attn)
    sel = mask > 0
    assert torch.allclose(lp[sel], full_lp[sel], atol=1e-6, rtol=0)
    assert torch.allclose(ent[sel], full_ent[sel], atol=1e-6, rtol=0)
    assert not lp[~sel].any() and not ent[~sel].any()

    def grads(values: Any) -> list[Any]:
        model.zero_grad()
        (values * mask * torch.linspace(0.5, 1.5, mask.shape[1])).sum().backward()
        return [p.grad.clone() for p in model.parameters()]

    ours = grads(token_logprobs(model, ids, attn, mask=mask)[0])
    reference = grads(straightforward(model, ids, attn)[0])
    model.zero_grad()
    for a, b in zip(ours, reference, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)


def test_a_minibatch_with_no_response_token_still_runs_backward(model: Any) -> None:
    ids, attn, mask, _ = batch(model.config.vocab_size, [(6, 0), (4, 0)])
    lp, _ = token_logprobs(model, ids, attn, mask=mask)
    assert not lp.any()
    (lp * mask).sum().backward()  # zero gradients, not an error
    model.zero_grad()


def test_without_a_mask_every_position_is_computed_as_before(model: Any) -> None:
    ids, attn, _, _ = batch(model.config.vocab_size, [(6, 3), (2, 2)])
    with torch.no_grad():
        lp, ent = token_logprobs(model, ids, attn, entropy=True)
        full_lp, full_ent = straightforward(model, ids, attn)
    assert torch.allclose(lp, full_lp, atol=1e-6, rtol=0) and torch.allclose(ent, full_ent, atol=1e-6, rtol=0)
    assert math.isfinite(float(lp.sum()))


# --- the served side: vLLM is asked for processed log-probabilities ---


def test_the_engine_returns_the_logprobs_of_the_distribution_it_sampled_from() -> None:
    cmd = EngineSpec(model=Path("/m"), served_name="t", port=1, python="p").command()
    assert cmd[cmd.index("--logprobs-mode") + 1] == "processed_logprobs"
