"""Writes for datasets: versions are created whole and sealed in one transaction."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.db.models import Max, Sum
from django.utils import timezone

from webapp.datasets.models import Dataset, DatasetMembership, DatasetVersion, FlywheelIteration
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
) -> DatasetVersion:
    """The next version of `dataset` holding exactly `episodes`, sealed before the transaction ends."""
    if parent is not None and parent.dataset_id != dataset.pk:
        raise ValueError("the parent version belongs to another dataset")
    # Lock the dataset row so two concurrent writers cannot take the same version number.
    Dataset.objects.select_for_update().filter(pk=dataset.pk).first()
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
    }
    version.sealed_at = timezone.now()
    version.save()
    return version
