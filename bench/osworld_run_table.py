"""OSWorld's tasks that need no download, each run on a real office desktop: does it set up, does its
untouched state score 0 by OSWorld's own getters and metrics, and does the scoring end without an
environment error?

    .venv/bin/python bench/osworld_run_table.py                          # the dev split
    .venv/bin/python bench/osworld_run_table.py --tasks DIR --only chrome --limit 5

Needs scripts/office-apps.sh and scripts/osworld-env.sh. A task is run once, on a desktop reset before
it (as an episode's lease is): setup (the task's config steps), then scoring at once (its postconfig,
getters and metrics), with nobody acting. It prints one row per task that is not fine, with the reason,
and the counts: setup ok, untouched 0, scored without an environment error. A task whose untouched state
scores above 0 is a finding about the task on these desktops (doing nothing would be rewarded), never
hidden by the counts.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from agent_core.env import EnvError  # noqa: E402
from agent_core.suites import osworld_samples  # noqa: E402
from agent_core.tasks import osworld_metrics  # noqa: E402
from agent_core.tasks.osworld_files import import_osworld_files  # noqa: E402
from agent_core.tasks.runner import evaluate, prepare  # noqa: E402
from agent_core.tasks.spec import TaskSpec  # noqa: E402
from sandbox_workers.agent_env import SandboxEnv  # noqa: E402
from sandbox_workers.base import Profile  # noqa: E402
from sandbox_workers.profiles import OFFICE_PROFILE  # noqa: E402
from sandbox_workers.providers.xdesktop import XDesktopProvider  # noqa: E402

DEV_SPLIT = ROOT.parent / "shared/benchmarks/osworld/examples"


def needs_download(spec: TaskSpec) -> bool:
    """Whether the task fetches a file (its inputs, or its scoring's) from a host these machines cannot
    reach without a mirror of it."""
    return '"op": "fetch"' in json.dumps(spec.to_dict())


def office_desktop(root: Path) -> XDesktopProvider:
    options = {**OFFICE_PROFILE["options"], "start_timeout_s": 60}
    profile = Profile(
        name="office", provider="xdesktop", width=1920, height=1080, memory_mb=3072, options=options
    )
    desktop = XDesktopProvider(sandbox_id="bench-runtable", profile=profile, root=root / "desktop")
    desktop.start()
    return desktop


def run_one(spec: TaskSpec, desktop: XDesktopProvider) -> tuple[str, str, float]:
    """(outcome, detail, seconds): outcome one of setup-failed, scoring-env-error, untouched-scores,
    ok."""
    t0 = time.perf_counter()
    desktop.reset()
    env = SandboxEnv(desktop, platform="desktop")
    try:
        prepared = prepare(spec, env)
    except EnvError as exc:
        return "setup-failed", str(exc)[:300], time.perf_counter() - t0
    try:
        result = evaluate(prepared, env)
    except EnvError as exc:
        return "scoring-env-error", str(exc)[:300], time.perf_counter() - t0
    if result.reward > 0:
        return (
            "untouched-scores",
            f"reward {result.reward}: {json.dumps(result.details)[:300]}",
            time.perf_counter() - t0,
        )
    return "ok", "", time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tasks", type=Path, default=DEV_SPLIT, help="a folder of OSWorld task files")
    ap.add_argument("--only", default="", help="only the tasks whose id holds this text (a domain)")
    ap.add_argument("--limit", type=int, default=0, help="at most this many tasks (0: all)")
    args = ap.parse_args()
    problem = osworld_metrics.available()
    if problem:
        raise SystemExit(f"OSWorld's metrics: {problem}")
    paths = sorted(p for p in args.tasks.rglob("*.json") if "Windows" not in p.parts)
    imported, refused = import_osworld_files(paths)
    specs = [s for s in imported if args.only in s.id]
    runnable = [s for s in specs if not needs_download(s)]
    if args.limit:
        runnable = runnable[: args.limit]
    print(f"{args.tasks}: {len(paths)} Linux task files, {len(imported)} imported, {len(refused)} refused")
    print(f"  of the imported{f' ({args.only})' if args.only else ''}: {len(specs)}; needing no download: "
          f"{len(runnable)} (run below, one office desktop reset before each)")  # fmt: skip
    work = Path(tempfile.mkdtemp(prefix="osworld-runtable-", dir="/tmp"))  # noqa: S108
    work.chmod(0o755)
    mirror = work / "mirror"
    osworld_samples.write_mirror(mirror)
    os.environ.update(
        SANDBOX_FETCH_MIRROR=str(mirror), SANDBOX_FETCH_OFFLINE="1", FLYWHEEL_VAR_DIR=str(work / "var")
    )
    desktop = office_desktop(work)
    outcomes: collections.Counter[str] = collections.Counter()
    try:
        for spec in runnable:
            outcome, detail, took = run_one(spec, desktop)
            outcomes[outcome] += 1
            print(
                f"  {outcome:18} {took:6.1f} s  {spec.id}" + (f"\n      {detail}" if detail else ""),
                flush=True,
            )
    finally:
        desktop.stop()
    n = len(runnable)
    setup_ok = n - outcomes["setup-failed"]
    scored = setup_ok - outcomes["scoring-env-error"]
    print(f"\nrun table ({n} tasks needing no download):")
    print(f"  setup ok:                             {setup_ok:3} / {n}")
    print(f"  scored without an environment error:  {scored:3} / {setup_ok}")
    print(f"  untouched scores 0:                   {outcomes['ok']:3} / {scored}")
    print(f"  untouched scores above 0 (findings):  {outcomes['untouched-scores']:3}")


if __name__ == "__main__":
    main()
