"""A real vLLM server for tests: the engine's own environment (scripts/vllm-env.sh) serving a tiny model."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from agent_core.serving.engine import Engine, EngineSpec
from tests.procs import ROOT, free_port, port_open, process


def vllm_python() -> str:
    """The python of vLLM's environment; a test that needs it fails (never skips) when it is missing."""
    path = os.environ.get("VLLM_PYTHON") or str(ROOT / ".venv-vllm" / "bin" / "python")
    if not Path(path).exists():
        pytest.fail(f"no vLLM environment at {path}: run scripts/vllm-env.sh (make test does)")
    return path


@contextmanager
def vllm_engine(model: Path, served_name: str, log_dir: Path, **spec: object) -> Iterator[Engine]:
    """A started, healthy vLLM server on a free port; stopped at the end of the block."""
    es = EngineSpec(model=model, served_name=served_name, port=free_port(), python=vllm_python(), **spec)  # type: ignore[arg-type]
    engine = Engine(es, log_path=log_dir / f"vllm-{served_name}-{es.port}.log")
    engine.start()
    try:
        engine.wait_ready(timeout_s=300)
        yield engine
    finally:
        engine.close()


@contextmanager
def policy_server(
    *,
    model: Path,
    served_name: str,
    name: str,
    web_url: str,
    token: str,
    log_dir: Path,
    interval: float = 1.0,
    cpu_cores: str = "",
    wait: bool = True,
) -> Iterator[subprocess.Popen[bytes]]:
    """A whole policy server, as docker-compose and make run start one: the serving agent, run by vLLM's
    own python, starting its engine and heartbeating into `web_url`; yields once the engine listens (with
    wait=False at once: several engines start side by side, the caller waits for them)."""
    python = vllm_python()
    port = free_port()
    args = [python, "-m", "agent_core.serving", "--model", str(model), "--served-name", served_name]
    args += ["--name", name, "--port", str(port), "--web-url", web_url, "--vllm-python", python]
    args += [
        "--interval",
        str(interval),
        "--max-loras",
        "2",
        "--log-file",
        str(log_dir / f"{name}-engine.log"),
    ]
    if cpu_cores:
        args += ["--cpu-cores", cpu_cores]
    env = {**os.environ, "POLICY_SERVER_TOKEN": token}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    ready = port_open(port) if wait else lambda: True
    with process(args, ready=ready, env=env, log_path=log_dir / f"{name}.log", timeout=300) as proc:
        yield proc
