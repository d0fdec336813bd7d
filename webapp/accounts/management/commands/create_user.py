"""manage.py create_user NAME --role annotator [--role reviewer] [--password-env VAR] [--update]"""

from __future__ import annotations

import os
import secrets
from typing import Any

from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.accounts.roles import Role, parse_role
from webapp.accounts.services import user_create


class Command(BaseCommand):
    help = "Create a user with roles. Without --password-env a strong password is generated and printed."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument(
            "--role",
            action="append",
            default=[],
            help=f"one of {', '.join(r.value for r in Role)}; repeatable",
        )
        parser.add_argument("--email", default="")
        parser.add_argument("--password-env", help="read the password from this environment variable")
        parser.add_argument(
            "--update", action="store_true", help="reset an existing user's password and roles"
        )

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            roles = [parse_role(name) for name in opts["role"]]
        except ValueError as exc:
            raise CommandError(str(exc))
        if opts["password_env"]:
            password = os.environ.get(opts["password_env"], "")
            if not password:
                raise CommandError(f"environment variable {opts['password_env']} is empty or unset")
            try:
                validate_password(password)
            except ValidationError as exc:
                raise CommandError("weak password: " + " ".join(exc.messages))
            generated = False
        else:
            password = secrets.token_urlsafe(12)
            generated = True
        try:
            user = user_create(
                username=opts["username"],
                password=password,
                roles=roles,
                email=opts["email"],
                update=opts["update"],
            )
        except ValueError as exc:
            raise CommandError(str(exc))
        role_text = ", ".join(r.value for r in roles) or "no role"
        self.stdout.write(f"user {user.get_username()} ({role_text})")
        if generated:
            self.stdout.write(f"password: {password}")
