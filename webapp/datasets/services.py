"""Writes for datasets: versions are created whole and sealed in one transaction."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Max, Sum
from django.utils import timezone

from webapp.common.text import MAX_NOTE, text_problem
from webapp.datasets.models import (
    Dataset,
    DatasetMembership,
    DatasetVersion,
    FlywheelIteration,
    VersionWithdrawal,
)
from webapp.episodes.models import Episode


@transaction.atomic
def dataset_version_create(
    *,
    dataset: Dataset,
    episodes: Iterable[Episode],
    validator: Mapping[int, dict[str, Any]] | None = None,
    parent: DatasetVersion | None = None,
    iteration: FlywheelIteration | None = None,
    created_by: AbstractBaseUser | None = None,
    notes: str = "",
    extra_lineage: Mapping[str, Any] | None = None,
) -> DatasetVersion:
    """The next version of `dataset` holding exactly `episodes`, sealed before the transaction ends."""
    if parent is not None and parent.dataset_id != dataset.pk:
        raise ValueError("the parent version belongs to another dataset")
    # Lock the dataset row so two concurrent writers cannot take the same version number.
    Dataset.objects.select_for_update(no_key=True).filter(pk=dataset.pk).first()
    number = (dataset.versions.aggregate(n=Max("number"))["n"] or 0) + 1
    episode_list = list({e.pk: e for e in episodes}.values())
    version = DatasetVersion.objects.create(
        dataset=dataset, number=number, parent=parent, iteration=iteration, created_by=created_by, notes=notes
    )
    validator = validator or {}
    DatasetMembership.objects.bulk_create(
        [
            DatasetMembership(version=version, episode=e, validator=validator.get(e.pk, {}))
            for e in episode_list
        ]
    )
    episode_ids = [e.pk for e in episode_list]
    lineage_rows = Episode.objects.filter(pk__in=episode_ids)
    version.num_episodes = len(episode_list)
    version.num_steps = lineage_rows.aggregate(n=Sum("num_steps"))["n"] or 0
    version.lineage = {
        "policy_versions": sorted({p for p in lineage_rows.values_list("policy_version_id", flat=True) if p}),
        "annotators": sorted({a for a in lineage_rows.values_list("annotator_id", flat=True) if a}),
        "reviews": sorted(lineage_rows.values_list("reviews__pk", flat=True).exclude(reviews__pk=None)),
        "parent": parent.pk if parent else None,
        "sources": dict(sorted(Counter(lineage_rows.values_list("source", flat=True)).items())),
        **(extra_lineage or {}),
    }
    version.sealed_at = timezone.now()
    version.save()
    return version


class DatasetError(Exception):
    """A dataset operation was refused; the message says why and what to do."""


class VersionGone(DatasetError):
    """The version does not exist or was withdrawn."""


# <dataset name>@v<number>, or @latest (resolved to a number when pinned, so a pin never drifts).
PIN_RE = re.compile(r"^(?P<name>[-a-zA-Z0-9_]{1,100})@(?:v(?P<number>[0-9]{1,9})|(?P<latest>latest))$")
PIN_HELP = "write <dataset>@v<number> (for example flywheel-sft@v3) or <dataset>@latest"


def version_usable(*, version: DatasetVersion) -> DatasetVersion:
    """`version` if it may still be exported or pinned; VersionGone if it was withdrawn."""
    withdrawal = VersionWithdrawal.objects.filter(version=version).first()
    if withdrawal is not None:
        raise VersionGone(
            f"{version} was withdrawn on {withdrawal.withdrawn_at:%Y-%m-%d %H:%M}: {withdrawal.reason}"
        )
    return version


def version_pin_resolve(*, pin: str) -> DatasetVersion:
    """The dataset version a pin names, refused with a message that says what is wrong with it."""
    text = (pin or "").strip()
    match = PIN_RE.match(text)
    if match is None:
        raise DatasetError(f"{text!r} is not a dataset pin: {PIN_HELP}")
    dataset = Dataset.objects.filter(name=match["name"]).first()
    if dataset is None:
        known = ", ".join(Dataset.objects.order_by("name").values_list("name", flat=True)[:20]) or "none yet"
        raise DatasetError(f"there is no dataset called {match['name']!r} (datasets: {known})")
    versions = dataset.versions.filter(sealed_at__isnull=False)
    if match["latest"]:
        version = versions.exclude(withdrawal__isnull=False).order_by("-number").first()
        if version is None:
            raise DatasetError(f"{dataset.name} has no usable version yet")
    else:
        version = versions.filter(number=int(match["number"])).first()
        if version is None:
            numbers = list(versions.order_by("number").values_list("number", flat=True))
            have = f"v{numbers[0]}–v{numbers[-1]}" if numbers else "no versions yet"
            raise VersionGone(f"{dataset.name} has no version {match['number']} ({have})")
    version_usable(version=version)
    if version.num_episodes == 0:
        raise DatasetError(f"{version} has no episodes: there is nothing to train on")
    return version


@transaction.atomic
def version_withdraw(*, version: DatasetVersion, by: AbstractBaseUser, reason: str) -> VersionWithdrawal:
    """Take a version out of use; refused while a training run that has not finished is pinned to it."""
    reason = (reason or "").strip()
    if not reason:
        raise DatasetError("say why the version is withdrawn")
    problem = text_problem(reason, max_length=MAX_NOTE)
    if problem:
        raise DatasetError(f"the reason {problem}")
    if VersionWithdrawal.objects.filter(version=version).exists():
        raise DatasetError(f"{version} is already withdrawn")
    # Training (a floor above) pins runs to versions; read through the relation rather than import it.
    busy = version.training_runs.filter(status__in=["pending", "running"]).values_list("pk", flat=True)
    if busy:
        runs = ", ".join(f"#{pk}" for pk in busy)
        raise DatasetError(f"{version} is pinned by training run(s) {runs} that have not finished")
    return VersionWithdrawal.objects.create(version=version, reason=reason, withdrawn_by=by)
