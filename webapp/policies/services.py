"""Naming policies."""

from __future__ import annotations

from webapp.policies.models import PolicyVersion


def free_policy_name(base: str) -> str:
    """`base`, or `base-2`, `base-3`, … whichever no policy is called yet."""
    base = base[:90].strip("-") or "policy"
    name, n = base, 1
    while PolicyVersion.objects.filter(name=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name
