"""The control token of a live sandbox: request, release, force-take; who holds it drives the sandbox.

One token per sandbox. A demonstration starts with the annotator holding it; a rollout starts with
the agent holding it. A person who may control the sandbox takes a free or agent-held token at once
(the agent pauses before its next turn); a token another person holds is only asked for (the holder
sees the request and releases with one click) unless an administrator forces it.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction
from django.utils import timezone

from webapp.common.live import broadcast, episode_group
from webapp.episodes.models import Episode
from webapp.sandboxes.models import ControlToken, Sandbox

log = logging.getLogger(__name__)


class ControlError(PermissionError):
    """The user may not take or give back control of this sandbox."""


def may_force(user: AbstractBaseUser) -> bool:
    """Administrators (those who may change sandboxes) may take control from another person."""
    return bool(user.is_active and user.has_perm("sandboxes.change_sandbox"))


def control_allowed(*, user: AbstractBaseUser, sandbox: Sandbox, episode: Episode | None) -> bool:
    """Whether `user` may hold this sandbox's control: its episode's annotator, or who may control it."""
    if not user.is_active:
        return False
    if episode is not None and episode.annotator_id == user.pk and user.has_perm("episodes.annotate"):
        return True
    from webapp.sandboxes.selectors import sandbox_access

    return sandbox_access(user=user, sandbox=sandbox) == "control"


def control_offered(*, user: AbstractBaseUser, episode: Episode) -> dict[str, bool]:
    """The control buttons `user` gets on `episode`'s page: none unless it is live on a sandbox and
    they may hold its control; force-take only for those who may force (the same rules as above)."""
    if episode.is_done or episode.sandbox is None:
        return {"take": False, "force": False}
    take = control_allowed(user=user, sandbox=episode.sandbox, episode=episode)
    return {"take": take, "force": take and may_force(user)}


def control_state(token: ControlToken | None) -> dict[str, Any]:
    """The JSON pages and sockets show: who holds control, who asks for it."""
    if token is None:
        return {"holder": "", "user": None, "username": "", "requested_by": None, "requested_by_name": ""}
    return {
        "holder": token.holder,
        "user": token.user_id,
        "username": token.user.get_username() if token.user_id and token.user else "",
        "requested_by": token.requested_by_id,
        "requested_by_name": token.requested_by.get_username() if token.requested_by else "",
    }


def control_of(*, sandbox_id: int) -> ControlToken | None:
    """The sandbox's token with its users, or None if nobody ever held it."""
    return ControlToken.objects.select_related("user", "requested_by").filter(sandbox_id=sandbox_id).first()


def _publish(token: ControlToken) -> None:
    if token.episode_id is None:
        return
    token = control_of(sandbox_id=token.sandbox_id) or token
    payload = {"episode": token.episode_id, "sandbox": token.sandbox_id, **control_state(token)}
    episode_id = token.episode_id
    transaction.on_commit(
        lambda: broadcast(episode_group(episode_id), "control.changed", payload), robust=True
    )


@transaction.atomic
def control_assign(
    *, sandbox: Sandbox, episode: Episode, holder: str, user: AbstractBaseUser | None = None
) -> ControlToken:
    """Give a freshly leased sandbox's token to its episode's actor (agent, or the annotator)."""
    if holder == ControlToken.Holder.HUMAN and user is None:
        raise ValueError("a person holding control must be named")
    token, _ = ControlToken.objects.select_for_update(no_key=True).get_or_create(sandbox=sandbox)
    token.episode, token.holder, token.user = episode, holder, user if holder == "human" else None
    token.requested_by, token.requested_at = None, None
    token.save()
    _publish(token)
    return token


@transaction.atomic
def control_request(*, sandbox: Sandbox, user: AbstractBaseUser, force: bool = False) -> ControlToken:
    """Take control if it is free or held by the agent; otherwise ask the holder (or force: admins)."""
    token, _ = ControlToken.objects.select_for_update(no_key=True).get_or_create(sandbox=sandbox)
    if token.holder == ControlToken.Holder.HUMAN and token.user_id == user.pk:
        return token
    if not control_allowed(user=user, sandbox=sandbox, episode=token.episode):
        raise ControlError("you may watch this sandbox but not control it")
    if token.holder == ControlToken.Holder.HUMAN and not force:
        token.requested_by, token.requested_at = user, timezone.now()
        token.save()
        log.info("sandbox %s: %s asks %s for control", sandbox.pk, user, token.user_id)
    else:
        if force and not may_force(user):
            raise ControlError("only administrators may take control from another person")
        previous = token.holder or "nobody"
        token.holder, token.user = ControlToken.Holder.HUMAN, user
        token.requested_by, token.requested_at = None, None
        token.save()
        log.info("sandbox %s: control %s → %s%s", sandbox.pk, previous, user, " (forced)" if force else "")
    _publish(token)
    return token


@transaction.atomic
def control_release(*, sandbox: Sandbox, user: AbstractBaseUser) -> ControlToken:
    """The holder hands back: to a running rollout's agent, else to whoever asked, else nobody."""
    token = ControlToken.objects.select_for_update(no_key=True).filter(sandbox=sandbox).first()
    if token is None or token.holder != ControlToken.Holder.HUMAN or token.user_id != user.pk:
        if token is not None and may_force(user) and token.holder == ControlToken.Holder.HUMAN:
            pass  # an administrator may hand back on someone's behalf
        else:
            raise ControlError("you do not hold control of this sandbox")
    episode = token.episode
    if episode is not None and episode.source != "human" and episode.status == Episode.Status.RUNNING:
        token.holder, token.user = ControlToken.Holder.AGENT, None
    elif token.requested_by_id is not None:
        token.holder, token.user = ControlToken.Holder.HUMAN, token.requested_by
    else:
        token.holder, token.user = ControlToken.Holder.NOBODY, None
    token.requested_by, token.requested_at = None, None
    token.save()
    _publish(token)
    return token


def control_clear(*, sandbox_id: int) -> None:
    """The sandbox's episode ended: nobody holds it any more."""
    with transaction.atomic():
        token = ControlToken.objects.select_for_update(no_key=True).filter(sandbox_id=sandbox_id).first()
        if token is None:
            return
        token.holder, token.user, token.requested_by, token.requested_at = "", None, None, None
        token.save()
        _publish(token)


def control_held_by(*, sandbox_id: int, user: AbstractBaseUser) -> bool:
    """Whether `user` holds the sandbox's token now."""
    return ControlToken.objects.filter(
        sandbox_id=sandbox_id, holder=ControlToken.Holder.HUMAN, user_id=user.pk
    ).exists()


def control_agent_gate(
    *, sandbox_id: int, poll_s: float = 0.5, keep_alive: Callable[[], None] | None = None
) -> Callable[[], bool]:
    """A gate for the agent loop: blocks while a person holds the sandbox, True if one did."""

    def gate() -> bool:
        waited = False
        while ControlToken.objects.filter(sandbox_id=sandbox_id, holder=ControlToken.Holder.HUMAN).exists():
            if not waited:
                log.info("sandbox %s: the agent waits while a person has control", sandbox_id)
            waited = True
            if keep_alive is not None:
                keep_alive()
            time.sleep(poll_s)
        return waited

    return gate
