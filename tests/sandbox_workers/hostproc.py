"""Run a real sandbox host service in a child process for tests."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from tests.procs import ROOT, free_port, is_alive, worker_slot

__all__ = ["LIGHT_DESKTOP", "TOKEN", "HostProc", "host_process", "is_alive"]

TOKEN = "test-host-token-0123456789abcdef"
LIGHT_DESKTOP = {"provider": "xdesktop", "min_idle": 1, "max_total": 2, "options": {"apps": ["xterm"]}}


class HostProc:
    def __init__(self, *, name: str, var: Path, profiles: dict[str, Any], web_url: str | None = None,
                 slot_base: int = 0, port: int | None = None,
                 extra_args: tuple[str, ...] = ()) -> None:  # fmt: skip
        self.name, self.var, self.profiles, self.web_url = name, var, profiles, web_url
        self.extra_args = extra_args
        self.slot_base = slot_base
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = var / f"{name}.log"

    def start(self, *, warm: bool = True, timeout: float = 90) -> None:
        args = [
            sys.executable, "-m", "sandbox_workers.host", "--port", str(self.port), "--name", self.name,
            "--var-dir", str(self.var / self.name), "--profiles", json.dumps(self.profiles),
            "--slot-base", str(worker_slot(self.slot_base)), "--heartbeat", "0.5",
        ]  # fmt: skip
        if self.web_url:
            args += ["--web-url", self.web_url]
        args += self.extra_args
        env = {**os.environ, "SANDBOX_HOST_TOKEN": TOKEN, "PYTHONUNBUFFERED": "1"}
        self.var.mkdir(parents=True, exist_ok=True)
        log = open(self.log_path, "ab")  # noqa: SIM115 (the child owns it)
        self.proc = subprocess.Popen(args, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
                                     start_new_session=True)  # fmt: skip
        try:
            self._wait_ready(warm=warm, timeout=timeout)
        except BaseException:
            self.stop()  # never leave a host (and its sandboxes) behind a failed start
            raise

    def _wait_ready(self, *, warm: bool, timeout: float) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"host {self.name} exited: {self.log_path.read_text()[-3000:]}")
            try:
                if httpx.get(self.url + "/health", timeout=1).status_code == 200 and (
                    not warm or self.warm()
                ):
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"host {self.name} not ready: {self.log_path.read_text()[-3000:]}")
            time.sleep(0.1)

    def status(self) -> dict[str, Any]:
        data: dict[str, Any] = httpx.get(
            self.url + "/v1/status", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10
        ).json()
        return data

    def warm(self) -> bool:
        pools = self.status()["profiles"]
        return all(p["states"]["idle"] >= self.profiles[name]["min_idle"] for name, p in pools.items())

    def saved_state(self) -> dict[str, Any]:
        data: dict[str, Any] = json.loads((self.var / self.name / "pool-state.json").read_text())
        return data

    def kill9(self) -> None:
        assert self.proc is not None
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


@contextmanager
def host_process(**kwargs: Any) -> Iterator[HostProc]:
    host = HostProc(**kwargs)
    host.start()
    try:
        yield host
    finally:
        host.stop()


def keep_changing(sandbox: Any, seconds: float, interval_s: float = 0.03) -> None:
    """Change the desktop's root colour every `interval_s` for `seconds`, from a loop inside the
    sandbox (a still screen sends no screencast frames). Returns at once."""
    steps = max(1, int(seconds / interval_s))
    loop = (
        f'for i in $(seq {steps}); do xsetroot -solid "#$(printf %02x $((i * 7 % 256)))4080"; '
        f"sleep {interval_s}; done"
    )
    sandbox.exec(["sh", "-c", f"({loop}) >/dev/null 2>&1 &"])
