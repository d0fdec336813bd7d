"""A 10,000-step export streams in bounded memory and loads back whole (runs bench/export_bench.py)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[3]


def test_a_10000_step_export_streams_in_bounded_memory_and_loads_back() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "export_bench.py"), "--steps", "10000", "--json"],
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    figures = json.loads(out.stdout.strip().splitlines()[-1])
    print(out.stdout)
    assert figures["steps"] == 10_000
    # Every step is a training sample; the datasets library reads back every record and image.
    assert figures["records"] == figures["loaded_records"] == 10_000
    assert figures["images_in_records"] == 10_000 and figures["images_unreadable"] == 0
    # Streaming: ten times the data (about 280 MB more screenshots) may not cost more than a
    # small fraction of it in peak memory. Holding the images or the records would add hundreds of MB.
    assert figures["data_growth_mb"] > 200
    assert figures["rss_growth_mb"] < 0.2 * figures["data_growth_mb"], figures
