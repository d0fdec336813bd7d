"""Helpers for calling the API in tests."""

from __future__ import annotations

import json
from typing import Any

from django.contrib.auth.models import AbstractBaseUser
from django.test import Client

from webapp.accounts.services import api_token_create

API = "/api/v1"


def bearer_client(user: AbstractBaseUser) -> Client:
    """A Client that sends a fresh API token of `user` on every request (no session)."""
    _, raw = api_token_create(user=user, name="tests")
    return Client(headers={"Authorization": f"Bearer {raw}"})


def send(client: Client, method: str, path: str, body: Any = None) -> Any:
    """Call `path` under the API with a JSON body (if any) and return the response."""
    kwargs: dict[str, Any] = {}
    if body is not None:
        kwargs = {
            "data": body if isinstance(body, str) else json.dumps(body),
            "content_type": "application/json",
        }
    return getattr(client, method.lower())(API + path, **kwargs)


def task_body(**overrides: Any) -> dict[str, Any]:
    """A valid POST /tasks body."""
    body: dict[str, Any] = {
        "slug": "miniwob/enter-text",
        "title": "Enter text",
        "instruction": "Type hello into the box.",
        "platform": "browser",
        "env_profile": "browser",
        "spec": {
            "format": "flywheel-task/1",
            "id": "miniwob/enter-text",
            "instruction": "Type hello into the box.",
            "platform": "browser",
            "profile": "browser",
            "checker": {
                "checks": [{"probe": {"op": "answer"}, "metric": "exact_match", "expected": "hello"}]
            },
        },
        "max_steps": 10,
        "max_seconds": 120,
        "suites": ["miniwob"],
    }
    body.update(overrides)
    if "slug" in overrides and "spec" not in overrides:
        body["spec"] = {**body["spec"], "id": body["slug"]}  # the two must agree
    return body
