"""Persisting steps (row + screenshot file + live broadcast) on durable databases, with page latency.

Target (ARCHITECTURE.md): >= 200 steps/s on durable database settings while pages stay responsive.

    .venv/bin/python bench/bench_step_persist.py [--steps 1000] [--episode-steps 50] [--png-kb 120]
                                                 [--writers 1,4] [--page-interval-ms 1000]

Runs on two scratch databases, one after the other, each set up as a deployment runs it:
- PostgreSQL: a cluster this script starts (initdb from /usr/lib/postgresql/*/bin) with the server's
  default durability, as docker-compose.yml deploys it: fsync, synchronous_commit and full_page_writes
  on (read back from the server and printed). BENCH_DATABASE_URL names another PostgreSQL instead.
- SQLite: a file in WAL mode with the project's settings (webapp/env.py: synchronous=NORMAL, which
  survives a killed process; a power cut may lose the last commits).

Each writer is a process (as rollout workers are) that records --steps steps through `step_record`,
in episodes of --episode-steps steps (each created, started and finished as a rollout does; those
writes count in the elapsed time, not in the per-step latencies). Every step is committed and
broadcast before the next starts. Each step gets a distinct screenshot of about --png-kb KiB
(1280x720 screenshots compress to 50-200 KiB), so every step writes a new file. Live broadcasts go
to REDIS_URL (default redis://127.0.0.1:6379/0); where no Redis answers there, the script starts a
throwaway redis-server for the run.

While they write, a reader process plays a person browsing: it opens the episode list, a finished
episode's page and the live fragment that a running episode's page polls, in turn, with a pause of
--page-interval-ms after each, through Django's full request stack (test client; DEBUG on there so
static files need no collectstatic). Its latencies are printed beside the same pages read with
nothing writing. The baseline writes bare Step rows (no file, no broadcast) the same way.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import multiprocessing as mp
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.procs import redis_for_broadcasts  # noqa: E402

PAGES = ("episode list", "episode page", "live fragment")


def _setup(env: dict[str, str]) -> None:
    os.environ.update(env)
    import django

    django.setup()


# --- the processes: writers and a reader ---------------------------------------------------------------


def _writer(
    env: dict[str, str], kind: str, task_id: int, args: argparse.Namespace, go: Any, out: Any
) -> None:
    _setup(env)
    from django.db import connection
    from django.utils import timezone

    from webapp.catalog.models import Task
    from webapp.common.live import broadcast_flush
    from webapp.episodes.models import Step
    from webapp.episodes.services import episode_create, episode_finish, episode_start, step_record

    task = Task.objects.get(pk=task_id)
    payload = os.urandom(args.png_kb * 1024)
    connection.ensure_connection()
    go.wait()
    latencies = []
    episode = None
    started = time.perf_counter()
    for i in range(args.steps):
        if i % args.episode_steps == 0:
            if episode is not None:
                episode_finish(episode=episode, reward=1.0)
            episode = episode_start(episode=episode_create(task=task, source="agent"))
        t0 = time.perf_counter()
        if kind == "bare":
            Step.objects.create(
                episode=episode,
                index=i % args.episode_steps,
                actor="agent",
                action={"type": "wait"},
                observed_at=timezone.now(),
            )
        else:
            step_record(
                episode=episode,
                actor="agent",
                action={"type": "click", "x": i % 1280, "y": i % 720},
                action_text=f"click(start_box='({i % 1280},{i % 720})')",
                thought="bench",
                # distinct bytes: a new file per step
                screenshot_png=episode.pk.to_bytes(8, "big") + i.to_bytes(4, "big") + payload,
                screen_size=(1280, 720),
            )
        latencies.append((time.perf_counter() - t0) * 1000)
    assert episode is not None
    episode_finish(episode=episode, reward=1.0)
    finished = time.perf_counter()
    broadcast_flush()
    out.put((started, finished, latencies))


def _reader(env: dict[str, str], user_id: int, finished_id: int, interval_s: float, ready: Any, stop: Any,
            out: Any) -> None:  # fmt: skip
    _setup({**env, "DEBUG": "1", "ALLOWED_HOSTS": "testserver"})
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.urls import reverse

    from webapp.episodes.models import Episode

    client = Client()
    client.force_login(get_user_model().objects.get(pk=user_id))
    finished_url = reverse("episodes:episode_detail", args=[finished_id])

    def live_url() -> str:
        """The newest running episode's page (a finished one's when none runs): its #live poll."""
        running = Episode.objects.filter(status=Episode.Status.RUNNING).order_by("-pk").first()
        return reverse("episodes:episode_detail", args=[running.pk if running else finished_id])

    def request(name: str) -> tuple[str, dict[str, str]]:
        if name == "episode list":
            return reverse("episodes:episode_list"), {}
        if name == "episode page":
            return finished_url, {}
        return live_url(), {"HTTP_HX_REQUEST": "true"}

    for name in PAGES:  # warm: templates compiled, connection open
        url, headers = request(name)
        assert client.get(url, **headers).status_code in (200, 286), url
    ready.set()
    latencies: dict[str, list[float]] = {name: [] for name in PAGES}
    while not stop.is_set():
        for name in PAGES:
            url, headers = request(name)
            t0 = time.perf_counter()
            response = client.get(url, **headers)
            latencies[name].append((time.perf_counter() - t0) * 1000)
            assert response.status_code in (200, 286), (url, response.status_code)
            stop.wait(interval_s)
    out.put(latencies)


# --- one database --------------------------------------------------------------------------------------


def _q(values: list[float], pct: int) -> float:
    return statistics.quantiles(values, n=100)[pct - 1] if len(values) > 1 else values[0]


def _pages_line(label: str, latencies: dict[str, list[float]]) -> str:
    parts = [f"{name} p50 {_q(v, 50):5.1f} p99 {_q(v, 99):6.1f} ms" for name, v in latencies.items() if v]
    n = sum(len(v) for v in latencies.values())
    return f"    pages {label:<26} ({n:3} pages)  " + " | ".join(parts)


def _print_settings(connection: Any) -> None:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT version()")
            version = cursor.fetchone()[0].split(" on ")[0]
            shown = []
            for name in ("fsync", "synchronous_commit", "full_page_writes", "wal_sync_method"):
                cursor.execute(f"SHOW {name}")
                shown.append(f"{name}={cursor.fetchone()[0]}")
            print(f"database: {version}; {', '.join(shown)}")
        else:
            cursor.execute("PRAGMA journal_mode")
            mode = cursor.fetchone()[0]
            cursor.execute("PRAGMA synchronous")
            sync = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[cursor.fetchone()[0]]
            cursor.execute("SELECT sqlite_version()")
            print(f"database: SQLite {cursor.fetchone()[0]}; journal_mode={mode}, synchronous={sync}")


def bench_database(url: str, args: argparse.Namespace) -> None:
    """Migrate a scratch database at `url`, then print steps/s and page latencies on it."""
    scratch = tempfile.mkdtemp(prefix="bench-steps-")
    env = {
        "DJANGO_SETTINGS_MODULE": "webapp.settings",
        "DEBUG": "0",
        "SECRET_KEY": os.environ.get("SECRET_KEY", "bench-only-secret-key-0123456789abcdefghijklmnop"),
        "FLYWHEEL_VAR_DIR": scratch,
        "DATABASE_URL": url,
    }
    _setup(env)
    from django.contrib.auth import get_user_model
    from django.core.management import call_command
    from django.db import connection

    from webapp.catalog.services import task_create
    from webapp.episodes.models import Episode

    call_command("migrate", verbosity=0)
    _print_settings(connection)
    task = task_create(
        slug=f"bench/t{time.time_ns()}", title="b", instruction="b", platform="desktop", env_profile="desktop"
    )
    user = get_user_model().objects.create_superuser("bench", "bench@example.com", "bench-password-123")
    ctx = mp.get_context("spawn")

    def read_pages(finished_id: int) -> tuple[Any, Any]:
        ready, stop, out = ctx.Event(), ctx.Event(), ctx.Queue()
        reader = ctx.Process(
            target=_reader, args=(env, user.pk, finished_id, args.page_interval_ms / 1000, ready, stop, out)
        )
        reader.start()
        ready.wait(120)

        def done() -> dict[str, list[float]]:
            stop.set()
            pages = out.get(timeout=120)
            reader.join()
            return pages

        return done, reader

    def write(kind: str, writers: int, finished_id: int | None) -> tuple[float, dict[str, list[float]]]:
        go, out = ctx.Event(), ctx.Queue()
        procs = [
            ctx.Process(target=_writer, args=(env, kind, task.pk, args, go, out)) for _ in range(writers)
        ]
        done = read_pages(finished_id)[0] if finished_id is not None else None
        for p in procs:
            p.start()
        time.sleep(2.0)  # every writer has set Django up and connected
        go.set()
        results = [out.get(timeout=900) for _ in procs]
        for p in procs:
            p.join()
        pages = done() if done is not None else {}
        elapsed = max(r[1] for r in results) - min(r[0] for r in results)
        latencies = [x for r in results for x in r[2]]
        rate = len(latencies) / elapsed
        label = "bare Step row (ORM create)" if kind == "bare" else "step_record: row + file + broadcast"
        print(
            f"  {label:<36} {writers} writer{'s' if writers > 1 else ' '} {rate:7.0f} steps/s"
            f"   per step p50 {_q(latencies, 50):6.2f} ms  p99 {_q(latencies, 99):6.2f} ms"
        )
        return rate, pages

    base_rate, _ = write("bare", 1, None)
    finished = Episode.objects.filter(status=Episode.Status.FINISHED).order_by("pk").first()
    assert finished is not None
    done, _ = read_pages(finished.pk)
    time.sleep(args.idle_s)
    print(_pages_line("with nothing writing", done()))
    rates = {}
    for writers in args.writers:
        rates[writers], pages = write("step", writers, finished.pk)
        print(
            _pages_line(
                f"while {writers} writer{'s' if writers > 1 else ''} persist{'s' * (writers == 1)}", pages
            )
        )
    # One writer waits for one WAL flush (PostgreSQL) per step, as the bare row does: its rate is bounded
    # by the disk's flush latency; concurrent writers share flushes (group commit).
    verdicts = ", ".join(
        f"{w} writer{'s' * (w > 1)} {'met' if r >= 200 else 'NOT met'}" for w, r in rates.items()
    )
    print(
        f"  step_record / bare row, 1 writer each: {rates.get(1, 0) / base_rate:.2f}; "
        f"target >= 200 steps/s: {verdicts}"
    )
    shutil.rmtree(scratch, ignore_errors=True)


# --- a durable PostgreSQL of our own -------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def durable_postgres() -> Iterator[str | None]:
    """A throwaway PostgreSQL cluster at the server's default durability; None where none is installed."""
    bins = sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name))
    if not bins:
        yield None
        return
    bin_dir, port = Path(bins[-1]), _free_port()
    folder = Path(tempfile.mkdtemp(prefix="bench-pg-"))
    run_as: list[str] = []
    if os.getuid() == 0:  # PostgreSQL refuses to run as root
        shutil.chown(folder, "postgres")
        run_as = ["runuser", "-u", "postgres", "--"]
    data = folder / "data"
    # --no-sync speeds up initdb only; the server below runs with its defaults (fsync etc. on).
    subprocess.run(
        [*run_as, bin_dir / "initdb", "-D", data, "-U", "flywheel", "-A", "trust", "-E", "UTF8", "--no-sync"],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    options = f"-p {port} -k {folder} -c listen_addresses=127.0.0.1"
    subprocess.run(
        [*run_as, bin_dir / "pg_ctl", "-D", data, "-l", folder / "log", "-w", "-s", "start", "-o", options],
        check=True,
    )
    try:
        subprocess.run([bin_dir / "createdb", "-h", "127.0.0.1", "-p", str(port), "-U", "flywheel", "bench"],
                       check=True)  # fmt: skip
        yield f"postgres://flywheel@127.0.0.1:{port}/bench"
    finally:
        subprocess.run([*run_as, bin_dir / "pg_ctl", "-D", data, "-m", "fast", "-s", "stop"], check=False)
        shutil.rmtree(folder, ignore_errors=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000, help="steps per writer")
    parser.add_argument("--episode-steps", type=int, default=50, help="steps per episode")
    parser.add_argument("--png-kb", type=int, default=120)
    parser.add_argument("--writers", default="1,4", help="comma-separated writer counts, run in turn")
    parser.add_argument("--page-interval-ms", type=int, default=1000, help="the reader's pause after a page")
    parser.add_argument("--idle-s", type=float, default=6.0, help="how long pages are read with no writer")
    parser.add_argument("--database", choices=("both", "postgres", "sqlite"), default="both")
    parser.add_argument("--database-url", help=argparse.SUPPRESS)  # one database, in a child process
    args = parser.parse_args()
    args.writers = [int(w) for w in args.writers.split(",")]
    if args.database_url:
        bench_database(args.database_url, args)
        return
    print(
        f"{args.steps} steps per writer in episodes of {args.episode_steps}; screenshots {args.png_kb} KiB; "
        f"{os.cpu_count()} CPUs (load average {os.getloadavg()[0]:.1f} at the start); "
        f"the reader pauses {args.page_interval_ms} ms after each page"
    )
    child = [sys.executable, __file__, *sys.argv[1:], "--database-url"]
    with redis_for_broadcasts() as redis_url:
        os.environ["REDIS_URL"] = redis_url
        print(f"live broadcasts to {redis_url}")
        _run_databases(args, child)


def _run_databases(args: argparse.Namespace, child: list[str]) -> None:
    if args.database in ("both", "postgres"):
        if os.environ.get("BENCH_DATABASE_URL"):
            subprocess.run([*child, os.environ["BENCH_DATABASE_URL"]], check=True)
        else:
            with durable_postgres() as url:
                if url is None:
                    print("postgres: skipped (no /usr/lib/postgresql/*/bin/initdb)")
                else:
                    subprocess.run([*child, url], check=True)
    if args.database in ("both", "sqlite"):
        folder = tempfile.mkdtemp(prefix="bench-sqlite-")
        try:
            subprocess.run([*child, f"sqlite:///{folder}/db.sqlite3"], check=True)
        finally:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
