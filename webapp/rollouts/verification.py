"""Publication check: a task is published only when its oracle scores 1 and doing nothing scores 0,
on every one of several runs (so a flaky checker or oracle never gets published).

A check that cannot get a sandbox (the pool still warming, the host not registered yet or not
answering) has not happened: it is never recorded as a failure. The task keeps its publication, its
`verification` says it is waiting and why, and the Celery task tries again later (`task_verify_run`).

`Task.verification["status"]`: queued → running → passed | failed, or waiting (no sandbox; retried).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import time
from typing import Any

from django.db import transaction
from django.utils import timezone

from agent_core.agent import run_episode
from agent_core.env import EnvError
from agent_core.policies.base import PolicyError, make_policy
from agent_core.tasks.oracles import oracle_names
from agent_core.tasks.runner import prepare
from agent_core.tasks.spec import TaskSpecError, parse_task
from sandbox_workers.agent_env import SandboxEnv
from sandbox_workers.base import SandboxError
from sandbox_workers.client import HostUnreachable
from sandbox_workers.pool import SandboxUnavailable as HostSandboxUnavailable
from webapp.catalog.models import Task, VerificationStatus
from webapp.common.queue import TASK_VERIFY, enqueue
from webapp.sandboxes.services import SandboxUnavailable, lease_end, sandbox_lease

log = logging.getLogger(__name__)

# What keeps a check from happening at all: no sandbox to lease, or no host answering.
INFRASTRUCTURE_ERRORS = (SandboxUnavailable, HostSandboxUnavailable, HostUnreachable)


class VerificationDeferred(Exception):
    """The check could not run for want of a sandbox; it says nothing about the task."""


def task_proof(task: Task) -> dict[str, Any] | None:
    """The demonstration that proves a task without a scripted solution ({episode, reward, by}), if any:
    a person's demonstration the checker scored 1 on the task's current spec."""
    proof = (task.verification or {}).get("proof")
    if not isinstance(proof, dict):
        return None
    from webapp.episodes.models import Episode

    episode = Episode.objects.filter(pk=proof.get("episode"), task=task).only("reward").first()
    if episode is None or episode.reward != 1.0 or proof.get("spec") != spec_digest(task.spec):
        return None  # gone, or it proved an earlier spec
    return proof


def spec_digest(spec: Any) -> str:
    """What a proof was made on: the task's spec, canonically hashed."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()[:16]


def proof_record(*, task: Task, episode_id: int, by: str) -> None:
    """Keep a demonstration that scored 1 as the proof of a task that has no scripted solution, and
    queue the do-nothing half of its check (its publication follows from that)."""
    with transaction.atomic():
        row = Task.objects.select_for_update(no_key=True).only("verification", "spec").get(pk=task.pk)
        proof = {"episode": episode_id, "reward": 1.0, "by": by, "spec": spec_digest(row.spec)}
        verification = {**(row.verification or {}), "proof": proof}
        Task.objects.filter(pk=task.pk).update(verification=verification)
    task.refresh_from_db(fields=["verification"])
    verification_request(task=task)


def task_verify(*, task: Task, runs: int = 2, wait_s: float = 120) -> dict[str, Any]:
    """Run the task's oracle and the do-nothing policy `runs` times each on real sandboxes; publish
    the task when every oracle run scores 1 and every do-nothing run 0, unpublish it otherwise. A task
    with no scripted solution (an imported benchmark task) is proven instead by a person's
    demonstration that scored 1 (`proof_record`); doing nothing must still score 0.

    Raises VerificationDeferred (having marked the task waiting, its publication unchanged) when no
    sandbox could be had."""
    t0 = time.monotonic()
    result: dict[str, Any] = {
        "oracle": [],
        "noop": [],
        "errors": [],
        "checked_at": timezone.now().isoformat(),
    }
    try:
        spec = parse_task(task.spec)
    except TaskSpecError as exc:
        result["errors"].append(f"invalid spec: {exc}")
        return _save(task, result, ok=False)
    oracle = spec.oracle or spec.id
    proof = None
    if oracle not in oracle_names():
        proof = task_proof(task)
        if proof is None:
            result["errors"].append(
                f"no proof yet: no scripted solution named {oracle!r}, and no demonstration has scored 1 "
                "(an annotator's demonstration that scores 1 proves it)"
            )
            return _save(task, result, ok=False)
        result["proof"] = proof
        result["oracle"] = [proof["reward"]] * runs
    _set_status(task, VerificationStatus.RUNNING, reason="")
    for run in range(runs):
        for name in ("noop",) if proof else ("oracle", "noop"):
            seed = 1000 + run
            lease = None
            try:
                lease, leased = sandbox_lease(
                    profile=spec.profile, holder=f"verify:{task.slug}", wait_s=wait_s
                )
                env = SandboxEnv(leased, platform=spec.platform)
                prepared = prepare(spec, env, seed=seed)
                outcome = run_episode(env, make_policy(name), prepared)
                result[name].append(outcome.reward)
            except INFRASTRUCTURE_ERRORS as exc:
                reason = f"no sandbox to check it on ({name} run {run + 1}): {exc}"
                _set_status(task, VerificationStatus.WAITING, reason=reason)
                log.info("verifying %s deferred: %s", task.slug, reason)
                raise VerificationDeferred(reason) from exc
            except (EnvError, SandboxError, PolicyError) as exc:
                result["errors"].append(f"{name} run {run + 1}: {exc}")
            finally:
                if lease is not None:
                    with contextlib.suppress(SandboxError):
                        lease_end(lease=lease)
    ok = (
        not result["errors"]
        and len(result["oracle"]) == runs
        and all(r == 1.0 for r in result["oracle"])
        and all(r == 0.0 for r in result["noop"])
    )
    result["seconds"] = round(time.monotonic() - t0, 1)
    log.info("verified %s: %s %s in %.1f s", task.slug, "ok" if ok else "FAILED", result, result["seconds"])
    return _save(task, result, ok=ok)


def _failure_reason(result: dict[str, Any]) -> str:
    if result["errors"]:
        return "; ".join(result["errors"])
    reasons = []
    if not all(r == 1.0 for r in result["oracle"]):
        reasons.append(f"the oracle scored {result['oracle']} (it must score 1 on every run)")
    if not all(r == 0.0 for r in result["noop"]):
        reasons.append(f"doing nothing scored {result['noop']} (it must score 0 on every run)")
    return "; ".join(reasons)


def _save(task: Task, result: dict[str, Any], *, ok: bool) -> dict[str, Any]:
    proof = (task.verification or {}).get("proof")
    if proof:
        result.setdefault("proof", proof)  # a verdict keeps the person's proof it may rest on
    result["ok"] = ok
    result["status"] = VerificationStatus.PASSED if ok else VerificationStatus.FAILED
    result["reason"] = "" if ok else _failure_reason(result)
    Task.objects.filter(pk=task.pk).update(verification=result, is_published=ok)
    task.refresh_from_db()
    return result


def _set_status(task: Task, status: str, *, reason: str) -> None:
    """Record where a check stands, keeping the last verdict's rewards (and the publication) as they are."""
    with transaction.atomic():
        row = Task.objects.select_for_update(no_key=True).only("verification").get(pk=task.pk)
        verification = {**(row.verification or {}), "status": status, "reason": reason}
        verification["updated_at"] = timezone.now().isoformat()
        Task.objects.filter(pk=task.pk).update(verification=verification)
    task.refresh_from_db(fields=["verification"])


def verification_gave_up(*, task: Task, tries: int) -> None:
    """The retries ran out with no sandbox: the task stays waiting, and says how to try again."""
    reason = (task.verification or {}).get("reason", "no sandbox")
    _set_status(
        task,
        VerificationStatus.WAITING,
        reason=f"{reason} — gave up after {tries} tries; re-check it once sandboxes are up",
    )


def verification_request(*, task: Task, runs: int = 2) -> None:
    """Queue a check of `task` on the checks workers (the Tasks page's *Re-check*, `tasks_verify`)."""
    _set_status(task, VerificationStatus.QUEUED, reason="")
    transaction.on_commit(lambda: enqueue(TASK_VERIFY, task.pk, runs))
