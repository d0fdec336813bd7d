"""Episodes (one attempt at a task) and their steps."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q

from webapp.common.jobs import Job, ended_has_finished_at


class Source(models.TextChoices):
    HUMAN = "human", "Human demonstration"
    AGENT = "agent", "Agent rollout"
    MIXED = "mixed", "Interactive (human + agent)"


class Actor(models.TextChoices):
    HUMAN = "human"
    AGENT = "agent"


class Episode(Job):
    """One attempt at a task by a human, an agent or both, on one sandbox. A job (webapp.common.jobs):
    finished when it ran to its end (its reward says how the agent did), failed when it could not
    (`env_error`: the platform's fault, re-run as a new episode; a demonstration that lost its
    sandbox), cancelled when its annotator abandoned it."""

    # Each attempt at a task and seed is an episode of its own (a re-run points at the one it replaces).
    CLAIM_COUNTS_ATTEMPT = False

    task = models.ForeignKey("catalog.Task", on_delete=models.PROTECT, related_name="episodes")
    source = models.CharField(max_length=8, choices=Source.choices)
    policy_version = models.ForeignKey(
        "policies.PolicyVersion", null=True, blank=True, on_delete=models.PROTECT, related_name="episodes"
    )
    sandbox = models.ForeignKey(
        "sandboxes.Sandbox", null=True, blank=True, on_delete=models.SET_NULL, related_name="episodes"
    )
    annotator = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.PROTECT,
        related_name="episodes",
        help_text="The person who demonstrated (human and mixed episodes)",
    )
    seed = models.BigIntegerField(default=0)
    reward = models.FloatField(null=True, blank=True)
    env_error = models.BooleanField(
        default=False, help_text="Infrastructure failure: never counted as the agent's failure"
    )
    num_steps = models.PositiveIntegerField(default=0)
    # Rollouts: the batch it belongs to, and which attempt this is (an env_error is re-run as a new
    # episode pointing at the one it replaces, so nothing is counted twice).
    batch = models.ForeignKey(
        "rollouts.RolloutBatch", null=True, blank=True, on_delete=models.CASCADE, related_name="episodes"
    )
    retry_of = models.OneToOneField(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="retried_by"
    )
    attempt = models.PositiveSmallIntegerField(
        default=1, help_text="1, or which re-run of an env_error it is"
    )
    max_steps = models.PositiveSmallIntegerField(
        null=True,
        blank=True,
        help_text="Step cap of this episode (RL curation) within the task's and batch's",
    )
    queued_at = models.DateTimeField(null=True, blank=True, help_text="When its rollout was enqueued")
    stop_reason = models.CharField(max_length=20, blank=True)
    final_answer = models.TextField(blank=True)
    check_details = models.JSONField(default=list, blank=True, help_text="The checker's per-check scores")
    summary = models.TextField(blank=True, help_text="Episodic memory: what later episodes may learn from")
    # Demonstrations: the task as prepared in the sandbox (drawn parameters, instruction, setup
    # results), kept so the checker can score the final state later, in another process.
    prepared = models.JSONField(default=dict, blank=True)
    # The screen after the last action (a step keeps the screen before its action): the result a
    # reviewer judges, shown as the replay's last frame.
    final_screenshot = models.FileField(max_length=200, blank=True)
    final_screen_width = models.PositiveIntegerField(null=True, blank=True)
    final_screen_height = models.PositiveIntegerField(null=True, blank=True)
    forked_from = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="forks"
    )
    fork_step = models.PositiveIntegerField(
        null=True, blank=True, help_text="How many of the forked episode's steps were replayed"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at"]
        permissions = [
            ("view_all_episodes", "Can see every episode"),
            ("annotate", "Can record demonstrations"),
            ("run_rollouts", "Can launch agent rollouts"),
        ]
        indexes = [
            models.Index(fields=["task", "status"], name="episode_task_status_idx"),
            models.Index(fields=["status", "source"], name="episode_status_source_idx"),
            models.Index(fields=["policy_version", "status"], name="episode_policy_status_idx"),
            models.Index(fields=["annotator", "-created_at"], name="episode_annotator_idx"),
            models.Index(fields=["-created_at"], name="episode_recent_idx"),
            models.Index(fields=["batch", "status"], name="episode_batch_status_idx"),
            models.Index(fields=["status", "heartbeat_at"], name="episode_running_heartbeat_idx"),
        ]
        constraints = [
            models.CheckConstraint(
                condition=Q(reward__isnull=True) | Q(reward__gte=0.0, reward__lte=1.0),
                name="episode_reward_0_1",
            ),
            ended_has_finished_at("episode_ended_has_finished_at"),
            models.CheckConstraint(
                condition=~Q(source__in=["human", "mixed"]) | Q(annotator__isnull=False),
                name="episode_human_has_annotator",
            ),
            models.CheckConstraint(
                condition=Q(env_error=False) | Q(reward__isnull=True), name="episode_env_error_has_no_reward"
            ),
        ]

    def __str__(self) -> str:
        return f"episode {self.pk} of {self.task_id}"

    @property
    def instruction(self) -> str:
        """The instruction this episode was given (its task's template instantiated with the drawn
        parameters and setup results), or the task's template while it has not been prepared."""
        given = (self.prepared or {}).get("instruction")
        return str(given) if given else self.task.instruction


class Step(models.Model):
    """One think-act-observe step: the screen the actor saw, what it thought and what it did."""

    episode = models.ForeignKey(Episode, on_delete=models.CASCADE, related_name="steps")
    index = models.PositiveIntegerField()
    actor = models.CharField(max_length=8, choices=Actor.choices)
    # Observation: files in content-addressed storage, never blobs in rows.
    screenshot = models.FileField(max_length=200, blank=True)
    a11y_tree = models.FileField(max_length=200, blank=True, help_text="Accessibility tree or DOM snapshot")
    screen_width = models.PositiveIntegerField(null=True, blank=True)
    screen_height = models.PositiveIntegerField(null=True, blank=True)
    thought = models.TextField(blank=True)
    action = models.JSONField(help_text="Structured action (agent_core form)")
    action_text = models.TextField(blank=True, help_text="The action in the UI-TARS grammar")
    proposed_thought = models.TextField(blank=True)
    proposed_action = models.JSONField(null=True, blank=True, help_text="What a model proposed, if any")
    proposed_action_text = models.TextField(blank=True)
    invalid_reason = models.TextField(
        blank=True, help_text="Why the response was not a valid action (the step then did nothing)"
    )
    raw_output = models.TextField(blank=True, help_text="The policy's whole response")
    token_ids = models.JSONField(null=True, blank=True, help_text="Generated token ids, where known")
    logprobs = models.JSONField(null=True, blank=True, help_text="Per-token log-probabilities, where known")
    info = models.JSONField(default=dict, blank=True)
    reward = models.FloatField(null=True, blank=True)
    observed_at = models.DateTimeField()
    acted_at = models.DateTimeField(null=True, blank=True)
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["episode", "index"]
        constraints = [
            models.UniqueConstraint(fields=["episode", "index"], name="step_unique_index_per_episode"),
        ]

    def __str__(self) -> str:
        return f"step {self.index} of episode {self.episode_id}"
