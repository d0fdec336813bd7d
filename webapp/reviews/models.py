"""Reviews of trajectories: a state machine with history, per-step labels and corrections."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q


class Review(models.Model):
    """One reviewer's judgement of one episode."""

    class State(models.TextChoices):
        ASSIGNED = "assigned"
        IN_PROGRESS = "in_progress"
        ACCEPTED = "accepted"
        REJECTED = "rejected"
        SENT_BACK = "sent_back"

    # The allowed moves; anything else is refused by review_transition().
    TRANSITIONS: dict[str, frozenset[str]] = {
        State.ASSIGNED: frozenset({State.IN_PROGRESS, State.ACCEPTED, State.REJECTED, State.SENT_BACK}),
        State.IN_PROGRESS: frozenset({State.ACCEPTED, State.REJECTED, State.SENT_BACK}),
        State.SENT_BACK: frozenset({State.ASSIGNED}),
        State.ACCEPTED: frozenset(),
        State.REJECTED: frozenset(),
    }

    episode = models.ForeignKey("episodes.Episode", on_delete=models.CASCADE, related_name="reviews")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="reviews")
    state = models.CharField(max_length=12, choices=State.choices, default=State.ASSIGNED)
    quality = models.PositiveSmallIntegerField(null=True, blank=True, help_text="1–5, with an accept")
    reject_reason = models.TextField(blank=True)
    comment = models.TextField(blank=True)
    first_error_step = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [("review_episodes", "Can review trajectories")]
        indexes = [models.Index(fields=["reviewer", "state"], name="review_queue_idx")]
        constraints = [
            models.UniqueConstraint(fields=["episode", "reviewer"], name="review_one_per_reviewer"),
            models.CheckConstraint(
                condition=Q(quality__isnull=True) | Q(quality__gte=1, quality__lte=5),
                name="review_quality_1_5",
            ),
            models.CheckConstraint(
                condition=~Q(state="rejected") | ~Q(reject_reason=""), name="review_reject_has_reason"
            ),
            models.CheckConstraint(
                condition=~Q(state__in=["accepted", "rejected"]) | Q(decided_at__isnull=False),
                name="review_decided_has_time",
            ),
        ]

    def __str__(self) -> str:
        return f"review {self.pk} of episode {self.episode_id} ({self.state})"

    def can_move_to(self, state: str) -> bool:
        """Whether the state machine allows going from the current state to `state`."""
        return state in self.TRANSITIONS.get(self.state, frozenset())


class ReviewEvent(models.Model):
    """One move of a review's state machine: the history a page shows."""

    review = models.ForeignKey(Review, on_delete=models.CASCADE, related_name="events")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    from_state = models.CharField(max_length=12, blank=True)
    to_state = models.CharField(max_length=12)
    comment = models.TextField(blank=True)
    at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["review", "at", "pk"]

    def __str__(self) -> str:
        return f"{self.from_state or '∅'} → {self.to_state}"


class StepLabel(models.Model):
    """A reviewer's label of one step and/or a correction of it."""

    class Label(models.TextChoices):
        CORRECT = "correct"
        REDUNDANT = "redundant"
        WRONG = "wrong"

    review = models.ForeignKey(Review, on_delete=models.CASCADE, related_name="labels")
    step = models.ForeignKey("episodes.Step", on_delete=models.CASCADE, related_name="labels")
    # Blank: not labelled, only corrected (a correction never labels a step; the reviewer does).
    label = models.CharField(max_length=10, choices=Label.choices, blank=True)
    note = models.TextField(blank=True)
    corrected_thought = models.TextField(blank=True)
    corrected_action = models.JSONField(null=True, blank=True)
    corrected_action_text = models.TextField(blank=True)

    class Meta:
        ordering = ["review", "step__index"]
        constraints = [models.UniqueConstraint(fields=["review", "step"], name="steplabel_one_per_step")]

    def __str__(self) -> str:
        return f"{self.label} on step {self.step_id}"
