"""Personas shared by every test: one user per role and an outsider with no role."""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import AbstractBaseUser
from django.test import Client

from webapp.accounts.roles import Role
from webapp.common.queue import EPISODE_ROLLOUT

PASSWORD = "correct-horse-battery-staple"

# The navigation each persona should see, in order (pages tests and the browser tests both check it).
NAV = {
    "annotator": ["Home", "Tasks", "Episodes", "Annotate", "API tokens"],
    "reviewer": ["Home", "Tasks", "Episodes", "Review queue", "API tokens"],
    "researcher": [
        "Home", "Tasks", "Episodes", "Rollouts", "Dashboards", "Datasets", "Training", "Sandboxes",
        "Policy servers", "API tokens",
    ],
    "admin": [
        "Home", "Tasks", "Episodes", "Annotate", "Rollouts", "Dashboards", "Review queue", "Datasets",
        "Training", "Sandboxes", "Policy servers", "API tokens", "Admin",
    ],
    "outsider": ["Home", "API tokens"],
}  # fmt: skip


@dataclass
class Personas:
    annotator: AbstractBaseUser
    reviewer: AbstractBaseUser
    researcher: AbstractBaseUser
    admin: AbstractBaseUser
    outsider: AbstractBaseUser

    def all(self) -> dict[str, AbstractBaseUser]:
        return {
            name: getattr(self, name) for name in ("annotator", "reviewer", "researcher", "admin", "outsider")
        }


def make_personas() -> Personas:
    from webapp.accounts.services import user_create

    def make(name: str, roles: list[Role]) -> AbstractBaseUser:
        return user_create(username=name, password=PASSWORD, roles=roles, email=f"{name}@example.org")

    return Personas(
        annotator=make("alice", [Role.ANNOTATOR]),
        reviewer=make("bob", [Role.REVIEWER]),
        researcher=make("carol", [Role.RESEARCHER]),
        admin=make("dave", [Role.ADMIN]),
        outsider=make("eve", []),
    )


@pytest.fixture(autouse=True)
def _empty_cache() -> None:
    """Each test starts with no login attempts counted and no live ticket used."""
    from django.core.cache import cache

    cache.clear()


class Queued(list[tuple[str, tuple[Any, ...]]]):
    """The (task name, args) of everything services enqueued (webapp.common.queue); set `down` to an
    exception to play a broker that refuses."""

    down: BaseException | None = None
    countdowns: list[float | None]

    def of(self, name: str) -> list[tuple[Any, ...]]:
        return [args for n, args in self if n == name]


@pytest.fixture
def queued(monkeypatch: pytest.MonkeyPatch) -> Queued:
    """Celery replaced at its one boundary: what services enqueue by name is recorded, not sent."""
    sent = Queued()
    sent.countdowns = []

    def send(name: str, args: tuple[Any, ...], countdown: float | None) -> str:
        json.dumps(list(args))  # arguments must survive Celery's JSON serializer
        if sent.down is not None:
            raise sent.down
        sent.append((name, args))
        sent.countdowns.append(countdown)
        return f"task-{len(sent)}"

    monkeypatch.setattr("webapp.common.queue._send", send)
    return sent


class EpisodesQueued(list[int]):
    """Rollout episode ids queued now (`episode_rollout` only); `later` holds the arguments queued again
    with a countdown (an episode given back to wait for a sandbox)."""

    def __init__(self) -> None:
        super().__init__()
        self.later: list[tuple[int, ...]] = []


@pytest.fixture
def enqueued(monkeypatch: pytest.MonkeyPatch) -> EpisodesQueued:
    sent = EpisodesQueued()

    def send(name: str, args: tuple[Any, ...], countdown: float | None) -> str:
        assert name == EPISODE_ROLLOUT, name
        json.dumps(list(args))  # arguments must survive Celery's JSON serializer
        if countdown is None:  # queued now; a countdown is a re-run later (see `later`)
            sent.append(args[0])
        else:
            sent.later.append(args)
        return "task-id"

    monkeypatch.setattr("webapp.common.queue._send", send)
    return sent


@pytest.fixture
def personas(db: None) -> Personas:
    return make_personas()


@pytest.fixture
def client_for(personas: Personas):  # type: ignore[no-untyped-def]
    """client_for("annotator") -> a Client logged in as that persona; client_for(None) -> anonymous."""

    def make(name: str | None) -> Client:
        client = Client()
        if name is not None:
            client.force_login(getattr(personas, name))
        return client

    return make


# What can differ between SQLite and PostgreSQL: migrations, constraints, WAL and transactions, locking,
# the ORM-heavy services and selectors, the door's limits on numbers. `make test` runs the whole suite on
# PostgreSQL, then only these (marked `engine`) again on SQLite, the embedded default.
ENGINE_TESTS = (
    "tests/webapp/models/",
    "tests/webapp/episodes/",
    "tests/webapp/infra/test_migrations.py",
    "tests/webapp/infra/test_job_states_migration.py",
    "tests/webapp/datasets/test_rounds.py",
    "tests/webapp/datasets/test_exports.py",
    "tests/webapp/reviews/test_services.py",
    "tests/webapp/reviews/test_agreement.py",
    "tests/webapp/rollouts/test_batches.py",
    "tests/webapp/rollouts/test_verification.py",
    "tests/webapp/training/test_data.py",
    "tests/webapp/training/test_execution.py",
    "tests/webapp/training/test_launch.py",
    "tests/webapp/annotation/test_control.py",
    "tests/webapp/sandboxes/test_heartbeat.py",
    "tests/webapp/dashboards/test_stats.py",
    "tests/webapp/dashboards/test_metrics.py",
    "tests/webapp/api/test_pagination.py",
    "tests/webapp/api/test_bad_input.py",
    "tests/webapp/pages/test_bad_input.py",
    "tests/webapp/test_settings_env.py",
    "tests/webapp/test_private_files.py",
)


# The longest modules of the main pass (minutes each on the CI machine), started first so that the two
# processes of `make test` do not end with one of them alone on a long one.
LONGEST_FIRST = (
    "tests/e2e/test_training_loop.py",
    "tests/e2e/test_four_roles.py",
    "tests/webapp/rollouts/test_rollouts_real.py",
    "tests/agent_core/training/test_distributed.py",
    "tests/test_make_run.py",
    "tests/webapp/training/test_worker_real.py",
    "tests/webapp/datasets/test_export_memory.py",
    "tests/sandbox_workers/test_host_service.py",
)


def _run_order(item: pytest.Item) -> int:
    """0: the longest modules; 2: the tests that need an environment still installing beside the first
    minutes of `make test` (osworld, vllm_main: they would hold a process waiting); 1: the rest."""
    if item.nodeid.startswith(LONGEST_FIRST):
        return 0
    return 2 if any(item.get_closest_marker(m) is not None for m in INSTALLING) else 1


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.nodeid.startswith(ENGINE_TESTS):
            item.add_marker(pytest.mark.engine)
    items.sort(key=_run_order)  # stable: each module's tests keep their order


ENV_WAIT_S = 900
# Marker → (the variable naming the file an install beside `make test` writes at its end, what it installs,
# its log).
INSTALLING = {
    "osworld": ("OSWORLD_ENV_STATUS", "OSWorld's environment and applications", "osworld-env.log"),
    "vllm_main": ("VLLM_ENV_STATUS", "vLLM's environment", "vllm-env.log"),
}


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked osworld or vllm_main waits for the environment it needs when `make test` is
    installing it beside the run (the install writes "ok" or "failed" to a file at its end)."""
    for marker, (variable, what, log) in INSTALLING.items():
        status_file = os.environ.get(variable)
        if not status_file or item.get_closest_marker(marker) is None:
            continue
        deadline = time.monotonic() + ENV_WAIT_S
        path = Path(status_file)
        while not path.exists():
            if time.monotonic() > deadline:
                pytest.fail(f"{what} did not finish installing in {ENV_WAIT_S} s")
            time.sleep(1)
        if path.read_text().strip() != "ok":
            pytest.fail(f"{what} failed to install (see {log})")


@pytest.fixture
def osworld_mirror(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """What a test of OSWorld's tasks on a real office desktop needs: OSWorld's metrics environment and
    LibreOffice installed (a failure, not a skip, naming the script), and the project's OSWorld-format
    sample files in an offline mirror the sandbox host fetches from (OSWorld's hosts are never reached)."""
    from agent_core.suites import osworld_samples
    from agent_core.tasks import osworld_metrics

    if osworld_metrics.available() is not None:
        pytest.fail(f"OSWorld's metrics environment: {osworld_metrics.available()}")
    if shutil.which("libreoffice") is None:
        pytest.fail("LibreOffice is not installed: scripts/office-apps.sh")
    mirror = tmp_path / "mirror"
    osworld_samples.write_mirror(mirror)
    monkeypatch.setenv("SANDBOX_FETCH_MIRROR", str(mirror))
    monkeypatch.setenv("SANDBOX_FETCH_OFFLINE", "1")
    return mirror
