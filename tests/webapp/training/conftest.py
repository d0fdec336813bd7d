"""Training runs for the tests: a base policy, a dataset version of real episodes, a suite, and a fake
trainer that writes checkpoint directories and reports through the real RunHooks."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from django.test import override_settings

from agent_core.training import runner as runner_module
from agent_core.training.checkpoints import STATE_FILE, checkpoint_dir
from agent_core.training.errors import TrainingError
from agent_core.training.types import Hooks, RunResult, RunSpec
from tests.conftest import Personas
from tests.factories import make_task
from tests.webapp.datasets.conftest import GOOD, build_episode
from webapp.catalog.models import TaskSuite
from webapp.catalog.services import suite_get_or_create
from webapp.datasets.models import Dataset, DatasetVersion
from webapp.datasets.services import dataset_version_create
from webapp.policies.models import PolicyVersion
from webapp.training.models import TrainingRun
from webapp.training.services import training_run_launch


@pytest.fixture(autouse=True)
def _training_settings(tmp_path: Path) -> Iterator[None]:
    # No heartbeat thread (its writes would wait on the test's open transaction) and stop requests
    # read at every check, so a test does not wait for the 2 s poll.
    with override_settings(TRAINING_HEARTBEAT_S=0, TRAINING_STOP_POLL_S=0, VAR_DIR=tmp_path / "var"):
        yield


@pytest.fixture
def base_policy(tmp_path: Path) -> PolicyVersion:
    """An active local policy whose model directory is a folder (the fake trainer never loads it)."""
    model = tmp_path / "base-model"
    model.mkdir()
    return PolicyVersion.objects.create(
        name="tiny-base", backend="local", model_name=str(model), config={"max_new_tokens": 32}
    )


@pytest.fixture
def sft_version(personas: Personas) -> DatasetVersion:
    """flywheel-sft@v1: three accepted-looking demonstrations of three steps."""
    task = make_task(platform="desktop", env_profile="desktop", max_steps=6)
    episodes = [build_episode(task=task, steps=GOOD, annotator=personas.annotator) for _ in range(3)]
    dataset = Dataset.objects.create(name="flywheel-sft", kind=Dataset.Kind.SFT)
    return dataset_version_create(dataset=dataset, episodes=episodes, created_by=personas.admin)


@pytest.fixture
def suite() -> TaskSuite:
    """A suite with two published tasks and one unpublished."""
    suite = suite_get_or_create(slug="miniwob", name="MiniWoB++")
    for slug, published in [("miniwob/click-a", True), ("miniwob/click-b", True), ("miniwob/draft", False)]:
        task = make_task(slug=slug, suites=[suite])
        task.is_published = published
        task.save(update_fields=["is_published"])
    return suite


@pytest.fixture
def launch(
    personas: Personas, base_policy: PolicyVersion, sft_version: DatasetVersion
) -> Callable[..., TrainingRun]:
    """launch(config=..., name=...) -> a pending SFT run on flywheel-sft@v1 (not enqueued)."""

    def make(**overrides: Any) -> TrainingRun:
        algorithm = overrides.get("algorithm", "sft")
        rl_config = {"iterations": 4, "checkpoint_every": 2}
        args: dict[str, Any] = {
            "algorithm": algorithm,
            "name": f"{algorithm} round 1",
            "config": {"max_steps": 6, "checkpoint_every": 2, "batch_size": 1}
            if algorithm == "sft"
            else rl_config,
            "created_by": personas.admin,
            "dataset_pin": f"{sft_version.dataset.name}@v{sft_version.number}",
            "base_policy": base_policy,
            "suite": None,
        }
        args.update(overrides)
        return training_run_launch(**args)

    return make


@dataclass
class FakeRunner:
    """Stands in for agent_core.training.runner.run: steps, metrics, checkpoints, stop checks, logs."""

    calls: list[dict[str, Any]] = field(default_factory=list)
    fail_with: BaseException | None = None
    on_step: Callable[[int], None] | None = None  # called after each step (a test acts mid-run)

    def __call__(self, spec: RunSpec, hooks: Hooks, *, examples: Any = None, source: Any = None) -> RunResult:
        data = list(examples) if examples is not None else None
        self.calls.append({"spec": spec, "examples": data, "source": source})
        cfg = dict(spec.config)
        step = 0
        if spec.resume_from is not None:
            step = int(spec.resume_from.name.removeprefix("step-"))
            hooks.on_log(f"resumed from {spec.resume_from.name} (step {step})")
        total = int(cfg.get("max_steps") or cfg.get("iterations") or 4)
        every = int(cfg["checkpoint_every"])
        hooks.on_log(f"fake training: {total} steps")
        while step < total:
            if hooks.should_stop():
                hooks.on_log(f"stop requested: saving step {step}")
                path = self._save(spec, hooks, step)
                return RunResult("stopped", step, path, {})
            if self.fail_with is not None and step == 1:
                raise self.fail_with
            step += 1
            hooks.on_metrics(
                step, {"train/loss": 1.0 / step, "train/lr": 1e-3, "train/tokens_per_s": 100.0 * step}
            )
            if step % every == 0 or step == total:
                self._save(spec, hooks, step)
            if self.on_step is not None:
                self.on_step(step)
        return RunResult("succeeded", step, checkpoint_dir(spec.out_dir, step), {"train/loss": 1.0 / step})

    @staticmethod
    def _save(spec: RunSpec, hooks: Hooks, step: int) -> Path:
        path = checkpoint_dir(spec.out_dir, step)
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text("{}")
        (path / STATE_FILE).write_bytes(b"state")
        hooks.on_checkpoint(step, path, {"train/loss": 1.0 / max(step, 1)})
        return path


@pytest.fixture
def fake_runner(monkeypatch: pytest.MonkeyPatch) -> FakeRunner:
    fake = FakeRunner()
    monkeypatch.setattr(runner_module, "run", fake)
    return fake


__all__ = ["FakeRunner", "TrainingError"]
