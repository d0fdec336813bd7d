"""OSWorld on our desktops: how much of a task folder imports, and what a task costs on a real office
desktop (LibreOffice Calc open) instead of OSWorld's VM.

    .venv/bin/python bench/osworld_bench.py                       # the dev split, 5 rounds, 4 desktops
    .venv/bin/python bench/osworld_bench.py --tasks DIR --rounds 10 --desktops 6
    .venv/bin/python bench/osworld_bench.py --import-only                         # the import table only

Needs scripts/office-apps.sh (the applications) and scripts/osworld-env.sh (OSWorld's metrics). Every
figure is measured in this run on this machine:
- import: per domain, tasks (files), imported, and those needing VS Code or Google Drive (which cannot be
  had here); per reason, the refusals (a file is counted by its path: OSWorld reuses ids across domains);
- per task round on one desktop: reset (what replaces OSWorld's snapshot revert: processes killed,
  workspace and profiles wiped, session restarted), setup (the host's download from its offline mirror
  and LibreOffice Calc opening the file), scoring (postconfig's ctrl+s and OSWorld's compare_table);
- step latency with Calc open (a cell move and the screenshot after it), p50/p95;
- memory: PSS of everything a desktop runs (Xvfb, x11vnc, session, LibreOffice), one desktop and each of
  N at once with Calc open, and the machine's CPU while they idle.
OSWorld's own snapshot revert is not measured here: its VM image cannot be fetched on this machine.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent_core.actions import model as A  # noqa: E402
from agent_core.suites import osworld_samples  # noqa: E402
from agent_core.tasks import osworld_metrics  # noqa: E402
from agent_core.tasks.osworld import import_osworld_task  # noqa: E402
from agent_core.tasks.osworld_files import import_osworld_files  # noqa: E402
from agent_core.tasks.runner import evaluate, prepare  # noqa: E402
from sandbox_workers.agent_env import SandboxEnv  # noqa: E402
from sandbox_workers.base import Profile  # noqa: E402
from sandbox_workers.profiles import OFFICE_PROFILE  # noqa: E402
from sandbox_workers.providers.xdesktop import XDesktopProvider  # noqa: E402
from sandbox_workers.stats import percentile  # noqa: E402

DEV_SPLIT = ROOT.parent / "shared/benchmarks/osworld/examples"
UNAVAILABLE = ("VS Code", "Google Drive")


def import_table(folder: Path) -> None:
    paths = sorted(folder.rglob("*.json"))
    imported, refused = import_osworld_files(paths)
    # A file is imported unless refused: counted by its path, never by its bare id (OSWorld gives one id
    # to different tasks of different domains, so one imported chrome/<id> counted thunderbird/<id> too).
    why = dict(refused)
    assert len(imported) + len(why) == len(paths), "every file is imported or refused"
    domains: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
    reasons: collections.Counter[str] = collections.Counter()
    windows = 0
    for p in paths:
        if "Windows" in p.parts:
            windows += str(p) in why
            continue
        row = domains[p.parent.name]
        row[0] += 1
        if str(p) not in why:
            row[1] += 1
            continue
        reason = re.sub(r"^OSWorld task [^:]+: ", "", why[str(p)])
        row[2] += any(u in reason for u in UNAVAILABLE)
        reason = re.sub(r"\[\d+\]", "[i]", reason)
        reasons[re.sub(r"evaluator\.func(\[i\])? '[^']+' ", "evaluator ", reason)[:120]] += 1
    print(f"\nimport of {folder} ({len(paths)} files)")
    print(f"  {'domain':22} {'tasks':>5} {'imported':>8} {'VS Code/Drive':>13} {'rate of the rest':>17}")
    total = [0, 0, 0]
    for name, (n, i, u) in sorted(domains.items()):
        rate = f"{i / (n - u):.0%}" if n > u else "-"
        print(f"  {name:22} {n:5} {i:8} {u:13} {rate:>17}")
        total = [total[0] + n, total[1] + i, total[2] + u]
    n, i, u = total
    print(f"  {'all Linux tasks':22} {n:5} {i:8} {u:13} {i / max(1, n - u):17.1%}")
    print(f"  Windows tasks refused as Windows tasks: {windows}")
    print("  refusals by reason:")
    for reason, count in reasons.most_common():
        print(f"    {count:3}  {reason}")


def pss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            total += psutil.Process(pid).memory_full_info().pss
        except psutil.Error:
            continue
    return total / 2**20


def office_desktop(root: Path, name: str) -> XDesktopProvider:
    options = {**OFFICE_PROFILE["options"], "start_timeout_s": 60}
    profile = Profile(
        name="office", provider="xdesktop", width=1920, height=1080, memory_mb=3072, options=options
    )
    p = XDesktopProvider(sandbox_id=f"bench-{name}", profile=profile, root=root / name)
    p.start()
    return p


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=Path, default=DEV_SPLIT, help="a folder of OSWorld task files")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=40)
    ap.add_argument("--desktops", type=int, default=4)
    ap.add_argument("--import-only", action="store_true", help="print the import table only (no desktops)")
    args = ap.parse_args()
    if args.tasks.is_dir():
        import_table(args.tasks)
    if args.import_only:
        return
    problem = osworld_metrics.available()
    if problem:
        raise SystemExit(f"OSWorld's metrics: {problem}")
    work = Path(tempfile.mkdtemp(prefix="osworld-bench-", dir="/tmp"))  # noqa: S108
    work.chmod(0o755)
    mirror = work / "mirror"
    osworld_samples.write_mirror(mirror)
    os.environ.update(
        SANDBOX_FETCH_MIRROR=str(mirror), SANDBOX_FETCH_OFFLINE="1", FLYWHEEL_VAR_DIR=str(work / "var")
    )
    spec = import_osworld_task(osworld_samples.TASKS["libreoffice_calc"])

    print(f"\none office desktop (1920x1080), LibreOffice Calc on the task's file, {args.rounds} rounds")
    desktop = office_desktop(work, "one")
    env = SandboxEnv(desktop, platform="desktop")
    resets, setups, scorings, steps, memory = [], [], [], [], []
    try:
        for r in range(args.rounds):
            t0 = time.perf_counter()
            desktop.reset()
            resets.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            prepared = prepare(spec, env)
            setups.append(time.perf_counter() - t0)
            time.sleep(2)  # Calc settles
            memory.append(pss_mb(desktop.pids()))
            for i in range(args.steps // args.rounds):
                t0 = time.perf_counter()
                env.act(A.Press(key="down" if i % 2 == 0 else "up"))
                steps.append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            result = evaluate(prepared, env)
            scorings.append(time.perf_counter() - t0)
            assert result.reward == 0.0, result.details  # untouched
            print(
                f"  round {r}: reset {resets[-1]:.2f} s, setup {setups[-1]:.2f} s, "
                f"scoring {scorings[-1]:.2f} s, PSS {memory[-1]:.0f} MB"
            )
    finally:
        desktop.stop()
    print(f"  reset    median {statistics.median(resets):.2f} s   max {max(resets):.2f} s")
    print(
        f"  setup    median {statistics.median(setups):.2f} s   max {max(setups):.2f} s  (fetch + Calc open)"
    )
    print(f"  scoring  median {statistics.median(scorings):.2f} s   (postconfig ctrl+s + compare_table)")
    print(
        f"  step with Calc open (key + screenshot): p50 {percentile(steps, 50):.1f} ms, "
        f"p95 {percentile(steps, 95):.1f} ms (n={len(steps)})"
    )
    print(f"  memory of the desktop with Calc open: {statistics.median(memory):.0f} MB PSS")

    print(f"\n{args.desktops} office desktops at once, each with Calc open on the task's file")
    desktops = []
    try:
        for k in range(args.desktops):
            d = office_desktop(work, f"many{k}")
            desktops.append(d)
            prepare(spec, SandboxEnv(d, platform="desktop"))
        time.sleep(3)
        pids = [pid for d in desktops for pid in d.pids()]
        per = [pss_mb(d.pids()) for d in desktops]
        cpu = psutil.cpu_percent(interval=10)
        total = sum(per)
        ram = psutil.virtual_memory().total / 2**20
        listed = ", ".join(f"{m:.0f}" for m in per)
        print(f"  PSS per desktop: {listed} MB (all: {total:.0f} MB, {len(pids)} processes)")
        print(f"  machine CPU while they idle: {cpu:.0f} % of {psutil.cpu_count()} cores")
        print(
            f"  by memory, {ram:.0f} MB hold about {int(0.8 * ram / (total / len(per)))} such desktops "
            "(80 % of RAM); CPU, not memory, bounds how many act at once"
        )
    finally:
        for d in desktops:
            d.stop()
    print("\nOSWorld's snapshot revert (a 4 GB VM per environment) is not measured here: no VM image here.")


if __name__ == "__main__":
    main()
