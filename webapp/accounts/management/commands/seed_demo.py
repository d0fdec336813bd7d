"""manage.py seed_demo: the demo users (one per role), task suites and baseline policies. Idempotent.

Credentials are generated on the first run, kept in var/demo-credentials.json (mode 0600) and
printed on every run, so `make run` can always tell you how to log in.
"""

from __future__ import annotations

import json
import secrets
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand
from django.db import transaction

from webapp.accounts.roles import Role
from webapp.accounts.services import roles_sync, user_create
from webapp.catalog.models import Task
from webapp.catalog.services import suite_get_or_create, task_create
from webapp.training.models import PolicyVersion

DEMO_USERS = {
    "admin": [Role.ADMIN],
    "annotator": [Role.ANNOTATOR],
    "reviewer": [Role.REVIEWER],
    "researcher": [Role.RESEARCHER],
}

# Real tasks the suites will carry; their checkers and oracles arrive with the task-suite work,
# so they are seeded unpublished.
DEMO_TASKS: list[dict[str, Any]] = [
    {
        "slug": "miniwob/click-button",
        "title": "Click the named button",
        "instruction": 'Click on the "{label}" button.',
        "platform": "browser",
        "env_profile": "miniwob",
        "suite": "miniwob",
        "spec": {"miniwob_env": "click-button", "parameters": {"seeded": True}},
        "max_steps": 5,
    },
    {
        "slug": "miniwob/enter-text",
        "title": "Type a word into the field and submit",
        "instruction": 'Enter "{text}" into the text field and press Submit.',
        "platform": "browser",
        "env_profile": "miniwob",
        "suite": "miniwob",
        "spec": {"miniwob_env": "enter-text", "parameters": {"seeded": True}},
        "max_steps": 8,
    },
    {
        "slug": "desktop/terminal-count-lines",
        "title": "Count the lines of a file in the terminal",
        "instruction": "Open a terminal, count the lines of ~/workspace/notes.txt and write the number "
        "into ~/workspace/count.txt.",
        "platform": "desktop",
        "env_profile": "xdesktop-default",
        "suite": "desktop",
        "spec": {"setup": [{"type": "write_file", "path": "notes.txt", "lines": 17}]},
        "max_steps": 15,
    },
    {
        "slug": "desktop/editor-save-greeting",
        "title": "Write a greeting in the text editor",
        "instruction": 'Open the text editor, type "hello flywheel" and save it as ~/workspace/greeting.txt.',
        "platform": "desktop",
        "env_profile": "xdesktop-default",
        "suite": "desktop",
        "spec": {"checker": {"probe": "read_file", "path": "greeting.txt", "metric": "exact_match"}},
        "max_steps": 15,
    },
]

SUITES = {
    "miniwob": ("MiniWoB++", "Web tasks from the miniwob package, run offline in Chromium."),
    "desktop": ("Linux desktop", "Terminal, editor, file manager and browser tasks on an Xvfb desktop."),
}


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
            suites = {
                slug: suite_get_or_create(slug=slug, name=n, description=d) for slug, (n, d) in SUITES.items()
            }
            for spec in DEMO_TASKS:
                if Task.objects.filter(slug=spec["slug"]).exists():
                    continue
                fields = {k: v for k, v in spec.items() if k != "suite"}
                task_create(**fields, suites=[suites[spec["suite"]]])
            for name, backend in (
                ("random-baseline", "random"),
                ("scripted-oracle", "oracle"),
                ("human", "human"),
            ):
                PolicyVersion.objects.get_or_create(name=name, defaults={"backend": backend})
        creds_path.parent.mkdir(parents=True, exist_ok=True)
        creds_path.write_text(json.dumps(creds, indent=2))
        creds_path.chmod(0o600)
        self.stdout.write("Demo accounts (also in var/demo-credentials.json):")
        for username, roles in DEMO_USERS.items():
            self.stdout.write(f"  {username:<11} {creds[username]:<20} {', '.join(r.value for r in roles)}")
