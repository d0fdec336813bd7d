"""The four roles and what each may do. Roles are auth groups bundling permissions.

Pages, API endpoints and WebSockets check permissions (capabilities), never role names, so a
deployment can hand one capability to a person without a whole role.
"""

from __future__ import annotations

from enum import StrEnum


class Role(StrEnum):
    ANNOTATOR = "annotator"
    REVIEWER = "reviewer"
    RESEARCHER = "researcher"
    ADMIN = "admin"


_VIEW_CATALOG = ["catalog.view_task", "catalog.view_tasksuite"]

ROLE_PERMISSIONS: dict[Role, list[str]] = {
    Role.ANNOTATOR: [*_VIEW_CATALOG, "episodes.annotate"],
    Role.REVIEWER: [*_VIEW_CATALOG, "reviews.review_episodes"],
    Role.RESEARCHER: [
        *_VIEW_CATALOG,
        "catalog.add_task",
        "catalog.change_task",
        "episodes.view_all_episodes",
        "episodes.run_rollouts",
        "reviews.view_review",
        "datasets.view_dataset",
        "datasets.view_datasetversion",
        "datasets.view_flywheeliteration",
        "datasets.view_datasetexport",
        "datasets.export_dataset",
        "training.view_trainingrun",
        "policies.view_policyversion",
        "policies.view_policyserver",
        "training.view_checkpoint",
        "sandboxes.view_sandboxhost",
        "sandboxes.view_sandbox",
        "sandboxes.view_lease",
        "dashboards.view_metrics",
    ],
    # Admins are superusers: every permission, plus the Django admin.
    Role.ADMIN: [],
}


def parse_role(name: str) -> Role:
    """The Role called `name`; raises ValueError listing the valid names."""
    try:
        return Role(name)
    except ValueError:
        raise ValueError(f"unknown role {name!r}; valid roles: {', '.join(r.value for r in Role)}")
