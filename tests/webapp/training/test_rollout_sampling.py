"""A training run's rollout versions sample exactly as its trainer scores: the run's temperature and
top_p, on a local policy and in a served one's request body, and no fixed seed that would draw every
rollout of a GRPO group the same."""

from __future__ import annotations

from pathlib import Path

from agent_core.env import Obs
from agent_core.policies import PolicyInput, make_policy
from agent_core.training.config import validate_config
from webapp.training.rollout_source import rollout_config

RUN = validate_config("grpo", {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 24})


def test_a_local_rollout_policy_samples_at_the_runs_temperature_and_top_p_without_the_bases_seed(
    tmp_path: Path,
) -> None:
    (tmp_path / "config.json").write_text("{}")
    base = {"coords": "absolute", "temperature": 0.0, "top_p": 0.5, "seed": 7}
    config = rollout_config(base, RUN, served=False)
    assert config == {"coords": "absolute", "temperature": 0.7, "top_p": 0.9, "max_new_tokens": 24}
    policy = make_policy("local", model_path=str(tmp_path), **config)
    assert (policy.temperature, policy.top_p, policy.seed) == (0.7, 0.9, None)  # type: ignore[attr-defined]


def test_a_served_rollout_policy_asks_vllm_for_the_runs_sampling_and_nothing_else() -> None:
    base = {"text_only": True, "extra_body": {"return_token_ids": True}}
    config = rollout_config(base, RUN, served=True)
    policy = make_policy("openai", base_url="http://gpu-box:8000/v1", model="run-1-v0", **config)
    inp = PolicyInput(
        instruction="Click OK",
        observation=Obs(screenshot=b"", width=4, height=4),
        step_index=0,
        messages=({"role": "user", "content": "Click OK"},),
    )
    body = policy.request_body(inp)  # type: ignore[attr-defined]
    assert (body["temperature"], body["top_p"], body["max_tokens"]) == (0.7, 0.9, 24)
    # The checkpoint's generation_config (top_k, repetition_penalty) must not reshape vLLM's distribution.
    assert (body["top_k"], body["repetition_penalty"], body["return_token_ids"]) == (0, 1.0, True)
