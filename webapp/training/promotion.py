"""Promotion: a training run's checkpoint becomes a policy version that rollouts and annotation use.

A checkpoint is full weights or, from a LoRA run, an adapter of the run's base model. From a local base,
the policy is a local one whose model directory is the checkpoint's (LocalPolicy loads an adapter on its
base); from a base the platform's policy servers serve, it is served too: an adapter is hot-loaded into
the running servers of that base at their next heartbeat, full weights are rolled onto them one server
at a time (policies.rolling). Either way it joins the base's line, so batches that follow the line take
it up at their next episode once it is ready. The directory must still be on disk, and an adapter's base
with it; once promoted, the run's keep_checkpoints pruning leaves it alone (checkpoint_keep).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.utils.text import slugify

from webapp.policies.models import PolicyVersion
from webapp.policies.selectors import line_of, var_stored
from webapp.policies.services import free_policy_name
from webapp.training.checkpoint_keep import promoted_keep, promoted_release
from webapp.training.hooks import log_append
from webapp.training.model_dirs import adapter_lineage, checkpoint_problem
from webapp.training.models import Checkpoint
from webapp.training.services import TrainingRunError


def _served_fields(base: PolicyVersion, name: str, path: Path) -> dict[str, Any]:
    """A checkpoint of a run on a served policy stays served: an adapter is hot-loaded by the servers of
    the base's weights; full weights become a base of their own, rolled onto the line's servers."""
    stored = var_stored(path)
    lora = adapter_lineage(path).get("lora_adapter", False)
    base_id = str((base.serving or {}).get("base") or base.served_model_id())
    return {
        "backend": PolicyVersion.Backend.OPENAI,
        "endpoint_url": "",
        "model_name": name,
        "serving": {"base": base_id if lora else name, "kind": "lora" if lora else "base", "path": stored},
    }


def checkpoint_promote(
    *, checkpoint: Checkpoint, name: str | None = None, by: AbstractBaseUser
) -> PolicyVersion:
    """A local policy version rollouts can use, made from `checkpoint` (once per checkpoint)."""
    existing = PolicyVersion.objects.filter(checkpoint=checkpoint).first()
    if existing is not None:
        raise TrainingRunError(f"this checkpoint is already policy {existing.name}", "checkpoint")
    run = checkpoint.run
    path = run.path(checkpoint.path)
    if problem := checkpoint_problem(path):
        raise TrainingRunError(
            f"checkpoint step {checkpoint.step} cannot be promoted: {problem}", "checkpoint"
        )
    base = run.base_policy
    wanted = (name or "").strip()
    if wanted:
        if slugify(wanted) != wanted or len(wanted) > 100:
            raise TrainingRunError(
                f"{wanted!r} is not a slug (lowercase letters, digits, '-', '_'; up to 100)", "name"
            )
        if PolicyVersion.objects.filter(name=wanted).exists():
            raise TrainingRunError(f"a policy called {wanted!r} exists already", "name")
    else:
        wanted = free_policy_name(slugify(f"{run.name}-step-{checkpoint.step}"))
    lineage = {
        "run": run.pk,
        "run_name": run.name,
        "algorithm": run.algorithm,
        "step": checkpoint.step,
        "base_policy": base.name if base else None,
        "dataset_version": str(run.dataset_version) if run.dataset_version_id else None,
        "promoted_by": by.get_username(),
        # Rollouts that follow the base's line move to it (rollouts.policy_pick).
        **({"line": line_of(base)} if base else {}),
        **adapter_lineage(path),
    }
    fields = _served_fields(base, wanted, path) if base is not None and base.is_platform_served() else {}
    try:
        # Never pruned from now on (checkpoint_keep); a run still training may be pruning right now.
        promoted_keep(path=path, policy_name=wanted)
    except FileNotFoundError:
        problem = checkpoint_problem(path) or f"its directory {path} is gone (pruned by keep_checkpoints)"
        raise TrainingRunError(
            f"checkpoint step {checkpoint.step} cannot be promoted: {problem}", "checkpoint"
        ) from None
    try:
        with transaction.atomic():
            policy = PolicyVersion.objects.create(
                name=wanted,
                checkpoint=checkpoint,
                config=dict(base.config or {}) if base else {},
                lineage=lineage,
                **({"backend": PolicyVersion.Backend.LOCAL} | fields),
            )
    except Exception as exc:
        if not PolicyVersion.objects.filter(checkpoint=checkpoint).exists():
            promoted_release(path=path)
        if not isinstance(exc, IntegrityError):
            raise
        # promoted (or the name taken) by someone else at the same moment
        existing = PolicyVersion.objects.filter(checkpoint=checkpoint).first()
        if existing is not None:
            raise TrainingRunError(
                f"this checkpoint is already policy {existing.name}", "checkpoint"
            ) from None
        raise TrainingRunError(f"a policy called {wanted!r} exists already", "name") from None
    log_append(
        run, f"checkpoint step {checkpoint.step} promoted to policy {policy.name} by {by.get_username()}"
    )
    return policy
