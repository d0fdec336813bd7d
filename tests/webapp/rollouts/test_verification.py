"""The publication check: no sandbox is not a failed check; the reason of a check is on the Tasks pages,
and a permitted user re-checks from there.

The sandbox lease is faked at one boundary here; tests/webapp/rollouts/test_rollouts_real.py checks a
task through a real worker whose host only comes up after the check started.
"""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.urls import reverse

from agent_core.suites.miniwob import task_doc
from tests.factories import make_task
from webapp.catalog.models import Task
from webapp.common.queue import TASK_VERIFY
from webapp.rollouts import tasks as rollout_tasks
from webapp.rollouts import verification
from webapp.rollouts.verification import VerificationDeferred, task_verify
from webapp.sandboxes.services import SandboxUnavailable

pytestmark = pytest.mark.django_db


def miniwob_task(**spec: object) -> Task:
    doc = {**task_doc("click-button", oracle=True), **spec}
    return make_task(slug=doc["id"], spec=doc, platform="browser", env_profile="browser")


@pytest.fixture
def no_sandbox(monkeypatch):
    """Every lease fails the way it does while the pool warms on the first start."""
    tries: list[str] = []

    def lease(*, profile, holder, **kwargs):
        tries.append(holder)
        raise SandboxUnavailable(f"no '{profile}' sandbox available: no live host serves this profile")

    monkeypatch.setattr(verification, "sandbox_lease", lease)
    return tries


def test_no_sandbox_is_not_a_failed_check(no_sandbox):
    task = miniwob_task()
    with pytest.raises(VerificationDeferred, match="no live host serves this profile"):
        task_verify(task=task, runs=2)
    task.refresh_from_db()
    assert task.verification_status == "waiting" and not task.is_published
    assert "no live host serves this profile" in task.verification_reason
    # A published task that cannot be re-checked for want of a sandbox stays published.
    Task.objects.filter(pk=task.pk).update(is_published=True)
    with pytest.raises(VerificationDeferred):
        task_verify(task=task, runs=1)
    task.refresh_from_db()
    assert task.is_published and task.verification_status == "waiting"


def test_the_worker_retries_a_check_with_no_sandbox_then_says_it_gave_up(no_sandbox):
    task = miniwob_task()
    # Run eagerly, Celery re-runs the task at once on each retry instead of after its countdown.
    result = rollout_tasks.task_verify_run.apply(args=(task.pk, 1)).get()
    assert len(no_sandbox) == rollout_tasks.VERIFY_RETRIES + 1
    assert result["status"] == "waiting"
    task.refresh_from_db()
    assert task.verification_status == "waiting" and not task.is_published
    assert "gave up after 9 tries" in task.verification_reason


def test_a_failed_check_says_why():
    task = miniwob_task(oracle="no-such-oracle")
    result = task_verify(task=task, runs=1)
    assert result["status"] == "failed"
    assert result["reason"].startswith("no proof yet: no scripted solution named 'no-such-oracle'")
    task.refresh_from_db()
    assert task.verification_status == "failed" and not task.is_published


def test_tasks_pages_show_why_a_check_failed_and_permitted_users_recheck(
    client_for, queued, django_capture_on_commit_callbacks
):
    task = miniwob_task()
    task.verification = {
        "status": "waiting",
        "reason": "no sandbox to check it on (oracle run 1): no 'browser' sandbox available",
    }
    task.save()
    for page in (reverse("catalog:task_list"), reverse("catalog:task_detail", args=[task.pk])):
        annotator = client_for("annotator").get(page).content.decode()
        assert "waiting for a sandbox" in annotator
        assert "no &#x27;browser&#x27; sandbox available" in annotator
        assert 'data-testid="recheck"' not in annotator
        assert 'data-testid="recheck"' in client_for("researcher").get(page).content.decode()
    recheck = reverse("rollouts:task_recheck", args=[task.pk])
    assert client_for("annotator").post(recheck).status_code == 403 and queued.of(TASK_VERIFY) == []
    with django_capture_on_commit_callbacks(execute=True):
        resp = client_for("researcher").post(recheck, {"next": reverse("catalog:task_list") + "?published=0"})
    assert resp.status_code == 302 and resp["Location"] == reverse("catalog:task_list") + "?published=0"
    assert queued.of(TASK_VERIFY) == [(task.pk, 2)]
    task.refresh_from_db()
    assert task.verification_status == "queued" and task.verification_reason == ""
    # Somewhere else is not where a re-check sends anyone.
    resp = client_for("researcher").post(recheck, {"next": "https://evil.example/"})
    assert resp["Location"] == reverse("catalog:task_detail", args=[task.pk])
    # Nor is a `next` that is no path (redirect() read it as a view name: a 500).
    for junk in ("-1", "nan", "catalog:task_list"):
        resp = client_for("researcher").post(recheck, {"next": junk})
        assert resp.status_code == 302 and resp["Location"] == reverse("catalog:task_detail", args=[task.pk])


def test_tasks_verify_unverified_hands_over_every_task_without_a_verdict(
    queued, capsys, django_capture_on_commit_callbacks
):
    states = {
        "unchecked": {},
        "waiting": {"status": "waiting", "reason": "no sandbox"},
        "running": {"status": "running"},
        "passed": {"status": "passed", "ok": True},
        "failed": {"status": "failed", "ok": False},
        "old-verdict": {"ok": False, "errors": ["x"]},  # recorded before checks had a status
    }
    tasks = {}
    for name, state in states.items():
        tasks[name] = make_task(slug=f"v/{name}")
        Task.objects.filter(pk=tasks[name].pk).update(verification=state)
    with django_capture_on_commit_callbacks(execute=True):
        call_command("tasks_verify", "--unverified", "--enqueue", "--runs", "1")
    want = sorted((tasks[n].pk, 1) for n in ("unchecked", "waiting", "running"))
    assert sorted(queued.of(TASK_VERIFY)) == want
    assert Task.objects.get(pk=tasks["waiting"].pk).verification_status == "queued"
    assert "enqueued 3 verifications" in capsys.readouterr().out


@pytest.fixture
def fake_runs(monkeypatch):
    """Leases and episodes faked at one boundary: each run of a policy scores `scores[policy]`."""
    from types import SimpleNamespace

    runs: list[str] = []
    scores = {"oracle": 1.0, "noop": 0.0}
    monkeypatch.setattr(verification, "sandbox_lease", lambda **kw: (None, SimpleNamespace()))
    monkeypatch.setattr(verification, "SandboxEnv", lambda leased, platform: SimpleNamespace())
    monkeypatch.setattr(verification, "prepare", lambda spec, env, seed: None)

    def run_episode(env, policy, prepared):
        runs.append(policy.name)
        return SimpleNamespace(reward=scores[policy.name])

    monkeypatch.setattr(verification, "run_episode", run_episode)
    monkeypatch.setattr(verification, "make_policy", lambda name: SimpleNamespace(name=name))
    return runs, scores


def test_a_demonstration_scoring_1_proves_a_task_without_a_scripted_solution(
    fake_runs, django_capture_on_commit_callbacks, queued
):
    from tests.factories import make_episode

    runs, scores = fake_runs
    task = miniwob_task(oracle="no-such-oracle")
    assert task_verify(task=task, runs=2)["status"] == "failed"
    failed = make_episode(task=task, reward=0.0)
    # Only a demonstration that scored 1 is a proof.
    with django_capture_on_commit_callbacks(execute=True):
        verification.proof_record(task=task, episode_id=failed.pk, by="ann")
    assert task_verify(task=task, runs=1)["reason"].startswith("no proof yet")
    good = make_episode(task=task, reward=1.0)
    with django_capture_on_commit_callbacks(execute=True):
        verification.proof_record(task=task, episode_id=good.pk, by="ann")
    assert queued[-1][0] == TASK_VERIFY
    result = task_verify(task=task, runs=2)
    # The proof stands for the scripted runs: only doing nothing runs, and must score 0.
    assert runs == ["noop", "noop"]
    assert result["ok"] and result["proof"]["episode"] == good.pk and result["oracle"] == [1.0, 1.0]
    task.refresh_from_db()
    assert task.is_published
    # A later check keeps resting on the proof; doing nothing that scores 1 unpublishes it.
    scores["noop"] = 1.0
    result = task_verify(task=task, runs=1)
    assert not result["ok"] and "doing nothing scored [1.0]" in result["reason"]
    assert result["proof"]["episode"] == good.pk
    # A changed spec needs a new proof.
    Task.objects.filter(pk=task.pk).update(spec={**task.spec, "title": "changed"})
    task.refresh_from_db()
    assert task_verify(task=task, runs=1)["reason"].startswith("no proof yet")
