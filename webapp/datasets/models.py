"""Datasets, their immutable versions with lineage, and flywheel iterations."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class ImmutableVersionError(Exception):
    """A sealed dataset version was asked to change."""


class Dataset(models.Model):
    """A named dataset of one kind; its content lives in its versions."""

    class Kind(models.TextChoices):
        SFT = "sft", "Supervised fine-tuning"
        CT = "ct", "Continual pre-training"
        RL = "rl", "Reinforcement learning"

    name = models.SlugField(max_length=100, unique=True)
    kind = models.CharField(max_length=4, choices=Kind.choices)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=["sft", "ct", "rl"]), name="dataset_kind_valid")
        ]

    def __str__(self) -> str:
        return self.name


class FlywheelIteration(models.Model):
    """One round of the flywheel: roll out a policy, route trajectories, write dataset versions, train."""

    class Status(models.TextChoices):
        OPEN = "open"
        CLOSED = "closed"

    number = models.PositiveIntegerField(unique=True)
    policy_version = models.ForeignKey(
        "training.PolicyVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="iterations"
    )
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.OPEN)
    stats = models.JSONField(default=dict, blank=True)
    notes = models.TextField(blank=True)
    started_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-number"]

    def __str__(self) -> str:
        return f"round {self.number}"


class DatasetVersion(models.Model):
    """An immutable snapshot of a dataset's membership, with the version it grew from.

    Membership is written once, in the same transaction that creates the version, and then
    sealed: DatasetMembership refuses to change for a sealed version.
    """

    dataset = models.ForeignKey(Dataset, on_delete=models.PROTECT, related_name="versions")
    number = models.PositiveIntegerField()
    parent = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.PROTECT, related_name="children"
    )
    iteration = models.ForeignKey(
        FlywheelIteration, null=True, blank=True, on_delete=models.PROTECT, related_name="dataset_versions"
    )
    episodes = models.ManyToManyField(
        "episodes.Episode", through="DatasetMembership", related_name="dataset_versions"
    )
    num_episodes = models.PositiveIntegerField(default=0)
    num_steps = models.PositiveIntegerField(default=0)
    lineage = models.JSONField(default=dict, blank=True, help_text="Policy versions, reviews, annotators")
    notes = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    sealed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["dataset", "-number"]
        permissions = [("export_dataset", "Can export dataset versions")]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "number"], name="datasetversion_unique_number"),
            models.CheckConstraint(condition=Q(number__gte=1), name="datasetversion_number_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.dataset.name}@v{self.number}"

    def save(self, *args: object, **kwargs: object) -> None:
        # One-row invariant: a sealed version's content never changes.
        if self.pk is not None:
            before = DatasetVersion.objects.filter(pk=self.pk).values_list("sealed_at", flat=True).first()
            if before is not None:
                raise ImmutableVersionError(f"{self} is sealed and cannot change")
        super().save(*args, **kwargs)  # type: ignore[arg-type]

    def delete(self, *args: object, **kwargs: object) -> tuple[int, dict[str, int]]:
        if self.is_sealed:
            raise ImmutableVersionError(f"{self} is sealed and cannot be deleted")
        return super().delete(*args, **kwargs)  # type: ignore[arg-type]

    @property
    def is_sealed(self) -> bool:
        return self.sealed_at is not None


class DatasetMembership(models.Model):
    """One episode in one dataset version."""

    version = models.ForeignKey(DatasetVersion, on_delete=models.PROTECT, related_name="memberships")
    episode = models.ForeignKey("episodes.Episode", on_delete=models.PROTECT, related_name="memberships")
    validator = models.JSONField(default=dict, blank=True, help_text="V(s) and the reasons behind it")

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["version", "episode"], name="membership_unique"),
        ]

    def __str__(self) -> str:
        return f"episode {self.episode_id} in version {self.version_id}"

    def save(self, *args: object, **kwargs: object) -> None:
        if DatasetVersion.objects.filter(pk=self.version_id, sealed_at__isnull=False).exists():
            raise ImmutableVersionError(f"dataset version {self.version_id} is sealed")
        super().save(*args, **kwargs)  # type: ignore[arg-type]

    def delete(self, *args: object, **kwargs: object) -> tuple[int, dict[str, int]]:
        if DatasetVersion.objects.filter(pk=self.version_id, sealed_at__isnull=False).exists():
            raise ImmutableVersionError(f"dataset version {self.version_id} is sealed")
        return super().delete(*args, **kwargs)  # type: ignore[arg-type]
