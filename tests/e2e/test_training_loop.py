"""The whole flywheel loop from the pages, on this machine, with every part real: the oracle's rollouts
on a MiniWoB task in real Chromium sandboxes → a round routes them → flywheel-sft@v1 → an SFT run of
the tiny policy on it (a real `training` worker) → its checkpoint promoted to a policy → a GRPO run
from that policy on live Celery rollouts → its checkpoint promoted → a rollout batch of the new policy.

What it checks is the plumbing of the loop, not how well the tiny model learns (bench/cpu_demo.py
measures that on held-back seeds): each stage's data is the one the page chose, the RL run trained on
rollouts of its own policy versions, and the last batch ran the RL policy. The success rates of the
three batches are printed. Screenshots go to var/e2e-screenshots/.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import override_settings
from playwright.sync_api import Browser, Page, expect

from tests.conftest import Personas
from tests.e2e.platform import site_with_host
from tests.e2e.test_flywheel import page_as, until
from tests.procs import celery_worker
from tests.sandbox_workers.hostproc import TOKEN
from webapp.catalog.models import Task
from webapp.catalog.services import suite_get_or_create, suite_load
from webapp.datasets.models import DatasetVersion, FlywheelIteration
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.policies.runtime import policy_for
from webapp.rollouts.models import RolloutBatch
from webapp.sandboxes.models import Sandbox
from webapp.training.merging import policy_merge_request
from webapp.training.models import Checkpoint, MetricPoint, PolicyMerge, TrainingRun

pytest.importorskip("torch")
pytest.importorskip("transformers")

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "var" / "e2e-screenshots"
TASK = "miniwob/click-test"
RUN_TIMEOUT_MS = 600_000


@pytest.fixture
def platform(transactional_db: None, tmp_path: Path) -> Iterator[str]:
    """daphne, a worker for rollouts/sandboxes/datasets, a browser host and a `training` worker.

    Every process resolves model directories and media where this test does.
    """
    shared = {
        "FLYWHEEL_VAR_DIR": str(settings.VAR_DIR),
        "MEDIA_ROOT": str(settings.MEDIA_ROOT),
        "ROLLOUT_HEARTBEAT_SECONDS": "1",
        "ROLLOUT_LEASE_WAIT_SECONDS": "90",
        "OMP_NUM_THREADS": "1",
    }
    with (
        override_settings(SANDBOX_HOST_TOKEN=TOKEN),
        site_with_host(
            tmp_path,
            host_name="e2e-loop-host",
            profiles={"browser": {"provider": "browser", "min_idle": 2, "max_total": 2}},
            slot_base=262,
            queues="rollouts,sandboxes,datasets,interactive",
            concurrency=3,
            env=shared,
            ready=lambda host: Sandbox.objects.filter(state="idle", profile="browser").count() >= 2,
        ) as (url, _),
        celery_worker(
            tmp_path,
            queues="training",
            pool="solo",
            label="e2e-loop-training",
            env={"SANDBOX_HOST_TOKEN": TOKEN, **shared},
        ),
    ):
        yield url


def launch_batch(page: Page, *, suite: Any, policy: PolicyVersion, n: int) -> RolloutBatch:
    """Launch a rollout batch from the Rollouts page and wait until it has finished."""
    page.goto("/rollouts/")
    form = page.get_by_test_id("launch-form")
    form.locator("select[name=suite]").select_option(str(suite.pk))
    form.locator("select[name=policy]").select_option(str(policy.pk))
    form.locator("input[name=episodes_per_task]").fill(str(n))
    form.locator("input[name=concurrency]").fill("2")
    form.locator("input[name=history_images]").fill("1")
    form.get_by_role("button", name="Launch").click()
    expect(page.get_by_test_id("batch-status")).to_be_visible()
    batch = RolloutBatch.objects.filter(policy_version=policy).latest("pk")
    until(lambda: RolloutBatch.objects.get(pk=batch.pk).status == "finished", f"batch {batch.name}", 600)
    page.reload()
    expect(page.get_by_test_id("batch-status")).to_have_text("finished")
    return batch


def successes(batch: RolloutBatch) -> tuple[int, int]:
    episodes = Episode.objects.filter(batch=batch, status="finished", env_error=False)
    return sum(1 for e in episodes if (e.reward or 0) >= 1.0), episodes.count()


def outcomes(batch: RolloutBatch) -> list[tuple[Any, ...]]:
    """Every episode of a batch as a failed assertion should show it (re-runs included)."""
    return [
        (
            e.pk,
            e.seed,
            e.status,
            e.env_error,
            e.reward,
            e.attempt,
            e.retry_of_id,
            e.stop_reason,
            e.error,
        )
        for e in Episode.objects.filter(batch=batch).order_by("pk")
    ]


def launch_run(page: Page, *, algorithm: str, name: str, policy: PolicyVersion, **data: str) -> TrainingRun:
    """Launch a training run from the Training page (data: dataset= or suite=, cfg_<field>=)."""
    page.goto("/training/")
    launch = page.get_by_test_id("launch")
    if launch.get_attribute("open") is None:  # folded away once there are runs
        launch.locator("summary").click()
    form = page.get_by_test_id("launch-form")
    if form.get_by_test_id("algorithm").input_value() != algorithm:  # htmx swaps the fields in
        form.get_by_test_id("algorithm").select_option(algorithm)
        expect(form.locator('[name="cfg_group_size"]')).to_have_count(0 if algorithm == "sft" else 1)
    form.get_by_test_id("run-name").fill(name)
    form.get_by_test_id("base-policy").select_option(str(policy.pk))
    if "dataset" in data:
        form.get_by_test_id("dataset").fill(data.pop("dataset"))
    if "suite" in data:
        form.get_by_test_id("suite").select_option(data.pop("suite"))
    for field, value in data.items():
        form.locator(f'[name="cfg_{field}"]').fill(value)
    form.get_by_test_id("launch-submit").click()
    expect(page.get_by_test_id("run-live")).to_be_visible()
    run = TrainingRun.objects.get(name=name)
    expect(page.get_by_test_id("run-live")).to_have_attribute(
        "data-status", "finished", timeout=RUN_TIMEOUT_MS
    )
    return run


def promote_last(page: Page, run: TrainingRun) -> PolicyVersion:
    """Promote the run's last checkpoint from its page; the new policy version."""
    last = Checkpoint.objects.filter(run=run).latest("step")
    page.goto(f"/training/runs/{run.pk}/")
    row = page.locator(f'[data-testid="checkpoint-row"][data-step="{last.step}"]')
    row.get_by_test_id("promote").click()
    expect(page.locator(f'[data-testid="checkpoint-row"][data-step="{last.step}"]')).to_contain_text(
        f"-step-{last.step}"
    )
    return PolicyVersion.objects.get(checkpoint=last)


def test_the_whole_loop_from_the_pages(platform: str, browser: Browser, personas: Personas) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    suite_load(name="miniwob")
    Task.objects.filter(slug=TASK).update(is_published=True)
    suite = suite_get_or_create(slug="loop", name="Loop")
    suite.tasks.add(Task.objects.get(slug=TASK))
    # The oracle records the element list the tiny text policy will read; the tiny policy starts blank.
    oracle = PolicyVersion.objects.create(
        name="oracle-elements", backend="oracle", config={"observation": "elements"}
    )
    call_command("tiny_policy", "--name", "tiny", stdout=io.StringIO())
    tiny = PolicyVersion.objects.get(name="tiny")
    admin = page_as(browser, platform, personas.admin)
    researcher = page_as(browser, platform, personas.researcher)

    # 1. Rollouts: the oracle on six instances of the task.
    demos = launch_batch(researcher, suite=suite, policy=oracle, n=6)
    assert successes(demos) == (6, 6), outcomes(demos)

    # 2. Routing: a round closed from the flywheel page puts the six in flywheel-sft@v1.
    admin.goto("/datasets/flywheel/")
    admin.get_by_test_id("close-round").click()
    expect(admin.get_by_test_id("round-row")).to_have_count(1, timeout=120_000)
    assert FlywheelIteration.objects.get(number=1).status == "finished"
    sft_data = DatasetVersion.objects.get(dataset__name="flywheel-sft", number=1)
    assert sft_data.memberships.count() == 6

    # 3. SFT of the tiny policy on that version, then its last checkpoint becomes a policy.
    sft = launch_run(
        admin, algorithm="sft", name="loop sft", policy=tiny, dataset="flywheel-sft@v1",
        max_steps="200", batch_size="6", lr="0.004", warmup_steps="10", checkpoint_every="100",
        history_images="1",
    )  # fmt: skip
    assert sft.dataset_version_id == sft_data.pk
    assert MetricPoint.objects.filter(run=sft, name="train/loss").count() == 200
    sft_policy = promote_last(admin, sft)
    assert sft_policy.config.get("observation") == "elements"  # inherited from the base policy

    # 4. GRPO from the SFT policy on live rollouts of the suite (Celery rollouts on the browser host).
    rl = launch_run(
        admin, algorithm="grpo", name="loop grpo", policy=sft_policy, suite=str(suite.pk),
        iterations="1", episodes_per_iteration="4", group_size="4", minibatch_size="4", checkpoint_every="1",
        max_steps_per_episode="2", max_new_tokens="96", history_images="1", lr="0.0005", temperature="1.5",
    )  # fmt: skip
    admin.screenshot(path=SCREENSHOTS / "training-loop-grpo.png", full_page=True)
    rl_batch = RolloutBatch.objects.get(name=f"training run {rl.pk}")
    trained_on = Episode.objects.filter(batch=rl_batch, status="finished")
    assert trained_on.count() >= 4
    # Its rollouts were made by the run's own published version, on training seeds.
    names = set(trained_on.values_list("policy_version__name", flat=True))
    assert names == {f"run-{rl.pk}-v0"}, names
    assert all(seed >= 10_000 for seed in trained_on.values_list("seed", flat=True))
    assert MetricPoint.objects.filter(run=rl, name="rl/success").exists()
    rl_policy = promote_last(admin, rl)
    assert rl_policy.lineage["run_name"] == "loop grpo"

    # 5. Rollouts with the new policy, and with the SFT-only one for comparison.
    after = launch_batch(researcher, suite=suite, policy=rl_policy, n=2)
    before = launch_batch(researcher, suite=suite, policy=sft_policy, n=2)
    for batch, policy in ((after, rl_policy), (before, sft_policy)):
        episodes = Episode.objects.filter(batch=batch)
        assert {e.policy_version_id for e in episodes} == {policy.pk}
        assert all(e.status == "finished" and not e.env_error for e in episodes), [e.error for e in episodes]
    researcher.screenshot(path=SCREENSHOTS / "training-loop-batch.png", full_page=True)

    # 6. The SFT and RL policies merged half and half (parameter interpolation) on the datasets worker.
    merge = policy_merge_request(sources=[(sft_policy, 0.5), (rl_policy, 0.5)], by=personas.admin)
    until(lambda: PolicyMerge.objects.get(pk=merge.pk).status in ("finished", "failed"), "the merge")
    merge.refresh_from_db()
    assert merge.status == "finished" and merge.policy is not None, merge.error
    assert merge.policy.config == sft_policy.config
    policy_for(merge.policy).close()  # a policy rollouts can load
    print(
        f"loop on {TASK}: oracle {successes(demos)}, SFT-only {successes(before)}, "
        f"SFT+GRPO {successes(after)} (successes, finished episodes)"
    )
    admin.context.close()
    researcher.context.close()
