"""Datasets, their immutable versions with lineage, and flywheel iterations."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from webapp.common.jobs import Job, ended_has_finished_at


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


class FlywheelIteration(Job):
    """One round of the flywheel: roll out a policy, route trajectories, write dataset versions, train.

    A job written by one worker: running while it routes (the row is the lock: at most one running
    round), finished once its dataset versions are sealed. A round that fails leaves nothing: its row
    is removed with everything it wrote (its versions are written in one transaction at the end)."""

    number = models.PositiveIntegerField(unique=True)
    policy_version = models.ForeignKey(
        "policies.PolicyVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="iterations"
    )
    stats = models.JSONField(default=dict, blank=True)
    progress = models.JSONField(default=dict, blank=True, help_text="While closing: episodes done / total")
    notes = models.TextField(blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    cutoff = models.DateTimeField(null=True, blank=True, help_text="Episodes finished up to here are routed")

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(
                fields=["status"], condition=Q(status="running"), name="flywheel_one_round_running"
            ),
            ended_has_finished_at("flywheel_ended_has_finished_at"),
        ]

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
        permissions = [
            ("export_dataset", "Can export dataset versions"),
            ("withdraw_datasetversion", "Can withdraw dataset versions"),
            ("close_flywheel_round", "Can close a flywheel round"),
        ]
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


class VersionWithdrawal(models.Model):
    """A dataset version taken out of use: no new export or pin may use it.

    The version row and its membership stay as written (versions are immutable); a withdrawal is
    a separate record of who took it out and why, so lineage that names the version still resolves.
    """

    version = models.OneToOneField(DatasetVersion, on_delete=models.PROTECT, related_name="withdrawal")
    reason = models.TextField()
    withdrawn_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    withdrawn_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return f"{self.version} withdrawn"


class DatasetExport(Job):
    """One export of a dataset version to files: a background job with progress, then a folder."""

    class Kind(models.TextChoices):
        SFT = "sft", "SFT chat (UI-TARS / Qwen-VL messages)"
        CT = "ct", "Continual pre-training (interleaved text and images)"
        AGENTNET = "agentnet", "AgentNet-style trajectories"

    class Format(models.TextChoices):
        JSONL = "jsonl", "JSONL"
        PARQUET = "parquet", "Parquet"

    version = models.ForeignKey(DatasetVersion, on_delete=models.PROTECT, related_name="exports")
    kind = models.CharField(max_length=10, choices=Kind.choices)
    fmt = models.CharField(max_length=8, choices=Format.choices)
    options = models.JSONField(default=dict, blank=True)
    total_steps = models.PositiveIntegerField(default=0)
    total_episodes = models.PositiveIntegerField(default=0)
    done_steps = models.PositiveIntegerField(default=0)
    done_episodes = models.PositiveIntegerField(default=0)
    path = models.CharField(max_length=300, blank=True, help_text="The finished folder, under EXPORTS_DIR")
    bytes = models.BigIntegerField(default=0)
    manifest = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # The database, not a check-then-insert, refuses a second concurrent export of the same thing.
            models.UniqueConstraint(
                fields=["version", "kind", "fmt"],
                condition=Q(status__in=["pending", "running"]),
                name="export_one_active_per_version_kind_fmt",
            ),
            models.CheckConstraint(condition=Q(kind__in=["sft", "ct", "agentnet"]), name="export_kind_valid"),
            models.CheckConstraint(condition=Q(fmt__in=["jsonl", "parquet"]), name="export_fmt_valid"),
            ended_has_finished_at("export_ended_has_finished_at"),
        ]
        indexes = [models.Index(fields=["status", "heartbeat_at"], name="export_status_heartbeat_idx")]

    def __str__(self) -> str:
        return f"export {self.pk} of {self.version_id} ({self.kind}, {self.fmt})"

    @property
    def percent(self) -> int:
        """Progress in whole percent of the version's steps (100 once done)."""
        if self.status == self.Status.FINISHED:
            return 100
        if not self.total_steps:
            return 0
        return min(99, int(100 * self.done_steps / self.total_steps))
