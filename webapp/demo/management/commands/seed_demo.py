"""manage.py seed_demo: the demo users (one per role), the built-in task suites, baseline policies and
the tiny local policy (so training can be launched from the UI at once). Idempotent.

Credentials are generated on the first run, kept in var/demo-credentials.json (mode 0600) and
printed on every run, so `make run` can always tell you how to log in.
"""

from __future__ import annotations

import io
import json
import os
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from agent_core.suites import suite_names
from webapp.accounts.roles import Role
from webapp.accounts.services import roles_sync, user_create
from webapp.annotation.models import Assignment
from webapp.annotation.services import assignment_create
from webapp.catalog.models import Task
from webapp.catalog.services import suite_load
from webapp.env import private_dir
from webapp.policies.models import PolicyVersion

DEMO_USERS = {
    "admin": [Role.ADMIN],
    "annotator": [Role.ANNOTATOR],
    "reviewer": [Role.REVIEWER],
    "researcher": [Role.RESEARCHER],
}


# The local policy a fresh install trains from (`manage.py tiny_policy`; about 10 s, once).
DEMO_LOCAL_POLICY = "tiny-base"
DEMO_ASSIGNMENTS = ("desktop/terminal/count-lines", "desktop/editor/append-line", "miniwob/click-button")


class Command(BaseCommand):
    help = "Seed demo users, suites, tasks and baseline policies (idempotent); print the credentials."

    def handle(self, *args: Any, **opts: Any) -> None:
        roles_sync()
        creds_path = Path(settings.VAR_DIR) / "demo-credentials.json"
        creds: dict[str, str] = json.loads(creds_path.read_text()) if creds_path.exists() else {}
        User = get_user_model()
        with transaction.atomic():
            for username, roles in DEMO_USERS.items():
                if username in creds and User.objects.filter(username=username).exists():
                    continue
                creds[username] = secrets.token_urlsafe(12)
                user_create(username=username, password=creds[username], roles=roles, update=True)
            for name, backend in (
                ("random-baseline", "random"),
                ("scripted-oracle", "oracle"),
                ("do-nothing", "noop"),
                ("human", "human"),
            ):
                PolicyVersion.objects.get_or_create(name=name, defaults={"backend": backend})
        # The built-in suites, unpublished until `tasks_verify` has seen their oracles pass.
        for name in suite_names():
            suite, _, _ = suite_load(name=name)
            self.stdout.write(f"Suite {name}: {suite.tasks.count()} tasks")
        # A local policy to train from; built after the suites, whose instructions its tokenizer reads.
        if not PolicyVersion.objects.filter(name=DEMO_LOCAL_POLICY).exists():
            try:
                call_command("tiny_policy", "--name", DEMO_LOCAL_POLICY, stdout=io.StringIO())
            except CommandError as exc:
                self.stderr.write(f"No local policy to train from: {exc}")
        if PolicyVersion.objects.filter(name=DEMO_LOCAL_POLICY).exists():
            self.stdout.write(f"Local policy {DEMO_LOCAL_POLICY}: training can start from it")
        # A few tasks in the demo annotator's queue, so the annotation page has work on it.
        annotator = User.objects.get(username="annotator")
        if not Assignment.objects.filter(annotator=annotator).exists():
            for task in Task.objects.filter(slug__in=DEMO_ASSIGNMENTS):
                assignment_create(task=task, annotator=annotator, note="demo assignment")
        # Written private from the first byte (0600, then renamed over the old file): never readable
        # by others, not even between a write and a chmod.
        private_dir(creds_path.parent)
        tmp = creds_path.with_name(f".{creds_path.name}.tmp")
        tmp.unlink(missing_ok=True)
        with os.fdopen(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "w") as f:
            f.write(json.dumps(creds, indent=2))
        os.replace(tmp, creds_path)
        self.stdout.write("Demo accounts (also in var/demo-credentials.json):")
        for username, roles in DEMO_USERS.items():
            self.stdout.write(f"  {username:<11} {creds[username]:<20} {', '.join(r.value for r in roles)}")
