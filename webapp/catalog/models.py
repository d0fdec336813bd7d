"""Tasks and task suites."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import F, Q

from webapp.common.text import MAX_INSTRUCTION, MAX_NAME, text_problem

_profile_sources: list[Callable[[], Iterable[str]]] = []


def profiles_source_add(source: Callable[[], Iterable[str]]) -> None:
    """Add where the sandbox profiles a task may name come from. The sandboxes app (a floor above,
    which knows the hosts) adds its own when Django starts, so the catalog does not import it."""
    if source not in _profile_sources:
        _profile_sources.append(source)


def profiles_known() -> list[str]:
    """Every sandbox profile a task may name now (empty until a source is added)."""
    return sorted({name for source in _profile_sources for name in source()})


class Platform(models.TextChoices):
    DESKTOP = "desktop", "Linux desktop"
    BROWSER = "browser", "Browser"
    ANDROID = "android", "Android"


class VerificationStatus(models.TextChoices):
    """Where a task's publication check stands (`Task.verification["status"]`)."""

    UNCHECKED = "unchecked", "never checked"
    QUEUED = "queued", "check queued"
    RUNNING = "running", "checking"
    WAITING = "waiting", "waiting for a sandbox"
    PASSED = "passed", "passed"
    FAILED = "failed", "failed"


TASK_SLUG = RegexValidator(
    r"^[a-z0-9][a-z0-9_.-]*(/[a-z0-9][a-z0-9_.-]*)*$",
    "Use lowercase letters, digits, '-', '_', '.', in '/'-separated parts (e.g. miniwob/click-button).",
)


class TaskSuite(models.Model):
    """A named collection of tasks (MiniWoB++, the desktop suite, an imported OSWorld set)."""

    slug = models.SlugField(max_length=100, unique=True)
    name = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.name


class Task(models.Model):
    """One task: an instruction on an environment profile, its setup, checker and limits.

    `spec` holds the versioned task document (seeded parameters, setup steps, checker); the
    columns beside it are what pages filter and sort on.
    """

    slug = models.CharField(max_length=200, unique=True, validators=[TASK_SLUG])
    title = models.CharField(max_length=200)
    instruction = models.TextField()
    platform = models.CharField(max_length=16, choices=Platform.choices)
    env_profile = models.CharField(max_length=100, help_text="Sandbox profile the task runs on")
    spec = models.JSONField(default=dict, blank=True)
    spec_version = models.PositiveIntegerField(default=1)
    max_steps = models.PositiveIntegerField(default=15)
    max_seconds = models.PositiveIntegerField(default=300)
    suites = models.ManyToManyField(TaskSuite, related_name="tasks", blank=True)
    is_published = models.BooleanField(
        default=False, help_text="Published only after its oracle scores 1 and a do-nothing run scores 0"
    )
    verification = models.JSONField(
        default=dict,
        blank=True,
        help_text="The last publication check: oracle and do-nothing rewards per run",
    )
    family = models.CharField(
        max_length=200, blank=True, help_text="Episodic memory is shared within a family"
    )
    # Difficulty statistics, rolled up from finished episodes by a beat task.
    attempts = models.PositiveIntegerField(default=0)
    successes = models.PositiveIntegerField(default=0)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        indexes = [models.Index(fields=["platform", "is_published"])]
        constraints = [
            models.CheckConstraint(condition=Q(max_steps__gte=1), name="task_max_steps_positive"),
            models.CheckConstraint(condition=Q(max_seconds__gte=1), name="task_max_seconds_positive"),
            models.CheckConstraint(
                condition=Q(successes__lte=F("attempts")), name="task_successes_le_attempts"
            ),
            models.CheckConstraint(condition=Q(platform__in=Platform.values), name="task_platform_valid"),
        ]

    def __str__(self) -> str:
        return self.slug

    def clean(self) -> None:
        """Refuse now what would only fail at rollout: a spec that does not parse, a profile no host
        serves, a spec that disagrees with the row (its id with the slug, its platform and profile),
        text too long or holding NUL (each names its field)."""
        from agent_core.tasks.spec import TaskSpecError, parse_task

        errors: dict[str, str] = {}
        for name, limit in (("slug", 200), ("title", MAX_NAME), ("instruction", MAX_INSTRUCTION)):
            problem = text_problem(getattr(self, name), max_length=limit)
            if problem:
                errors[name] = f"{name} {problem}"
        known = profiles_known()
        if self.env_profile not in known:
            errors["env_profile"] = (
                f"no sandbox host serves profile {self.env_profile!r}; known profiles: {', '.join(known)}"
            )
        if self.spec:
            try:
                parsed = parse_task(self.spec)
            except TaskSpecError as exc:
                errors["spec"] = f"invalid task spec: {exc}"
            else:
                if parsed.id != self.slug and "slug" not in errors and TASK_SLUG.regex.match(self.slug):
                    # Suites, oracles and OSWorld's re-import find a task by its spec's id.
                    errors["spec"] = f"the spec's id {parsed.id!r} and the slug {self.slug!r} must agree"
                elif parsed.profile not in known:
                    errors["spec"] = f"the spec's profile {parsed.profile!r} is served by no sandbox host"
                if parsed.platform != self.platform:
                    errors.setdefault("platform", f"the spec's platform is {parsed.platform!r}")
                if parsed.profile != self.env_profile:
                    errors.setdefault("env_profile", f"the spec's profile is {parsed.profile!r}")
        if errors:
            raise ValidationError(errors)

    @property
    def verification_status(self) -> str:
        """A VerificationStatus value (checks recorded before statuses existed: from their verdict)."""
        data = self.verification or {}
        if "status" in data:
            return str(data["status"])
        if "ok" in data:
            return VerificationStatus.PASSED if data["ok"] else VerificationStatus.FAILED
        return VerificationStatus.UNCHECKED

    @property
    def verification_label(self) -> str:
        status = self.verification_status
        return VerificationStatus(status).label if status in VerificationStatus.values else status

    @property
    def verification_reason(self) -> str:
        """Why the last check failed, or why it is waiting ("" when there is nothing to say)."""
        data = self.verification or {}
        if "reason" in data:
            return str(data["reason"])
        return "; ".join(map(str, data.get("errors", [])))

    @property
    def success_rate(self) -> float | None:
        return self.successes / self.attempts if self.attempts else None
