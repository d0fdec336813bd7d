"""bench/vlm_device_check.py, the GPU device check, run on the CPU (`make verify-suites`): it builds
its tiny Qwen2.5-VL, says plainly that vLLM's part did not run where vLLM does not import, trains one
LoRA GRPO iteration on its sampled turns and prints its figures. On a machine with a GPU it runs as
`python bench/vlm_device_check.py` (--device cuda)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.sweep]
ROOT = Path(__file__).resolve().parents[2]


def test_the_device_check_runs_on_the_cpu_and_says_what_did_not_run() -> None:
    script = str(ROOT / "bench" / "vlm_device_check.py")
    cmd = [
        sys.executable,
        script,
        "--device",
        "cpu",
        "--dtype",
        "float32",
        "--iterations",
        "1",
        "--episodes",
        "8",
    ]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=ROOT, check=False)  # noqa: S603
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    assert "vLLM: not importable on this machine: the served part did NOT run" in out.stdout
    assert "LoRA GRPO: succeeded" in out.stdout and "rl/logprob_mismatch_max" in out.stdout
    assert "planner estimate" in out.stdout and out.stdout.rstrip().endswith("PASS")
