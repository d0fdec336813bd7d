"""Parameter interpolation of local policies into a new policy version (a merge), requested by an admin.

The request checks everything that can be checked from the configs at once (weights, architectures,
declared bases; for LoRA adapters, their base directory and shape: an adapter merges only with adapters
of the same base) and refuses a mismatch naming it; the tensors are averaged on a worker (`datasets`
queue: a training worker may be busy for hours), into a directory under the var dir that appears whole
or not at all. The merged policy keeps the first source's config and records where it came from.
"""

from __future__ import annotations

import logging
import os
import shutil
import socket
from datetime import timedelta
from pathlib import Path

from django.conf import settings
from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils import timezone
from django.utils.text import slugify

from agent_core.rl.interpolate import InterpolationError
from agent_core.training.adapter_merge import check_models_mergeable, interpolate_models
from webapp.common.queue import POLICY_MERGE, enqueue_or_note
from webapp.policies.models import PolicyVersion
from webapp.policies.services import free_policy_name
from webapp.training.models import PolicyMerge
from webapp.training.services import TrainingRunError

log = logging.getLogger(__name__)

MERGED_DIR = "policies/merged"
"""Where merged models live, relative to the var dir."""
RECLAIM_AFTER = timedelta(minutes=30)
"""A merge left running this long by a worker that died is taken again by the next delivery."""


def _model_dir(policy: PolicyVersion) -> Path:
    if policy.backend != PolicyVersion.Backend.LOCAL:
        raise TrainingRunError(
            f"policy {policy.name} is a {policy.backend} policy: only local models can be merged", "sources"
        )
    path = policy.model_dir()
    if path is None or not path.is_dir():
        raise TrainingRunError(f"policy {policy.name} has no model directory on disk ({path})", "sources")
    return path


def _check_sources(sources: list[tuple[PolicyVersion, float]]) -> None:
    """The policies can be merged with these weights (TrainingRunError naming sources or weights)."""
    if len(sources) < 2:
        raise TrainingRunError("a merge needs at least two policies", "sources")
    names = [p.name for p, _ in sources]
    if len(set(names)) != len(names):
        raise TrainingRunError("a policy appears twice in the merge", "sources")
    paths = [_model_dir(p) for p, _ in sources]
    weights = [float(w) for _, w in sources]
    try:
        check_models_mergeable(paths, weights)
    except InterpolationError as exc:
        # The message names paths; say which policy each is.
        msg = str(exc)
        for policy, path in zip((p for p, _ in sources), paths, strict=True):
            msg = msg.replace(str(path), f"policy {policy.name}")
        raise TrainingRunError(msg, "weights" if "weight" in msg else "sources") from None


def policy_merge_request(
    *, sources: list[tuple[PolicyVersion, float]], name: str | None = None, by: AbstractBaseUser
) -> PolicyMerge:
    """Check a merge of `sources` (policy, weight) and queue it; a mismatch raises TrainingRunError
    naming every input at fault (the sources and weights, and the name)."""
    errors: list[tuple[str | None, str]] = []
    names = [p.name for p, _ in sources]
    try:
        _check_sources(sources)
    except TrainingRunError as exc:
        errors += exc.errors
    wanted = (name or "").strip()
    if wanted:
        if slugify(wanted) != wanted or len(wanted) > 100:
            errors.append(
                ("name", f"{wanted!r} is not a slug (lowercase letters, digits, '-', '_'; up to 100)")
            )
        else:
            taken = PolicyMerge.objects.filter(
                name=wanted, status__in=[PolicyMerge.Status.PENDING, PolicyMerge.Status.RUNNING]
            ).exists()
            if taken or PolicyVersion.objects.filter(name=wanted).exists():
                errors.append(("name", f"a policy called {wanted!r} exists already or is being made"))
    if errors:
        raise TrainingRunError.of(errors)
    if not wanted:
        wanted = free_policy_name(slugify("merge-" + "-".join(names))[:80])
    merge = PolicyMerge.objects.create(
        name=wanted,
        sources=[{"policy": p.pk, "name": p.name, "weight": w} for p, w in sources],
        created_by=by,
    )
    transaction.on_commit(lambda: _enqueue(merge.pk))
    return merge


def _enqueue(merge_id: int) -> None:
    # The broker is down: the merge says so instead of waiting forever.
    enqueue_or_note(POLICY_MERGE, merge_id, note=lambda why: _fail(merge_id, f"{why}; ask again later"))


def _fail(merge_id: int, message: str) -> None:
    PolicyMerge.end(merge_id, PolicyMerge.Status.FAILED, error=message[:4000], whence=PolicyMerge.ACTIVE)


def _claim(merge_id: int) -> PolicyMerge | None:
    # Pending, or running under a worker that died RECLAIM_AFTER ago (a merge does not heartbeat:
    # its claim is its last sign of life).
    return PolicyMerge.claim(
        merge_id, worker=f"{socket.gethostname()}:{os.getpid()}", stale_after=RECLAIM_AFTER
    )


def policy_merge_execute(*, merge_id: int) -> PolicyMerge | None:
    """Average the sources' weights into a new local policy version (on a worker)."""
    merge = _claim(merge_id)
    if merge is None:
        return None
    try:
        by_id = {p.pk: p for p in PolicyVersion.objects.filter(pk__in=[s["policy"] for s in merge.sources])}
        missing = [s["name"] for s in merge.sources if s["policy"] not in by_id]
        if missing:
            raise TrainingRunError(f"policy {', '.join(missing)} no longer exists", "sources")
        sources = [by_id[s["policy"]] for s in merge.sources]
        paths = [_model_dir(p) for p in sources]
        weights = [float(s["weight"]) for s in merge.sources]
        relative = f"{MERGED_DIR}/{merge.name}-{merge.pk}"
        out = Path(settings.VAR_DIR) / relative
        if out.exists():  # a worker that died after writing it, before recording it
            shutil.rmtree(out)
        interpolate_models(paths, weights, out)
        lineage = {
            "merged_from": [{"policy": p.name, "weight": w} for p, w in zip(sources, weights, strict=True)],
            "merge": merge.pk,
            "merged_by": merge.created_by.get_username() if merge.created_by else None,
        }

        def make(name: str) -> PolicyVersion:
            return PolicyVersion.objects.create(
                name=name,
                backend=PolicyVersion.Backend.LOCAL,
                model_name=relative,
                config=dict(sources[0].config or {}),
                lineage=lineage,
            )

        with transaction.atomic():
            try:
                with transaction.atomic():
                    policy = make(merge.name)
            except IntegrityError:  # the name was taken while it ran
                policy = make(free_policy_name(merge.name))
            merge.status, merge.policy = PolicyMerge.Status.FINISHED, policy
            merge.finished_at = timezone.now()
            merge.save(update_fields=["status", "policy", "finished_at"])
        log.info("merge %d made policy %s from %s", merge.pk, policy.name, lineage["merged_from"])
        return merge
    except (TrainingRunError, InterpolationError, OSError) as exc:
        log.warning("merge %d failed: %s", merge.pk, exc)
        _fail(merge.pk, str(exc))
    except Exception as exc:
        log.exception("merge %d failed", merge.pk)
        _fail(merge.pk, f"{type(exc).__name__}: {exc}")
    merge.refresh_from_db()
    return merge
