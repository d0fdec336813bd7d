"""Annotation work: tasks assigned to annotators, and who controls each live sandbox."""

from __future__ import annotations

from django.conf import settings
from django.db import models


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
