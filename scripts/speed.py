"""How fast this machine is against the one the test budgets were set on (tests/budget.toml [machine]).

A fixed piece of the work the suite does, run by two processes at once (the suite's two workers: two
vCPUs that share one core show here) and timed as the median of a few repetitions on an idle machine:
interpreting Python (what Django, the ORM and the parsers spend), compressing bytes (screens, exports),
and starting processes (sandboxes, servers, browsers). Prints one JSON line: each part's seconds, and
`factor`, the geometric mean of this machine's times over the reference's (2.0: half as fast).
scripts/test.sh measures it before and after the run and scales the budgets by it, so that a slower CI
machine is held to the same work, not to the same seconds; `--reference` prints the figures to put in
the budget file.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
import tomllib
import zlib
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPEATS = 5
PROCESSES = 2


def python_work() -> None:
    words = [f"step-{i}-{i * 7919 % 1000}" for i in range(800_000)]
    counts: dict[str, int] = {}
    for w in words:
        key = w.rsplit("-", 1)[-1]
        counts[key] = counts.get(key, 0) + len(w)
    json.loads(json.dumps(sorted(counts.items())))


def compress_work() -> None:
    block = bytes((i * 31 + i // 7) % 251 for i in range(1 << 16)) * 720
    zlib.decompress(zlib.compress(block, 6))


def spawn_work() -> None:
    for _ in range(300):
        subprocess.run(["/bin/true"], check=True)


PARTS: dict[str, Callable[[], None]] = {"python": python_work, "compress": compress_work, "spawn": spawn_work}


def timed(work: Callable[[], None]) -> float:
    """Wall seconds for PROCESSES processes each doing `work` at once (the slowest of them)."""
    with ProcessPoolExecutor(PROCESSES) as pool:
        list(pool.map(abs, range(PROCESSES)))  # the processes exist before the clock starts
        t0 = time.perf_counter()
        for done in [pool.submit(work) for _ in range(PROCESSES)]:
            done.result()
        return time.perf_counter() - t0


def median_of(work: Callable[[], None]) -> float:
    return statistics.median(timed(work) for _ in range(REPEATS))


def measure() -> dict[str, float]:
    return {name: round(median_of(work), 3) for name, work in PARTS.items()}


def factor(seconds: dict[str, float], reference: dict[str, float]) -> float:
    ratios = [seconds[name] / reference[name] for name in PARTS]
    return math.exp(sum(math.log(r) for r in ratios) / len(ratios))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reference", action="store_true", help="print this machine's figures as the reference")
    p.add_argument("--budget", type=Path, default=ROOT / "tests" / "budget.toml")
    args = p.parse_args(argv)
    seconds = measure()
    if args.reference:
        print(" ".join(f"{name}_s = {s}" for name, s in seconds.items()))
        return 0
    machine = tomllib.loads(args.budget.read_text())["machine"]
    reference = {name: float(machine[f"{name}_s"]) for name in PARTS}
    out = {**seconds, "factor": round(factor(seconds, reference), 3), "cpus": os.cpu_count()}
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
