"""Persisting steps (row + screenshot file): steps/s and per-step latency, against a bare-row baseline.

Target (ARCHITECTURE.md): >= 200 steps/s. Runs on a scratch database: SQLite in a temporary folder by
default, or the PostgreSQL named by BENCH_DATABASE_URL (its tables are created by migrate).

    .venv/bin/python bench/bench_step_persist.py [--steps 1000] [--png-kb 120]

Each step gets a distinct screenshot of about --png-kb KiB (1280x720 screenshots compress to
50-200 KiB), so every step writes a new file. Live broadcast goes to REDIS_URL when a Redis answers
there, and is measured as part of the step.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--png-kb", type=int, default=120)
    args = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="bench-steps-")
    os.environ.update(
        DJANGO_SETTINGS_MODULE="webapp.settings",
        DEBUG="1",
        FLYWHEEL_VAR_DIR=scratch,
        DATABASE_URL=os.environ.get("BENCH_DATABASE_URL", "sqlite:///"),
    )
    import django

    django.setup()
    from django.core.management import call_command
    from django.db import connection
    from django.utils import timezone

    from webapp.catalog.services import task_create
    from webapp.episodes.models import Step
    from webapp.episodes.services import episode_create, episode_start, step_record

    call_command("migrate", verbosity=0)
    task = task_create(
        slug=f"bench/t{int(time.time())}", title="b", instruction="b", platform="desktop", env_profile="p"
    )
    payload = os.urandom(args.png_kb * 1024)

    def run(label: str, record) -> tuple[float, list[float]]:  # noqa: ANN001
        episode = episode_create(task=task, source="agent")
        episode_start(episode=episode)
        latencies = []
        started = time.perf_counter()
        for i in range(args.steps):
            t0 = time.perf_counter()
            record(episode, i)
            latencies.append((time.perf_counter() - t0) * 1000)
        elapsed = time.perf_counter() - started
        rate = args.steps / elapsed
        q = statistics.quantiles(latencies, n=100)
        print(f"{label:<34} {rate:8.0f} steps/s   p50 {q[49]:6.2f} ms   p99 {q[98]:6.2f} ms")
        return rate, latencies

    def bare_row(episode, i):  # noqa: ANN001, ANN202
        Step.objects.create(
            episode=episode, index=i, actor="agent", action={"type": "wait"}, observed_at=timezone.now()
        )

    def full_step(episode, i):  # noqa: ANN001, ANN202
        step_record(
            episode=episode,
            actor="agent",
            action={"type": "click", "x": i % 1280, "y": i % 720},
            action_text=f"click(start_box='({i % 1280},{i % 720})')",
            thought="bench",
            screenshot_png=i.to_bytes(4, "big") + payload,  # distinct bytes: a new file per step
            screen_size=(1280, 720),
        )

    print(f"database: {connection.vendor}; {args.steps} steps; screenshots {args.png_kb} KiB each")
    base_rate, _ = run("baseline: bare Step row", bare_row)
    rate, _ = run("step_record: row + file + broadcast", full_step)
    verdict = "met" if rate >= 200 else "NOT met"
    print(f"ratio step_record / bare row: {rate / base_rate:.2f}; target >= 200 steps/s: {verdict}")


if __name__ == "__main__":
    main()
