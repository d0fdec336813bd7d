"""Short-lived signed tickets that let one browser session open one live stream of one sandbox.

The page asks for a ticket over a CSRF-checked POST; the WebSocket presents it in its query string.
A ticket names the user, a hash of their session key, the sandbox, the mode and the transport, so a
leaked URL is useless to anyone else, in another session, for another sandbox or after a minute; and
it opens one socket only, so it is useless once used.
Rights are checked again when the socket connects: they may have been lost since the ticket was made.
"""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.core import signing
from django.core.cache import cache
from django.core.exceptions import PermissionDenied

from webapp.sandboxes.models import Sandbox
from webapp.sandboxes.selectors import CONTROL, VIEW, sandbox_access

SALT = "webapp.sandboxes.live-ticket"
MODES = (VIEW, CONTROL)
TRANSPORTS = ("vnc", "webrtc", "screencast")


class TicketError(Exception):
    """A ticket that does not open this stream; `reason` says why (logged, not shown to strangers)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(frozen=True)
class TicketClaims:
    user_id: int
    sandbox_id: int
    mode: str
    transport: str
    issued_at: float


def _session_hash(session_key: str | None) -> str:
    return hashlib.sha256((session_key or "").encode()).hexdigest()[:32]


def ticket_issue(*, user: Any, session_key: str | None, sandbox: Sandbox, mode: str, transport: str) -> str:
    """A signed ticket for `user`'s session; PermissionDenied if `mode` exceeds their access."""
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}; valid modes: {', '.join(MODES)}")
    if transport not in TRANSPORTS:
        raise ValueError(f"unknown transport {transport!r}; valid transports: {', '.join(TRANSPORTS)}")
    if not session_key:
        raise PermissionDenied("live tickets are tied to a browser session")
    access = sandbox_access(user=user, sandbox=sandbox)
    if access is None or (mode == CONTROL and access != CONTROL):
        raise PermissionDenied(f"you may not {mode} this sandbox")
    payload = {
        "u": user.pk,
        "s": _session_hash(session_key),
        "b": sandbox.pk,
        "m": mode,
        "t": transport,
        "i": round(time.time(), 3),
        "n": secrets.token_urlsafe(9),  # two tickets asked for at once are still two tickets
    }
    return signing.dumps(payload, salt=SALT, compress=False)


def _spend(ticket: str) -> None:
    """Mark `ticket` used, atomically in the cache every web process shares; TicketError if it was.

    The mark outlives the ticket, so a ticket cannot be replayed once its mark expires either.
    """
    key = f"live-ticket:{hashlib.sha256(ticket.encode()).hexdigest()[:40]}"
    if not cache.add(key, 1, timeout=settings.LIVE_TICKET_SECONDS + 60):
        raise TicketError("already used")


def ticket_check(
    *, ticket: str, user: Any, session_key: str | None, sandbox_id: int, transport: str
) -> TicketClaims:
    """The claims of a valid ticket for this user, session, sandbox and transport; else TicketError.

    A ticket opens one socket: checking it spends it (a reconnecting page asks for a new one).
    """
    if not ticket:
        raise TicketError("no ticket")
    try:
        data = signing.loads(ticket, salt=SALT, max_age=settings.LIVE_TICKET_SECONDS)
    except signing.SignatureExpired:
        raise TicketError("expired")
    except signing.BadSignature:
        raise TicketError("bad signature")
    if user is None or not user.is_authenticated or data.get("u") != user.pk:
        raise TicketError("issued to another user")
    if not session_key or data.get("s") != _session_hash(session_key):
        raise TicketError("issued to another session")
    if data.get("b") != sandbox_id:
        raise TicketError("issued for another sandbox")
    if data.get("t") != transport:
        raise TicketError("issued for another transport")
    sandbox = Sandbox.objects.filter(pk=sandbox_id).first()
    if sandbox is None:
        raise TicketError("the sandbox is gone")
    access = sandbox_access(user=user, sandbox=sandbox)
    if access is None:
        raise TicketError("no longer allowed to see this sandbox")
    if data["m"] == CONTROL and access != CONTROL:
        raise TicketError("no longer allowed to control this sandbox")
    _spend(ticket)
    return TicketClaims(
        user_id=user.pk, sandbox_id=sandbox_id, mode=data["m"], transport=transport, issued_at=data["i"]
    )
