"""The end of a test run: its slowest tests, and each phase's time against tests/budget.toml.

scripts/test.sh pipes in one "<phase> <seconds>" line per phase it ran. Exits 1, naming the phase, when
a phase (or the run without set-up) took longer than its budget.
"""

from __future__ import annotations

import argparse
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def slowest(log: Path, n: int = 25) -> list[str]:
    """The 'slowest N durations' lines pytest printed in `log` (the first n of them)."""
    if not log.is_file():
        return []
    lines = log.read_text(errors="replace").splitlines()
    for i, line in enumerate(lines):
        if re.search(r"slowest \d+ durations", line):
            found = [x for x in lines[i + 1 :] if re.match(r"\s*\d+\.\d+s (call|setup|teardown) ", x)]
            return found[:n]
    return []


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--tier", required=True, help="the [section] of the budget file: test, fast or verify")
    p.add_argument("--log", type=Path, help="the main phase's pytest log (for its slowest tests)")
    p.add_argument("--budget", type=Path, default=ROOT / "tests" / "budget.toml")
    args = p.parse_args(argv)
    budget = tomllib.loads(args.budget.read_text())[args.tier]
    phases: list[tuple[str, int]] = []
    for line in sys.stdin:
        if line.strip():
            name, seconds = line.split()
            phases.append((name, int(seconds)))

    if args.log and (lines := slowest(args.log)):
        print(f"[test] the {len(lines)} slowest tests ({args.log.name}):")
        for line in lines:
            print(f"  {line.strip()}")
    over = []
    total = sum(s for name, s in phases if name != "setup")
    print(f"[test] time of each phase against its budget (tests/budget.toml [{args.tier}]):")
    for name, seconds in [*phases, ("total", total)]:
        limit = budget.get(name)
        mark = "" if limit is None or seconds <= limit else "  OVER BUDGET"
        label = "total without set-up" if name == "total" else name
        print(f"  {label:22s} {seconds:6d} s   budget {limit if limit is not None else '-':>6} s{mark}")
        if mark:
            over.append(f"{label} took {seconds} s, over its budget of {limit} s")
    if over:
        advice = "make the slow tests cheaper (shared fixtures, samples beside a full sweep in verify-suites)"
        print(f"[test] over budget: {'; '.join(over)}. Rather than raise the budget, {advice}.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
