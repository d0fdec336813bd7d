"""What each person should do next (the home page's cards), and the rollouts running now (the wall)."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Max, Q
from django.urls import reverse
from django.utils import timezone

from webapp.catalog.models import Task
from webapp.episodes.models import Episode, Source, Step
from webapp.reviews.models import Review
from webapp.reviews.selectors import reviews_queue
from webapp.sandboxes.models import Sandbox, SandboxHost
from webapp.training.models import TrainingRun


def _n(count: int, one: str, many: str) -> str:
    return one if count == 1 else many


@dataclass(frozen=True)
class Card:
    title: str
    count: int
    text: str
    url: str
    action: str


def home_cards(*, user: AbstractBaseUser) -> list[Card]:
    """One card per thing the user can act on, in the order a person would do them."""
    return _work_cards(user) + _watch_cards(user)


def _work_cards(user: AbstractBaseUser) -> list[Card]:
    """What waits on the user's own hands: demonstrations and reviews."""
    cards: list[Card] = []
    if user.has_perm("episodes.annotate"):
        mine = Episode.objects.filter(annotator=user).count()
        published = Task.objects.filter(is_published=True).count()
        cards.append(
            Card(
                "Demonstrate a task",
                published,
                _n(published, "published task is", "published tasks are") + " ready to demonstrate",
                reverse("annotation:queue"),
                "Open your queue",
            )
        )
        sent_back = Review.objects.filter(episode__annotator=user, state=Review.State.SENT_BACK).count()
        cards.append(
            Card(
                "Your demonstrations",
                mine,
                f"recorded so far; {sent_back} sent back to you by reviewers",
                reverse("reviews:sent_back") if sent_back else reverse("episodes:episode_list"),
                "Open your episodes",
            )
        )
    if user.has_perm("reviews.review_episodes"):
        waiting = reviews_queue(reviewer=user).count()
        cards.append(
            Card(
                "Review trajectories",
                waiting,
                _n(waiting, "trajectory waits", "trajectories wait") + " in your review queue",
                reverse("reviews:queue"),
                "Open the queue",
            )
        )
    return cards


def _watch_cards(user: AbstractBaseUser) -> list[Card]:
    """What the user follows and steers: rollouts, training, sandbox hosts, people."""
    cards: list[Card] = []
    if user.has_perm("episodes.view_all_episodes"):
        running = Episode.objects.filter(status=Episode.Status.RUNNING).count()
        cards.append(
            Card(
                "Rollouts",
                running,
                _n(running, "episode is", "episodes are") + " running now",
                reverse("rollouts:batch_list")
                if user.has_perm("episodes.run_rollouts")
                else reverse("episodes:episode_list") + "?status=running",
                "Launch and watch rollouts" if user.has_perm("episodes.run_rollouts") else "Watch episodes",
            )
        )
    if user.has_perm("training.view_trainingrun"):
        training = TrainingRun.objects.filter(status=TrainingRun.Status.RUNNING).count()
        cards.append(
            Card(
                "Training",
                training,
                _n(training, "training run is", "training runs are") + " running",
                reverse("training:run_list"),
                "Follow runs",
            )
        )
    if user.has_perm("sandboxes.view_sandbox"):
        now = timezone.now()
        alive = sum(1 for h in SandboxHost.objects.all() if h.is_alive(now=now))
        cards.append(
            Card(
                "Sandbox hosts",
                alive,
                "hosts are heartbeating",
                reverse("sandboxes:overview"),
                "See sandboxes",
            )
        )
    if user.is_superuser:  # type: ignore[attr-defined]
        roleless = get_user_model().objects.filter(groups=None, is_superuser=False, is_active=True).count()
        cards.append(
            Card(
                "People",
                roleless,
                _n(roleless, "active user has", "active users have") + " no role yet",
                reverse("admin:auth_user_changelist"),
                "Manage users",
            )
        )
    return cards


# --- the wall of running rollouts ------------------------------------------------------------------

WALL_LIMIT = 60


@dataclass(frozen=True)
class RunningRollout:
    """A running agent (or interactive) episode with its latest step."""

    episode: Episode
    step: Step | None
    live: bool  # its sandbox is up, so the tile can show the screen itself

    def as_dict(self) -> dict[str, object]:
        """The JSON form the API returns."""
        e, s = self.episode, self.step
        return {
            "episode": e.pk,
            "url": reverse("episodes:episode_detail", args=[e.pk]),
            "task": e.task.slug,
            "task_title": e.task.title,
            "source": e.source,
            "policy": e.policy_version.name if e.policy_version else None,
            "step": e.num_steps,
            "max_steps": e.task.max_steps,
            "sandbox": e.sandbox_id if self.live else None,
            "thought": s.thought if s else "",
            "action": s.action_text if s else "",
            "thumbnail": (
                reverse("episodes:step_thumbnail", args=[e.pk, s.index]) if s and s.screenshot else None
            ),
            "started_at": e.started_at.isoformat() if e.started_at else None,
        }


def rollouts_running(*, limit: int = WALL_LIMIT) -> list[RunningRollout]:
    """Running agent and interactive episodes, oldest first, each with its latest step."""
    episodes = list(
        Episode.objects.filter(status=Episode.Status.RUNNING, source__in=[Source.AGENT, Source.MIXED])
        .select_related("task", "policy_version", "sandbox")
        .annotate(last_index=Max("steps__index"))
        .order_by("started_at", "pk")[:limit]
    )
    wanted = Q(pk__in=[])
    for e in episodes:
        if e.last_index is not None:
            wanted |= Q(episode_id=e.pk, index=e.last_index)
    latest = {
        s.episode_id: s
        for s in Step.objects.filter(wanted).only(
            "episode_id", "index", "thought", "action_text", "screenshot"
        )
    }
    gone = (Sandbox.State.STOPPED, Sandbox.State.STOPPING, Sandbox.State.UNHEALTHY)
    return [
        RunningRollout(
            episode=e, step=latest.get(e.pk), live=e.sandbox is not None and e.sandbox.state not in gone
        )
        for e in episodes
    ]
