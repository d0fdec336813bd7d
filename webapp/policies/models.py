"""PolicyVersion: one policy rollouts, annotation and training can name."""

from __future__ import annotations

from pathlib import Path

from django.conf import settings
from django.db import models
from django.db.models import Q


class PolicyVersion(models.Model):
    """A policy rollouts and interactive annotation can use: a checkpoint, an endpoint, or a baseline."""

    class Backend(models.TextChoices):
        OPENAI = "openai", "OpenAI-compatible endpoint (vLLM)"
        LOCAL = "local", "Local transformers model"
        ORACLE = "oracle", "Scripted oracle"
        RANDOM = "random", "Random baseline"
        NOOP = "noop", "Do nothing"
        HUMAN = "human", "Human"

    name = models.SlugField(max_length=100, unique=True)
    backend = models.CharField(max_length=8, choices=Backend.choices)
    checkpoint = models.OneToOneField(
        "training.Checkpoint", null=True, blank=True, on_delete=models.PROTECT, related_name="policy_version"
    )
    endpoint_url = models.URLField(max_length=300, blank=True)
    model_name = models.CharField(
        max_length=200,
        blank=True,
        help_text="Served model name (openai); for a local policy without a checkpoint, its model "
        "directory (absolute, or relative to the var dir)",
    )
    config = models.JSONField(default=dict, blank=True)
    lineage = models.JSONField(
        default=dict, blank=True, help_text="Where it came from: training run, step, base policy"
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "training_policyversion"  # made by the training app before policies had an app
        ordering = ["-created_at"]
        constraints = [
            models.CheckConstraint(
                condition=~Q(backend="openai") | ~Q(endpoint_url=""), name="policy_openai_has_endpoint"
            ),
            models.CheckConstraint(
                condition=~Q(backend="local") | Q(checkpoint__isnull=False) | ~Q(model_name=""),
                name="policy_local_has_checkpoint",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def model_dir(self) -> Path | None:
        """A local policy's model directory (its checkpoint's, else model_name), resolved under VAR_DIR."""
        if self.backend != self.Backend.LOCAL:
            return None
        raw = self.checkpoint.path if self.checkpoint is not None else self.model_name
        if not raw:
            return None
        path = Path(raw)
        return path if path.is_absolute() else Path(settings.VAR_DIR) / path
