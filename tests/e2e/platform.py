"""A small platform for browser tests: daphne (and a Celery worker) on the test database, and a real
sandbox host heartbeating into it."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any, TypeVar

from tests.procs import BIN, child_db_env, free_port, port_open, process, wait_for
from tests.sandbox_workers.hostproc import TOKEN, HostProc
from webapp.celery import app

T = TypeVar("T")


@contextmanager
def site_with_host(
    tmp_path: Path,
    *,
    host_name: str,
    profiles: dict[str, Any],
    slot_base: int,
    ready: Callable[[HostProc], T],
    queues: str = "",
    env: dict[str, str] | None = None,
    concurrency: int = 2,
) -> Iterator[tuple[str, T]]:
    """daphne with the host token, a worker on `queues` (none when empty) and a host on `profiles`.

    Yields the web URL and what `ready(host)` returned once it was truthy (e.g. an idle sandbox).
    """
    env = {**child_db_env(), "SANDBOX_HOST_TOKEN": TOKEN, **(env or {})}
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    daphne = [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "webapp.asgi:application"]
    with ExitStack() as stack:
        stack.enter_context(process(daphne, ready=port_open(port), env=env, log_path=tmp_path / "daphne.log"))
        if queues:
            name = f"e2e-{uuid.uuid4().hex[:8]}@localhost"
            worker = [
                str(BIN / "celery"),
                "-A",
                "webapp",
                "worker",
                "-Q",
                queues,
                "-n",
                name,
                "--pool",
                "threads",
            ]
            worker += [
                "--concurrency",
                str(concurrency),
                "--without-gossip",
                "--without-mingle",
                "-l",
                "INFO",
            ]
            stack.enter_context(
                process(
                    worker,
                    ready=lambda: bool(app.control.ping(destination=[name], timeout=0.5)),
                    env=env,
                    log_path=tmp_path / "worker.log",
                    timeout=90,
                )
            )
        host = HostProc(name=host_name, var=tmp_path, profiles=profiles, web_url=url, slot_base=slot_base)
        host.start()
        stack.callback(host.stop)
        found = wait_for(lambda: ready(host), timeout=120, interval=0.3)
        assert found, f"host {host_name} did not get ready"
        yield url, found
