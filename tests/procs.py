"""Start real platform processes (daphne, celery worker, …) that share the test database."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar
from urllib.parse import quote

T = TypeVar("T")

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
# Debian's Chromium, as the browser tests and the live-view bench launch it through Playwright.
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-sync",
]


def worker_slot(slot: int) -> int:
    """`slot` moved into this pytest-xdist worker's own range: a sandbox's uid is its slot's, and two
    workers' sandboxes on one uid could signal (and clean up) each other's processes."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    # FLYWHEEL_TEST_SLOT_OFFSET: a second pytest session on the same machine (scripts/dev-test.sh) keeps
    # its sandboxes' uids apart from the first one's.
    offset = int(os.environ.get("FLYWHEEL_TEST_SLOT_OFFSET", "0") or 0)
    return offset + slot + (1000 * int(worker[2:]) if worker.startswith("gw") else 0)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def child_db_env() -> dict[str, str]:
    """The environment for a child process whose DATABASE_URL is the current test database.

    Call it inside a test that uses `transactional_db` (or `live_server`), so rows the test writes
    are committed and the child sees them.
    """
    from django.db import connection

    s = connection.settings_dict
    env = os.environ.copy()
    if s["ENGINE"].endswith("sqlite3"):
        env["DATABASE_URL"] = "sqlite:///" + str(s["NAME"])
    else:
        auth = quote(s["USER"] or "")
        if s.get("PASSWORD"):
            auth += ":" + quote(s["PASSWORD"])
        env["DATABASE_URL"] = f"postgres://{auth}@{s['HOST'] or '127.0.0.1'}:{s['PORT'] or 5432}/{s['NAME']}"
    env["PYTHONUNBUFFERED"] = "1"
    env["FLYWHEEL_TEST_SERVER"] = "1"  # static files served as in production (tests/settings.py)
    return env


@contextmanager
def process(
    args: list[str],
    *,
    ready: Callable[[], bool],
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
    log_path: Path | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run `args` until the block ends; wait (with a deadline) until `ready()` is true first."""
    log = open(log_path or os.devnull, "wb")  # noqa: SIM115 (closed below)
    proc = subprocess.Popen(
        args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"{args[0]} exited with {proc.returncode} before it was ready (log: {log_path})"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{args[0]} not ready after {timeout} s (log: {log_path})")
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        log.close()


def port_open(port: int) -> Callable[[], bool]:
    def check() -> bool:
        with socket.socket() as s:
            s.settimeout(0.2)
            return s.connect_ex(("127.0.0.1", port)) == 0

    return check


# As scripts/run.sh, docker-compose.yml and the Dockerfile start daphne: its command line gives a WebSocket
# only 5 s from the request to the app's accept, and a loaded server (sync work queued on Django's one
# thread-sensitive executor, a busy CPU) passes that: the browser then sees 1006 instead of the app's
# close code or the stream (seen in CI for a refused ticket, 4403 expected).
DAPHNE_TIMEOUTS = ("--websocket_connect_timeout", "30")


@contextmanager
def daphne_server(tmp_path: Path) -> Iterator[str]:
    """The real ASGI app under daphne on a free port, on the test database; yields its base URL."""
    port = free_port()
    args = [
        str(BIN / "daphne"),
        "-b",
        "127.0.0.1",
        "-p",
        str(port),
        *DAPHNE_TIMEOUTS,
        "webapp.asgi:application",
    ]
    with process(args, ready=port_open(port), env=child_db_env(), log_path=tmp_path / "daphne.log"):
        yield f"http://127.0.0.1:{port}"


def wait_for(cond: Callable[[], T], timeout: float = 5.0, interval: float = 0.02) -> T:
    """Poll `cond` until it returns something truthy (returned) or `timeout` passes (its last value)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = cond()
        if value:
            return value
        time.sleep(interval)
    return cond()


def is_alive(pid: int) -> bool:
    """Whether `pid` is a running process (a zombie waiting to be reaped counts as gone)."""
    import psutil

    try:
        return bool(psutil.Process(pid).status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def alive(pids: Iterable[int]) -> list[int]:
    """The ones of `pids` still running."""
    return [pid for pid in pids if is_alive(pid)]


@contextmanager
def celery_worker(
    tmp_path: Path,
    *,
    queues: str,
    env: dict[str, str] | None = None,
    pool: str = "threads",
    concurrency: int = 2,
    label: str = "",
) -> Iterator[subprocess.Popen[bytes]]:
    """A real Celery worker on `queues`, on this test's database (`env` added to its environment);
    yields once it answers a ping. Its log is tmp_path/<label>-<id>.log."""
    import uuid

    from webapp.celery import app

    name = f"{label or queues.split(',')[0]}-{uuid.uuid4().hex[:8]}@localhost"
    args = [str(BIN / "celery"), "-A", "webapp", "worker", "-Q", queues, "-n", name, "--pool", pool]
    if pool != "solo":
        args += ["--concurrency", str(concurrency)]
    args += ["--without-gossip", "--without-mingle", "-l", "INFO"]
    with process(
        args,
        ready=lambda: bool(app.control.ping(destination=[name], timeout=0.5)),
        env={**child_db_env(), **(env or {})},
        log_path=tmp_path / f"{name.split('@')[0]}.log",
        timeout=90,
    ) as proc:
        yield proc


def _redis_answers(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=2).ping())
    except (redis.RedisError, OSError):
        return False


@contextmanager
def redis_for_broadcasts() -> Iterator[str]:
    """REDIS_URL if a Redis answers there, else a throwaway redis-server on a free port."""
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0")
    if _redis_answers(url):
        yield url
        return
    if not shutil.which("redis-server"):
        raise RuntimeError(f"no Redis answers at {url} and redis-server is not installed (scripts/setup.sh)")
    port, folder = free_port(), tempfile.mkdtemp(prefix="bench-redis-")
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", folder],
        stdout=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        url = f"redis://127.0.0.1:{port}/0"
        for _ in range(100):
            if _redis_answers(url):
                break
            time.sleep(0.05)
        yield url
    finally:
        server.terminate()
        server.wait()
        shutil.rmtree(folder, ignore_errors=True)
