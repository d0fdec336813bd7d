"""Roles bundle exactly their permissions; the commands that create people are strict and idempotent."""

from __future__ import annotations

import io
import json

import pytest
from django.conf import settings
from django.contrib.auth import authenticate, get_user_model
from django.contrib.auth.models import Group, Permission
from django.core.management import CommandError, call_command

from webapp.accounts.roles import ROLE_PERMISSIONS, Role
from webapp.accounts.selectors import user_roles
from webapp.catalog.models import Task

pytestmark = pytest.mark.django_db


def test_every_permission_a_role_names_exists():
    # roles_sync skips permissions missing during a partial migrate, so a typo would pass silently.
    for role, names in ROLE_PERMISSIONS.items():
        for name in names:
            app_label, codename = name.split(".")
            assert Permission.objects.filter(content_type__app_label=app_label, codename=codename).exists(), (
                role,
                name,
            )


def test_role_groups_hold_exactly_their_permissions():
    for role, names in ROLE_PERMISSIONS.items():
        group = Group.objects.get(name=role.value)
        held = {
            f"{p.content_type.app_label}.{p.codename}"
            for p in group.permissions.select_related("content_type")
        }
        assert held == set(names), role


def test_roles_are_what_the_personas_hold(personas):
    assert user_roles(user=personas.annotator) == [Role.ANNOTATOR]
    assert user_roles(user=personas.admin) == [Role.ADMIN]
    assert user_roles(user=personas.outsider) == []
    assert personas.admin.is_superuser and not personas.researcher.is_staff


def test_create_user_command_makes_a_user_who_can_log_in():
    out = io.StringIO()
    call_command("create_user", "frank", "--role", "annotator", "--role", "reviewer", stdout=out)
    text = out.getvalue()
    password = text.split("password: ")[1].strip()
    user = authenticate(username="frank", password=password)
    assert user is not None
    assert user_roles(user=user) == [Role.ANNOTATOR, Role.REVIEWER]


def test_create_user_command_rejects_unknown_roles_and_duplicates(monkeypatch):
    with pytest.raises(CommandError, match="unknown role 'boss'; valid roles: annotator, reviewer"):
        call_command("create_user", "gina", "--role", "boss")
    assert not get_user_model().objects.filter(username="gina").exists()
    call_command("create_user", "gina", "--role", "annotator", stdout=io.StringIO())
    with pytest.raises(CommandError, match="already exists"):
        call_command("create_user", "gina", "--role", "admin")
    monkeypatch.setenv("GINA_PW", "123")
    with pytest.raises(CommandError, match="weak password"):
        call_command("create_user", "gina", "--update", "--password-env", "GINA_PW")
    monkeypatch.setenv("GINA_PW", "a-much-better-passphrase-42")
    call_command(
        "create_user",
        "gina",
        "--update",
        "--role",
        "admin",
        "--password-env",
        "GINA_PW",
        stdout=io.StringIO(),
    )
    assert authenticate(username="gina", password="a-much-better-passphrase-42").is_superuser


@pytest.fixture
def tiny_builds(monkeypatch, tmp_path, settings):
    """The demo's tiny policy builds, recorded (the real build is `make run`'s test); var dir in tmp."""
    from agent_core.training import tiny_policy

    settings.VAR_DIR = tmp_path
    built: list[list[str]] = []

    def build(path, *, corpus=(), seed=0):
        path.mkdir(parents=True)
        (path / "config.json").write_text("{}")
        built.append(list(corpus))
        return path

    monkeypatch.setattr(tiny_policy, "build_tiny_policy", build)
    return built


def test_seed_demo_is_idempotent_and_prints_working_credentials(tiny_builds):
    first, second = io.StringIO(), io.StringIO()
    call_command("seed_demo", stdout=first)
    n_tasks = Task.objects.count()
    call_command("seed_demo", stdout=second)
    assert first.getvalue() == second.getvalue()
    assert Task.objects.count() == n_tasks > 0
    creds_path = settings.VAR_DIR / "demo-credentials.json"
    assert creds_path.stat().st_mode & 0o777 == 0o600
    creds = json.loads(creds_path.read_text())
    for username in ("admin", "annotator", "reviewer", "researcher"):
        assert f"{username}" in first.getvalue() and creds[username] in first.getvalue()
        assert authenticate(username=username, password=creds[username]) is not None
    assert not Task.objects.filter(is_published=True).exists()  # unverified tasks are never published
    # The demo annotator finds work in their queue, once however often the command runs.
    from webapp.annotation.models import Assignment

    queued = Assignment.objects.filter(annotator__username="annotator")
    assert sorted(queued.values_list("task__slug", flat=True)) == [
        "desktop/editor/append-line",
        "desktop/terminal/count-lines",
        "miniwob/click-button",
    ]


def test_seed_demo_includes_a_local_policy_to_train_from(tiny_builds):
    from webapp.training.selectors import policies_to_train_from

    call_command("seed_demo", stdout=io.StringIO())
    assert [p.name for p in policies_to_train_from()] == ["tiny-base"]
    # Its tokenizer read the catalog's instructions, loaded before it was built; built once only.
    assert len(tiny_builds) == 1 and tiny_builds[0]
    call_command("seed_demo", stdout=io.StringIO())
    assert len(tiny_builds) == 1
