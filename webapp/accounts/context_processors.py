"""Navigation for the logged-in person: only the sections their permissions open."""

from __future__ import annotations

from typing import Any

from django.http import HttpRequest
from django.urls import reverse

from webapp.accounts.selectors import user_roles

# (label, url name, permission needed; "" = any logged-in user)
NAV_ITEMS: list[tuple[str, str, str]] = [
    ("Home", "dashboards:home", ""),
    ("Tasks", "catalog:task_list", "catalog.view_task"),
    ("Episodes", "episodes:episode_list", ""),
    ("Annotate", "annotation:queue", "episodes.annotate"),
    ("Rollouts", "rollouts:batch_list", "episodes.run_rollouts"),
    ("Dashboards", "dashboards:rollouts", "episodes.view_all_episodes"),
    ("Review queue", "reviews:queue", "reviews.review_episodes"),
    ("Datasets", "datasets:dataset_list", "datasets.view_dataset"),
    ("Training", "training:run_list", "training.view_trainingrun"),
    ("Sandboxes", "sandboxes:overview", "sandboxes.view_sandbox"),
    ("Policy servers", "policies:servers", "policies.view_policyserver"),
    ("API tokens", "accounts:tokens", ""),
]


def navigation(request: HttpRequest) -> dict[str, Any]:
    """`nav_items` and `user_roles` for the base template."""
    user = request.user
    if not user.is_authenticated:
        return {"nav_items": [], "user_roles": []}
    items = []
    for label, url_name, perm in NAV_ITEMS:
        if perm and not user.has_perm(perm):
            continue
        if url_name == "episodes:episode_list" and not (
            user.has_perm("episodes.view_all_episodes")
            or user.has_perm("episodes.annotate")
            or user.has_perm("reviews.review_episodes")
        ):
            continue
        url = reverse(url_name)
        items.append({"label": label, "url": url, "active": request.path == url})
    return {"nav_items": items, "user_roles": [r.value for r in user_roles(user=user)]}
