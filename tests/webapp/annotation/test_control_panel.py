"""The session page's control panel: Take control / Hand back / Force take are offered only to those who
may use them, and only while the episode is live; the socket refuses them otherwise, whatever a page
shows. The same page in a real browser: tests/e2e/test_control_panel.py."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.urls import reverse

from tests.conftest import PASSWORD, Personas
from tests.factories import make_episode
from tests.webapp.annotation.test_pages_and_socket import _talk, published_task
from webapp.accounts.services import user_create
from webapp.episodes.models import Episode
from webapp.episodes.services import episode_finish
from webapp.sandboxes.control import control_assign
from webapp.sandboxes.models import Sandbox, SandboxHost

pytestmark = pytest.mark.django_db(transaction=True)


def live_on_a_sandbox(**kwargs: Any) -> Episode:
    host = SandboxHost.objects.create(name=f"h{Sandbox.objects.count()}", api_url="http://127.0.0.1:1")
    sandbox = Sandbox.objects.create(
        host=host, external_id=f"s{host.pk}", provider="xdesktop", profile="desktop", state="leased"
    )
    episode = make_episode(task=published_task(), finish=False, **kwargs)
    Episode.objects.filter(pk=episode.pk).update(sandbox=sandbox)
    episode.refresh_from_db()
    return episode


def watcher() -> Any:
    """Someone who may watch every episode and sandbox but run no rollout: no control for them."""
    user = user_create(username="wendy", password=PASSWORD, roles=[])
    for app, codename in (("episodes", "view_all_episodes"), ("sandboxes", "view_sandbox")):
        user.user_permissions.add(Permission.objects.get(content_type__app_label=app, codename=codename))
    return user


def buttons(user: Any, episode: Episode) -> set[str]:
    client = Client()
    client.force_login(user)
    page = client.get(reverse("annotation:session", args=[episode.pk]))
    assert page.status_code == 200
    return set(re.findall(r'<button type="button" data-act="(request|release|force)"', page.content.decode()))


def test_control_buttons_are_offered_to_who_may_use_them_while_it_is_live(personas: Personas) -> None:
    rollout = live_on_a_sandbox()
    control_assign(sandbox=rollout.sandbox, episode=rollout, holder="agent")
    demo = live_on_a_sandbox(annotator=personas.annotator)
    control_assign(sandbox=demo.sandbox, episode=demo, holder="human", user=personas.annotator)
    wendy = watcher()
    assert buttons(personas.researcher, rollout) == {"request", "release"}
    assert buttons(personas.admin, rollout) == {"request", "release", "force"}
    assert buttons(wendy, rollout) == set()
    assert buttons(personas.annotator, demo) == {"request", "release"}
    assert buttons(wendy, demo) == set()
    for episode in (rollout, demo):
        episode_finish(episode=episode, reward=0.0)
        for user in (personas.admin, personas.researcher, wendy):
            assert buttons(user, episode) == set()
    assert buttons(personas.annotator, demo) == set()
    # Before its sandbox is ready there is nothing to control either.
    assert buttons(personas.admin, make_episode(task=published_task(), finish=False)) == set()


def test_the_socket_refuses_control_on_a_finished_episode_and_to_watchers(personas: Personas) -> None:
    rollout = live_on_a_sandbox()
    control_assign(sandbox=rollout.sandbox, episode=rollout, holder="agent")
    ops = [{"type": "control", "op": op} for op in ("request", "force", "release")]
    code, got = _talk(rollout.pk, watcher(), ops)
    assert code is None and got[0]["may_control"] is False
    assert [m["message"] for m in got[1:]] == ["you may watch this episode, not act on it"] * 3
    episode_finish(episode=rollout, reward=1.0)
    code, got = _talk(rollout.pk, personas.admin, ops)
    assert [m["message"] for m in got[1:]] == ["this episode has no live sandbox"] * 3
