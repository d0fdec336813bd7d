"""Exports of a large dataset version: peak memory (RSS) against a version a tenth its size, and speed.

An export must stream: its peak memory may not grow with the version. This builds a scratch
database with --steps steps (--episode-steps per episode, each with its own screenshot of about
--png-kb KiB), closes a flywheel round after the first tenth and again after the rest, then exports
both SFT versions in fresh processes (`manage.py dataset_export`, the code path the Celery job
runs) and prints each one's peak RSS, time and size. Finally it loads the large export back with
the `datasets` library and opens every image.

    .venv/bin/python bench/export_bench.py [--steps 10000] [--episode-steps 20] [--png-kb 30]
        [--fmt parquet] [--json]

SQLite in a temporary folder by default; BENCH_DATABASE_URL names a PostgreSQL to use instead.
With --json the last line is a JSON object of the figures (tests read it).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _noise_png(seed: int, kb: int) -> bytes:
    """A PNG of random pixels (incompressible), about `kb` KiB."""
    import io
    import random

    from PIL import Image

    side = max(8, int((kb * 1024 / 3) ** 0.5))
    rng = random.Random(seed)
    image = Image.frombytes("RGB", (side, side), rng.randbytes(side * side * 3))
    out = io.BytesIO()
    image.save(out, format="PNG", compress_level=1)
    return out.getvalue()


def _build(*, task: Any, episodes: int, steps_each: int, png_kb: int, first_seed: int) -> int:
    """`episodes` finished agent episodes of `steps_each` steps with distinct screenshots; image bytes."""
    from django.utils import timezone

    from webapp.common.storage import blob_store
    from webapp.episodes.models import Episode, Step

    total = 0
    now = timezone.now()
    for e in range(episodes):
        episode = Episode.objects.create(
            task=task,
            source="agent",
            status=Episode.Status.FINISHED,
            reward=1.0,
            num_steps=steps_each,
            started_at=now,
            finished_at=timezone.now(),
        )
        rows = []
        for i in range(steps_each):
            png = _noise_png(first_seed + e * steps_each + i, png_kb)
            total += len(png)
            x, y = 10 + 37 * i % 600, 20 + 11 * i % 300
            last = i == steps_each - 1
            rows.append(
                Step(
                    episode=episode,
                    index=i,
                    actor="agent",
                    screenshot=blob_store(png, kind="screens", ext="png"),
                    screen_width=1280,
                    screen_height=720,
                    thought=f"Step {i} of episode {episode.pk}: the next control is at ({x}, {y}).",
                    action={"type": "finished", "content": ""} if last else {"type": "click", "x": x, "y": y},
                    action_text="finished()" if last else f"click(start_box='({x},{y})')",
                    observed_at=now,
                )
            )
        Step.objects.bulk_create(rows)
    return total


def _export(pin: str, fmt: str, env: dict[str, str]) -> dict[str, Any]:
    """Export `pin` in a fresh process; its JSON result (peak RSS included)."""
    out = subprocess.run(
        [
            sys.executable,
            str(ROOT / "manage.py"),
            "dataset_export",
            pin,
            "--kind",
            "sft",
            "--fmt",
            fmt,
            "--json",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise SystemExit(f"export of {pin} failed:\n{out.stdout}\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=10_000)
    parser.add_argument("--episode-steps", type=int, default=20)
    parser.add_argument("--png-kb", type=int, default=30)
    parser.add_argument("--fmt", default="parquet", choices=["jsonl", "parquet"])
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    scratch = tempfile.mkdtemp(prefix="bench-export-")
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "DEBUG": "0",
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only-secret-key-abcdefghijklmnopqrstuvwxyz0123"),
        "FLYWHEEL_VAR_DIR": scratch,
        "DATABASE_URL": os.environ.get("BENCH_DATABASE_URL", f"sqlite:///{scratch}/db.sqlite3"),
    }
    env.pop("MEDIA_ROOT", None)
    env.pop("EXPORTS_DIR", None)
    os.environ.update(env)
    import django

    django.setup()
    from django.core.management import call_command

    from webapp.catalog.services import task_create
    from webapp.datasets.rounds import flywheel_round_close

    call_command("migrate", verbosity=0)
    task = task_create(
        slug=f"bench/export-{int(time.time())}",
        title="export bench",
        instruction="Fill in the form and submit it.",
        platform="desktop",
        env_profile="desktop",
        max_steps=max(15, args.episode_steps),
    )
    episodes = max(1, args.steps // args.episode_steps)
    small_eps = max(1, episodes // 10)
    from webapp.datasets.models import DatasetVersion

    t0 = time.perf_counter()
    small_bytes = _build(
        task=task, episodes=small_eps, steps_each=args.episode_steps, png_kb=args.png_kb, first_seed=0
    )
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    flywheel_round_close()  # round 1: the first tenth
    round_small_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    big_bytes = small_bytes + _build(
        task=task,
        episodes=episodes - small_eps,
        steps_each=args.episode_steps,
        png_kb=args.png_kb,
        first_seed=small_eps * args.episode_steps,
    )
    build_s += time.perf_counter() - t0
    t0 = time.perf_counter()
    flywheel_round_close()  # round 2: everything
    round_big_s = time.perf_counter() - t0
    v1 = DatasetVersion.objects.get(dataset__name="flywheel-sft", number=1)
    v2 = DatasetVersion.objects.get(dataset__name="flywheel-sft", number=2)
    small = _export(f"flywheel-sft@v{v1.number}", args.fmt, env)
    big = _export(f"flywheel-sft@v{v2.number}", args.fmt, env)

    # Load the large export back the way its users will, and open every image.
    import datasets
    from PIL import Image

    from webapp.datasets.models import DatasetExport

    export = DatasetExport.objects.get(pk=big["export"])
    root = Path(env["FLYWHEEL_VAR_DIR"]) / "exports" / export.path
    manifest = json.loads((root / "manifest.json").read_text())
    t0 = time.perf_counter()
    loaded = datasets.load_dataset(
        "parquet" if args.fmt == "parquet" else "json",
        data_files=[str(root / s["path"]) for s in manifest["shards"]],
        split="train",
        cache_dir=str(Path(scratch) / "hf-cache"),
    )
    paths = {p for row in loaded for p in row["images"]}
    unreadable = 0
    for rel in paths:
        try:
            with Image.open(root / rel) as image:
                image.load()
        except OSError:
            unreadable += 1
    load_s = time.perf_counter() - t0

    figures = {
        "steps": v2.num_steps,
        "episodes": v2.num_episodes,
        "small_steps": v1.num_steps,
        "image_mb": round(big_bytes / 1e6, 1),
        "small_image_mb": round(small_bytes / 1e6, 1),
        "records": big["records"],
        "loaded_records": len(loaded),
        "images_in_records": len(paths),
        "images_unreadable": unreadable,
        "export_s": big["seconds"],
        "export_steps_per_s": round(big["steps"] / big["seconds"], 1) if big["seconds"] else None,
        "export_mb": round(big["bytes"] / 1e6, 1),
        "small_export_s": small["seconds"],
        "peak_rss_mb": big["peak_rss_mb"],
        "small_peak_rss_mb": small["peak_rss_mb"],
        "rss_growth_mb": round(big["peak_rss_mb"] - small["peak_rss_mb"], 1),
        "data_growth_mb": round((big_bytes - small_bytes) / 1e6, 1),
        "round_close_s": round(round_big_s, 2),
        "round_close_small_s": round(round_small_s, 2),
        "build_s": round(build_s, 1),
        "load_back_s": round(load_s, 2),
        "fmt": args.fmt,
    }
    print(
        f"export of {figures['steps']} steps ({figures['image_mb']} MB of screenshots, {args.fmt}): "
        f"{figures['records']} records in {figures['export_s']} s ({figures['export_steps_per_s']} steps/s), "
        f"{figures['export_mb']} MB written"
    )
    print(
        f"peak RSS {figures['peak_rss_mb']} MB vs {figures['small_peak_rss_mb']} MB for a tenth of the data "
        f"({figures['small_steps']} steps): +{figures['rss_growth_mb']} MB while the data grew "
        f"+{figures['data_growth_mb']} MB"
    )
    print(
        f"loaded back with datasets: {figures['loaded_records']} records, "
        f"{figures['images_in_records']} images, "
        f"{unreadable} unreadable, in {figures['load_back_s']} s; closing the round over all of it took "
        f"{figures['round_close_s']} s"
    )
    if args.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
