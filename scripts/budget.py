"""The end of a test run: its slowest tests, and each phase's time against tests/budget.toml.

scripts/test.sh pipes in one "<phase> <seconds>" line per phase it ran. Exits 1, naming the phase, when
a phase (or the run without set-up) took longer than its budget. The budgets were set on one machine
(tests/budget.toml [machine]); each `--speed` is what scripts/speed.py measured on this one (before and
after the run), and the budgets are scaled by the mean factor, clamped to SCALE_LIMITS: a CI machine half
as fast gets twice the seconds for the same work, a faster one fewer.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCALE_LIMITS = (0.5, 2.0)


def speed_factor(measured: list[str]) -> tuple[float, list[float]]:
    """The budgets' scale from scripts/speed.py's JSON lines (unreadable ones count as 1.0)."""
    factors = []
    for line in measured:
        try:
            factors.append(float(json.loads(line)["factor"]))
        except (ValueError, KeyError, TypeError):
            factors.append(1.0)
    if not factors:
        return 1.0, []
    mean = sum(factors) / len(factors)
    return min(max(mean, SCALE_LIMITS[0]), SCALE_LIMITS[1]), factors


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
    p.add_argument("--speed", action="append", default=[], help="a JSON line of scripts/speed.py")
    args = p.parse_args(argv)
    budget = tomllib.loads(args.budget.read_text())[args.tier]
    scale, factors = speed_factor(args.speed)
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
    if factors:
        measured = ", ".join(f"{f:.2f}" for f in factors)
        print(
            f"[test] this machine takes {measured} times the reference's time for scripts/speed.py's work "
            f"(before, after the run): budgets × {scale:.2f}"
        )
    print(f"[test] time of each phase against its budget (tests/budget.toml [{args.tier}] × {scale:.2f}):")
    for name, seconds in [*phases, ("total", total)]:
        limit = round(budget[name] * scale) if name in budget else None
        mark = "" if limit is None or seconds <= limit else "  OVER BUDGET"
        label = "total without set-up" if name == "total" else name
        print(f"  {label:22s} {seconds:6d} s   budget {limit if limit is not None else '-':>6} s{mark}")
        if mark:
            over.append(f"{label} took {seconds} s, over its budget of {limit} s")
    overall = sum(s for _, s in phases)
    print(
        f"[test] the run took {overall} s here with set-up, about {overall / scale:.0f} s of the reference "
        "machine's time"
    )
    if over:
        advice = "make the slow tests cheaper (shared fixtures, samples beside a full sweep in verify-suites)"
        print(f"[test] over budget: {'; '.join(over)}. Rather than raise the budget, {advice}.")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
