"""Annotation work: tasks assigned to annotators, and who controls each live sandbox."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Assignment(models.Model):
    """A task put in an annotator's queue, to demonstrate once."""

    class State(models.TextChoices):
        OPEN = "open"
        IN_PROGRESS = "in_progress"
        DONE = "done"
        CANCELLED = "cancelled"

    task = models.ForeignKey("catalog.Task", on_delete=models.CASCADE, related_name="assignments")
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="annotation_assignments"
    )
    assigned_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    state = models.CharField(max_length=12, choices=State.choices, default=State.OPEN)
    episode = models.ForeignKey(
        "episodes.Episode", null=True, blank=True, on_delete=models.SET_NULL, related_name="assignments"
    )
    note = models.TextField(blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["created_at"]
        indexes = [models.Index(fields=["annotator", "state"], name="assignment_queue_idx")]

    def __str__(self) -> str:
        return f"{self.task_id} for {self.annotator_id} ({self.state})"


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
        constraints = [
            models.CheckConstraint(
                condition=~Q(holder="human") | Q(user__isnull=False), name="control_human_has_user"
            ),
        ]

    def __str__(self) -> str:
        who = self.user_id if self.holder == self.Holder.HUMAN else self.holder or "nobody"
        return f"control of {self.sandbox_id}: {who}"
