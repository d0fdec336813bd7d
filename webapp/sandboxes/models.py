"""Sandbox hosts, the sandboxes they run, the leases that hand sandboxes out, and who controls each."""

from __future__ import annotations

from datetime import datetime

from django.conf import settings
from django.db import models
from django.db.models import Q


class SandboxHost(models.Model):
    """A machine running the sandbox host service; registers and heartbeats into the web app."""

    class Status(models.TextChoices):
        ONLINE = "online"
        DRAINING = "draining"
        OFFLINE = "offline"

    name = models.CharField(max_length=100, unique=True)
    api_url = models.URLField(max_length=300)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ONLINE)
    capacity = models.JSONField(default=dict, blank=True, help_text="Per profile: max sandboxes, min idle")
    version = models.CharField(max_length=50, blank=True)
    report = models.JSONField(
        default=dict, blank=True, help_text="The last heartbeat's counters, recent errors and lease latency"
    )
    registered_at = models.DateTimeField(auto_now_add=True)
    last_heartbeat_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def is_alive(self, *, now: datetime, grace_seconds: int = 30) -> bool:
        """Whether the host heartbeated within `grace_seconds` of `now`."""
        return (
            self.status != self.Status.OFFLINE
            and self.last_heartbeat_at is not None
            and (now - self.last_heartbeat_at).total_seconds() <= grace_seconds
        )


class Provider(models.TextChoices):
    XDESKTOP = "xdesktop", "Linux desktop"
    BROWSER = "browser", "Browser"
    ANDROID = "android", "Android"


class Sandbox(models.Model):
    """One isolated computer on a host."""

    class State(models.TextChoices):
        STARTING = "starting"
        IDLE = "idle"
        LEASED = "leased"
        RESETTING = "resetting"
        UNHEALTHY = "unhealthy"
        STOPPING = "stopping"
        STOPPED = "stopped"

    host = models.ForeignKey(SandboxHost, on_delete=models.CASCADE, related_name="sandboxes")
    external_id = models.CharField(max_length=100, help_text="The sandbox's id on its host")
    provider = models.CharField(max_length=16, choices=Provider.choices)
    profile = models.CharField(max_length=100)
    state = models.CharField(max_length=16, choices=State.choices, default=State.STARTING)
    endpoints = models.JSONField(default=dict, blank=True, help_text="Live endpoints: vnc, screencast, …")
    last_error = models.TextField(blank=True)
    latency = models.JSONField(default=dict, blank=True, help_text="Per operation: n, p50, p95 in ms")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["host", "external_id"]
        indexes = [models.Index(fields=["profile", "state"])]
        constraints = [
            models.UniqueConstraint(fields=["host", "external_id"], name="sandbox_unique_per_host"),
            models.CheckConstraint(condition=Q(provider__in=Provider.values), name="sandbox_provider_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.host.name}/{self.external_id}"


class Lease(models.Model):
    """A time-limited claim on a sandbox; renewed by heartbeats, reaped when it expires."""

    class State(models.TextChoices):
        ACTIVE = "active"
        RELEASED = "released"
        EXPIRED = "expired"
        BROKEN = "broken"

    sandbox = models.ForeignKey(Sandbox, on_delete=models.CASCADE, related_name="leases")
    external_id = models.CharField(
        max_length=64, blank=True, db_index=True, help_text="The lease's id on its host"
    )
    holder = models.CharField(max_length=200, help_text="Who holds it: 'episode:42', 'user:7', a worker id")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="leases"
    )
    state = models.CharField(max_length=16, choices=State.choices, default=State.ACTIVE)
    acquired_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    heartbeat_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-acquired_at"]
        indexes = [models.Index(fields=["state", "expires_at"], name="lease_reaper_idx")]
        constraints = [
            # A sandbox is held by at most one live lease.
            models.UniqueConstraint(
                fields=["sandbox"], condition=Q(state="active"), name="lease_one_active_per_sandbox"
            ),
            models.CheckConstraint(
                condition=Q(expires_at__gt=models.F("acquired_at")), name="lease_expires_after"
            ),
            models.CheckConstraint(
                condition=Q(state="active", ended_at__isnull=True)
                | Q(~Q(state="active"), ended_at__isnull=False),
                name="lease_ended_iff_not_active",
            ),
        ]

    def __str__(self) -> str:
        return f"lease {self.pk} on {self.sandbox_id} ({self.state})"

    def is_expired(self, *, now: datetime) -> bool:
        """Whether an active lease has run past its expiry."""
        return self.state == self.State.ACTIVE and self.expires_at <= now


class ControlToken(models.Model):
    """The one right to drive a sandbox: held by an agent, a person, or nobody.

    Input from anyone but the holder is refused; a rollout waits while a person holds it.
    """

    class Holder(models.TextChoices):
        NOBODY = "", "Nobody"
        AGENT = "agent", "Agent"
        HUMAN = "human", "Human"

    sandbox = models.OneToOneField("sandboxes.Sandbox", on_delete=models.CASCADE, related_name="control")
    episode = models.ForeignKey(
        "episodes.Episode", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    holder = models.CharField(max_length=8, choices=Holder.choices, blank=True, default="")
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    requested_at = models.DateTimeField(null=True, blank=True)
    since = models.DateTimeField(auto_now=True)

    class Meta:
        db_table = "annotation_controltoken"  # made by the annotation app before control moved here
        constraints = [
            models.CheckConstraint(
                condition=~Q(holder="human") | Q(user__isnull=False), name="control_human_has_user"
            ),
        ]

    def __str__(self) -> str:
        who = self.user_id if self.holder == self.Holder.HUMAN else self.holder or "nobody"
        return f"control of {self.sandbox_id}: {who}"
