"""bench/serving_bench.py runs end to end on a real vLLM engine: the same batch in-process and on the
engine, then a LoRA adapter hot-loaded mid-batch without losing a step.

Parts (a)-(c) on the smallest batch; the rolling update (d) starts three more engines (some six minutes on
the 2-core CI machine), which the bench's own run covers. Figures are printed, never asserted on. A
`make verify-suites` sweep: the engine it measures is tested through the real thing in make test's
serving phase (test_vllm_real.py, the served-rollouts end-to-end test)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.agent_core.serving.vllm_proc import vllm_python
from tests.procs import ROOT

pytestmark = [pytest.mark.slow, pytest.mark.vllm, pytest.mark.sweep]
pytest.importorskip("transformers")
pytest.importorskip("peft")


def test_the_serving_bench_compares_in_process_with_the_engine_and_hot_loads_an_adapter(tmp_path):
    figures_path = tmp_path / "figures.json"
    small = "--tasks click-test --seeds 0,1 --envs 1 --sft-steps 0 --demos 1 --parts abc --max-new-tokens 24"
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "serving_bench.py"),
        *small.split(),
        "--vllm-python",
        vllm_python(),
    ]
    cmd += ["--workdir", str(tmp_path / "work"), "--json", str(figures_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False, cwd=ROOT)
    print(out.stdout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    res = json.loads(figures_path.read_text())
    local, served, lora = res["a"], res["b"], res["c"]
    # The same batch both ways: every episode ran, every turn generated tokens within the budget.
    for f in (local, served, lora):
        assert f["episodes"] == 2 and f["errors"] == [] and f["failed_turns"] == 0
        assert f["turns"] >= 2 and 0 < f["tokens"] <= 24 * f["turns"]
    # The adapter was loaded while the batch ran; episodes before it used the base, after it the adapter.
    assert lora["load_error"] == "" and "tiny-policy-lora" in lora["served_after"]
    assert lora["steps_by_model"].get("tiny-policy", 0) > 0
    assert lora["steps_by_model"].get("tiny-policy-lora", 0) > 0
    assert res["lost"] == {"c": 0}
    assert "steps lost: 0" in out.stdout


def test_the_serving_bench_runs_a_vision_language_policy_on_screenshots_both_ways(tmp_path):
    """--vision: a tiny Qwen2.5-VL reading the screenshots (three in its history) in-process and on the
    engine, and the trainer re-scoring the engine's samples with the same images (the gap is printed)."""
    figures_path = tmp_path / "figures.json"
    small = (
        "--vision --tasks click-test --seeds 0,1 --envs 1 --sft-steps 0 --demos 1 --parts ab --max-steps 5"
    )
    cmd = [
        sys.executable,
        str(ROOT / "bench" / "serving_bench.py"),
        *small.split(),
        "--vllm-python",
        vllm_python(),
    ]
    cmd += ["--max-new-tokens", "24", "--workdir", str(tmp_path / "work"), "--json", str(figures_path)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=900, check=False, cwd=ROOT)
    print(out.stdout)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    res = json.loads(figures_path.read_text())
    for f in (res["a"], res["b"]):
        assert f["episodes"] == 2 and f["errors"] == [] and f["failed_turns"] == 0
        assert f["image_tokens_per_turn"] > 0  # the prompts carried the screenshots
    assert res["gap"]["turns_scored"] > 0 and res["gap"]["rebuild_differs"] == 0
