"""docker-compose.yml describes the production shape and validates with Debian's docker-compose."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SECRETS = {
    "SECRET_KEY": "k" * 50,
    "POSTGRES_PASSWORD": "pw",
    "SANDBOX_HOST_TOKEN": "tok",
    "POLICY_SERVER_TOKEN": "ptok",
}


def _compose(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("docker-compose")
    assert exe, "docker-compose is missing: `make test` installs Debian's docker-compose package"
    base = {k: v for k, v in os.environ.items() if k not in SECRETS}
    return subprocess.run(
        [exe, "-f", str(ROOT / "docker-compose.yml"), *args],
        env={**base, **env},
        capture_output=True,
        text=True,
        cwd="/tmp",  # no stray .env from the checkout
    )


def test_compose_file_validates_and_has_every_service():
    assert _compose("config", "-q", env=SECRETS).returncode == 0
    services = set(_compose("config", "--services", env=SECRETS).stdout.split())
    expected = {"postgres", "redis", "migrate", "web", "worker-rollouts", "worker-checks", "worker-datasets"}
    expected |= {"worker-interactive", "worker-training", "beat"}
    assert expected | {"sandbox-host", "vllm"} <= services


def test_compose_reserves_a_gpu_for_vllm_and_wires_services_to_postgres_and_redis():
    config = _compose("config", env=SECRETS).stdout
    vllm = config[config.index("  vllm:") :]
    assert "driver: nvidia" in vllm and "gpu" in vllm
    assert "DATABASE_URL: postgres://flywheel:pw@postgres:5432/flywheel" in config
    assert "REDIS_URL: redis://redis:6379/0" in config


def test_the_vllm_service_runs_under_the_serving_agent_that_heartbeats_into_the_web_app():
    config = _compose("config", env=SECRETS).stdout
    vllm = config[config.index("  vllm:") :]
    assert "dockerfile: Dockerfile.vllm" in vllm and "POLICY_SERVER_TOKEN: ptok" in vllm
    assert "http://web:8000" in vllm and "--served-name" in vllm
    dockerfile = (ROOT / "Dockerfile.vllm").read_text()
    assert '"-m", "agent_core.serving"' in dockerfile and "COPY agent_core" in dockerfile
    # The web app's side of the same token.
    assert "POLICY_SERVER_TOKEN: ptok" in config[: config.index("  vllm:")]


def test_compose_refuses_to_run_without_secrets():
    result = _compose("config", "-q", env={})
    assert result.returncode != 0
    assert "set POSTGRES_PASSWORD in .env" in result.stderr or "set SECRET_KEY in .env" in result.stderr


def test_every_daphne_we_start_gives_a_websocket_the_admission_time_the_tests_use():
    # test_socket_lifetime shows a loaded server needing more than daphne's default 5 s to accept;
    # each way of running the platform starts daphne with the same room as the tests' daphne.
    from tests.procs import DAPHNE_TIMEOUTS

    flag, seconds = DAPHNE_TIMEOUTS
    for name in ("scripts/run.sh", "docker-compose.yml", "Dockerfile"):
        text = (ROOT / name).read_text()
        starts = [line for line in text.splitlines() if "daphne" in line and "asgi:application" in line]
        assert starts, f"{name} no longer starts daphne here: update this test"
        for line in starts:
            assert flag in line and seconds in line.split(flag, 1)[1][:12], f"{name}: {line.strip()}"
