"""Training in a real browser with a real `training` worker: a launch refused for a bad config names the
field; an SFT run of a tiny model on a dataset version of real episodes draws its charts live, shows its
log, and one of its checkpoints becomes a policy version; two runs side by side. Screenshots go to
var/e2e-screenshots/."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.conftest import Personas
from tests.e2e.conftest import OpenAs
from tests.factories import make_task
from tests.procs import celery_worker
from tests.webapp.datasets.conftest import GOOD, build_episode
from webapp.datasets.models import Dataset, DatasetVersion
from webapp.datasets.services import dataset_version_create
from webapp.policies.models import PolicyVersion
from webapp.training.models import MetricPoint, TrainingRun

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "var" / "e2e-screenshots"
RUN_TIMEOUT_MS = 300_000


@pytest.fixture
def training_worker(transactional_db: None, tmp_path: Path) -> Iterator[None]:
    """A Celery worker on queue `training` (the server and it share the var dir and the database)."""
    env = {"OMP_NUM_THREADS": "1"}
    with celery_worker(tmp_path, queues="training", pool="solo", label="e2e-training", env=env):
        yield


@pytest.fixture
def sft_data(personas: Personas, tmp_path: Path) -> tuple[DatasetVersion, PolicyVersion]:
    """demos@v1 (three recorded demonstrations) and a tiny local model to start from."""
    from agent_core.tiny_models import build_tiny_causal_lm

    task = make_task(platform="desktop", env_profile="desktop", max_steps=6)
    episodes = [build_episode(task=task, steps=GOOD, annotator=personas.annotator) for _ in range(3)]
    dataset = Dataset.objects.create(name="demos", kind=Dataset.Kind.SFT)
    version = dataset_version_create(dataset=dataset, episodes=episodes, created_by=personas.admin)
    model = build_tiny_causal_lm(tmp_path / "tiny-base", seed=1)
    return version, PolicyVersion.objects.create(name="tiny-lm", backend="local", model_name=str(model))


def fill_launch(page: Page, *, name: str, policy: PolicyVersion, **config: str) -> None:
    launch = page.get_by_test_id("launch")
    if launch.get_attribute("open") is None:  # folded away once there are runs
        launch.locator("summary").click()
    form = page.get_by_test_id("launch-form")
    form.get_by_test_id("run-name").fill(name)
    form.get_by_test_id("dataset").fill("demos@v1")
    form.get_by_test_id("base-policy").select_option(str(policy.pk))
    for field, value in config.items():
        form.locator(f'[name="cfg_{field}"]').fill(value)


SMALL = {"max_steps": "12", "checkpoint_every": "4", "batch_size": "2", "max_seq_len": "512"}


def wait_for_run(page: Page) -> None:
    expect(page.get_by_test_id("run-live")).to_have_attribute(
        "data-status", "finished", timeout=RUN_TIMEOUT_MS
    )


def test_admin_launches_follows_promotes_and_compares_runs(
    open_as: OpenAs, sft_data: tuple[DatasetVersion, PolicyVersion], training_worker: None
) -> None:
    _, policy = sft_data
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    admin = open_as("admin")
    admin.goto("/training/")

    # A bad config comes back with the message beside the field, the values kept.
    fill_launch(admin, name="tiny sft", policy=policy, lr="-1", **SMALL)
    admin.get_by_test_id("launch-submit").click()
    expect(admin.get_by_test_id("launch-error")).to_contain_text("lr: must be at least")
    field_error = admin.locator('[data-testid="field-error"][data-field="lr"]')
    expect(field_error).to_be_visible()
    expect(field_error).to_contain_text("must be at least")
    expect(admin.get_by_test_id("run-name")).to_have_value("tiny sft")
    assert not TrainingRun.objects.exists()

    # Switching the algorithm swaps in the RL fields (htmx), and back.
    admin.get_by_test_id("algorithm").select_option("grpo")
    expect(admin.locator('[name="cfg_group_size"]')).to_be_visible()
    admin.get_by_test_id("algorithm").select_option("sft")
    expect(admin.get_by_test_id("dataset")).to_be_visible()

    # A good one starts on the worker; its page follows it live.
    fill_launch(admin, name="tiny sft", policy=policy, lr="0.001", **SMALL)
    admin.get_by_test_id("launch-submit").click()
    expect(admin.get_by_test_id("run-live")).to_be_visible()
    first = TrainingRun.objects.get()
    assert admin.url.endswith(f"/training/runs/{first.pk}/")
    wait_for_run(admin)
    loss = admin.locator('canvas[data-group="loss"]')
    expect(loss).to_have_attribute("data-state", "drawn", timeout=30_000)
    expect(admin.locator('canvas[data-group="speed"]')).to_have_attribute("data-state", "drawn")
    expect(admin.locator('section[data-group="reward"]')).to_be_hidden()  # no RL metric in an SFT run
    expect(loss).to_have_attribute("data-points", "24", timeout=15_000)  # 12 steps of loss and of lr
    assert_charts_append_only_new_points(admin, first)
    expect(admin.get_by_test_id("run-log")).to_contain_text("step 12/12")
    expect(admin.get_by_test_id("run-log")).to_contain_text("finished at step 12")
    expect(admin.get_by_test_id("checkpoint-row")).to_have_count(3)
    admin.screenshot(path=SCREENSHOTS / "training-run.png", full_page=True)

    # A checkpoint becomes a policy version.
    admin.locator('[data-testid="checkpoint-row"][data-step="8"]').get_by_test_id("promote").click()
    expect(admin.get_by_test_id("checkpoint-policy")).to_have_text("tiny-sft-step-8")
    admin.goto("/training/")
    expect(admin.locator('[data-testid="policy-row"][data-policy="tiny-sft-step-8"]')).to_be_visible()
    assert PolicyVersion.objects.get(name="tiny-sft-step-8").checkpoint.step == 8

    # A second run with another learning rate, then the two side by side.
    fill_launch(admin, name="tiny sft lr", policy=policy, lr="0.01", **SMALL)
    admin.get_by_test_id("launch-submit").click()
    wait_for_run(admin)
    second = TrainingRun.objects.exclude(pk=first.pk).get()
    admin.goto(f"/training/compare/?a={first.pk}&b={second.pk}")
    expect(admin.get_by_test_id("run-a")).to_contain_text("tiny sft")
    expect(admin.get_by_test_id("run-b")).to_contain_text("tiny sft lr")
    expect(admin.locator('[data-testid="config-row"][data-field="lr"]')).to_have_attribute(
        "data-differs", "1"
    )
    expect(admin.locator('[data-testid="config-row"][data-field="max_steps"]')).to_have_attribute(
        "data-differs", "0"
    )
    overlay = admin.locator('canvas[data-group="metric:train/loss"]')
    expect(overlay).to_have_attribute("data-state", "drawn", timeout=30_000)
    expect(admin.locator('[data-testid="final-row"][data-metric="train/loss"] td')).to_have_count(2)
    admin.screenshot(path=SCREENSHOTS / "training-compare.png", full_page=True)


CHART_FEED = """async ([url, groups]) => {
  const grid = document.createElement("div");
  grid.id = "probe-charts";
  document.body.appendChild(grid);
  window.probeFeed = window.TrainingCharts.runCharts({ url, groups, grid, every: 0 });
  await window.probeFeed.ready;
}"""


def assert_charts_append_only_new_points(page: Page, run: TrainingRun) -> None:
    """A second feed on the run's page: the first load takes every point, a refresh asks only for what is
    new since its cursor and appends it, and a point that goes back in steps makes it reload."""
    asked: list[str] = []
    # The probe's own URL carries a marker, so the page's feed asking at the same time is not counted.
    page.on("request", lambda r: asked.append(r.url) if "probe=1" in r.url else None)
    url = f"/api/v1/training-runs/{run.pk}/series?probe=1"
    page.evaluate(
        CHART_FEED, [url, [{"key": "loss", "title": "Loss", "metrics": ["train/loss"], "right": []}]]
    )
    probe = page.locator('#probe-charts canvas[data-group="loss"]')
    expect(probe).to_have_attribute("data-points", "12")
    page.evaluate("() => window.probeFeed.refresh()")
    expect(probe).to_have_attribute("data-points", "12")  # nothing new: nothing added twice
    MetricPoint.objects.create(run=run, name="train/loss", step=13, value=0.01)
    page.evaluate("() => window.probeFeed.refresh()")
    expect(probe).to_have_attribute("data-points", "13")
    assert "after=" not in asked[0] and all("after=" in u for u in asked[1:3]), asked
    MetricPoint.objects.create(run=run, name="train/loss", step=2, value=0.5)  # a resumed run's re-record
    page.evaluate("() => window.probeFeed.refresh()")
    expect(probe).to_have_attribute("data-points", "14")
    assert "after=" not in asked[-1], asked  # the reload
