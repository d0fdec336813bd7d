"""Rolling full-weight updates: which server of a line restarts on the line's newest weights, and when.

A server runs the weights of one version (a served base: `serving.kind` "base"). When a newer active
full-weight version of the same line exists (a promoted full checkpoint), the servers move to it one at
a time: a server is granted the restart only while no other server of the line is starting, and while
another one still serves, so that some server always answers (a line with one server restarts it
anyway: its rollouts wait for it, ROLLOUT_POLICY_WAIT_SECONDS). Rollouts that follow the line move to
the new version once a restarted server serves it (rollouts.policy_pick).
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from webapp.policies.models import PolicyServer, PolicyVersion
from webapp.policies.selectors import line_of, var_path

log = logging.getLogger(__name__)


def _bases(**filters: object) -> list[PolicyVersion]:
    return list(
        PolicyVersion.objects.filter(
            backend=PolicyVersion.Backend.OPENAI, serving__kind="base", **filters
        ).order_by("-created_at", "-pk")
    )


def weights_grant(*, server_id: int) -> dict[str, str] | None:
    """{"name", "path"} of the weights the server should restart on now, or None (stay)."""
    server = PolicyServer.objects.get(pk=server_id)
    if server.status != PolicyServer.Status.ONLINE:
        return None
    running = _bases(serving__base=server.base_model)
    if not running:
        return None
    line = line_of(running[0])
    in_line = [v for v in _bases() if line_of(v) == line or v.name == line]
    target = next((v for v in in_line if v.is_active), None)
    if (
        target is None
        or target.pk == running[0].pk
        or (target.serving or {}).get("base") == server.base_model
    ):
        return None
    if in_line.index(target) > in_line.index(running[0]):
        return None  # the newest active is older than what it runs: nothing to move to
    path = (target.serving or {}).get("path")
    if not isinstance(path, str) or not path:
        return None
    line_bases = {str((v.serving or {}).get("base")) for v in in_line}
    cutoff = timezone.now() - timedelta(seconds=settings.POLICY_SERVER_GRACE_S)
    with transaction.atomic():
        # Every server of the line, locked in one order: two heartbeats cannot both take the turn.
        peers = list(
            PolicyServer.objects.select_for_update()
            .filter(base_model__in=line_bases, last_heartbeat_at__gte=cutoff)
            .exclude(status=PolicyServer.Status.OFFLINE)
            .order_by("pk")
        )
        others = [p for p in peers if p.pk != server.pk]
        if any(p.status == PolicyServer.Status.STARTING for p in others):
            return None  # one at a time
        if others and not any(p.status == PolicyServer.Status.ONLINE for p in others):
            return None
        # Taken now, so the next heartbeat of a peer sees this server's turn.
        PolicyServer.objects.filter(pk=server.pk).update(status=PolicyServer.Status.STARTING)
    log.info("rolling update: %s restarts on %s (%s)", server.name, target.served_model_id(), path)
    return {"name": target.served_model_id(), "path": var_path(path)}
