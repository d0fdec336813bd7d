"""The sandboxes page (hosts, sandboxes, leases, errors; reset and kill) and the live screens."""

from __future__ import annotations

from urllib.parse import urlencode

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_GET, require_POST

from sandbox_workers.base import SandboxError
from webapp.accounts.access import page_requires
from webapp.sandboxes.models import Sandbox
from webapp.sandboxes.selectors import (
    CONTROL,
    VIEW,
    host_errors,
    hosts_with_counts,
    sandbox_access,
    sandboxes_list,
    sandboxes_visible_to,
)
from webapp.sandboxes.services import sandbox_admin
from webapp.sandboxes.tickets import ticket_issue


@require_GET
@page_requires("sandboxes.view_sandbox")
def overview(request: HttpRequest) -> HttpResponse:
    """Hosts, sandboxes with their holders, recent errors; htmx polls the #live fragment every 2 s."""
    now = timezone.now()
    hosts = [(h, h.is_alive(now=now)) for h in hosts_with_counts()]
    context = {
        "hosts": hosts,
        "sandboxes": sandboxes_list()[:500],
        "errors": host_errors(hosts=[h for h, _ in hosts])[:30],
        "can_control": request.user.has_perm("sandboxes.change_sandbox"),
    }
    template = "sandboxes/overview.html#live" if request.htmx else "sandboxes/overview.html"
    return render(request, template, context)


@require_POST
@page_requires("sandboxes.change_sandbox")
def control(request: HttpRequest, pk: int, action: str) -> HttpResponse:
    """Reset or kill one sandbox on its host (admins)."""
    sandbox = get_object_or_404(Sandbox.objects.select_related("host"), pk=pk)
    try:
        sandbox_admin(sandbox=sandbox, action=action)
    except (SandboxError, ValueError) as exc:
        messages.error(request, f"Could not {action} {sandbox}: {exc}")
    else:
        messages.success(request, f"{sandbox}: {action} sent to {sandbox.host.name}.")
    return redirect("sandboxes:overview")


# --- live screens ----------------------------------------------------------------------------------


def _visible_sandbox(request: HttpRequest, pk: int) -> tuple[Sandbox, str]:
    """The sandbox and the user's access to it; 404 when it does not exist or they may not see it."""
    sandbox = Sandbox.objects.select_related("host").filter(pk=pk).first()
    access = sandbox_access(user=request.user, sandbox=sandbox) if sandbox else None
    if sandbox is None or access is None:
        raise Http404("no such sandbox")
    return sandbox, access


def _transports(sandbox: Sandbox) -> list[str]:
    """The live transports this sandbox offers, best first."""
    vnc = ["vnc"] if sandbox.endpoints.get("vnc") else []
    return [*vnc, "webrtc", "screencast"]


@require_POST
@page_requires()
def ticket(request: HttpRequest, pk: int) -> JsonResponse:
    """A short-lived ticket (and the WebSocket URL carrying it) for one live stream of a sandbox."""
    sandbox, _ = _visible_sandbox(request, pk)
    mode = request.POST.get("mode", VIEW)
    transport = request.POST.get("transport", "vnc")
    try:
        value = ticket_issue(
            user=request.user,
            session_key=request.session.session_key,
            sandbox=sandbox,
            mode=mode,
            transport=transport,
        )
    except ValueError as exc:
        return JsonResponse({"error": str(exc)}, status=400)
    except PermissionDenied as exc:
        return JsonResponse({"error": str(exc)}, status=403)
    query = {"ticket": value}
    if transport in ("screencast", "webrtc") and request.POST.get("fps"):
        query["fps"] = request.POST["fps"]
    if transport == "screencast" and request.POST.get("width"):
        if not request.POST["width"].isdigit() or not 64 <= int(request.POST["width"]) <= 4096:
            return JsonResponse({"error": "width must be a whole number of pixels in [64, 4096]"}, status=400)
        query["width"] = request.POST["width"]
    body: dict[str, object] = {
        "ticket": value,
        "url": f"/ws/sandboxes/{sandbox.pk}/{transport}/?{urlencode(query)}",
        "mode": mode,
        "transport": transport,
        "expires_in": settings.LIVE_TICKET_SECONDS,
    }
    if transport == "webrtc":
        body["ice_servers"] = settings.LIVE_ICE_SERVERS
        body["connect_timeout_s"] = settings.LIVE_WEBRTC_CONNECT_S
    screen = sandbox.endpoints.get("screen")
    if isinstance(screen, dict) and {"width", "height"} <= screen.keys():
        body["screen"] = {"width": screen["width"], "height": screen["height"]}
    return JsonResponse(body)


@require_GET
@page_requires()
def live(request: HttpRequest, pk: int) -> HttpResponse:
    """The full live view of one sandbox: noVNC, WebRTC or screencast; view-only unless asked.

    Watching, the page takes the screencast by default: every viewer of a sandbox shares its one
    capture (sandbox_workers.live.fanout). Controlling, noVNC where the sandbox has it."""
    sandbox, access = _visible_sandbox(request, pk)
    transports = _transports(sandbox)
    mode = CONTROL if access == CONTROL and request.GET.get("mode") == CONTROL else VIEW
    default = transports[0] if mode == CONTROL else "screencast"
    transport = request.GET.get("transport", default)
    if transport not in transports:
        transport = default
    if transport == "screencast":
        mode = VIEW  # it carries no input
    context = {
        "sandbox": sandbox,
        "access": access,
        "transports": transports,
        "transport": transport,
        "mode": mode,
        "view_area": _view_area(sandbox),
        # Where WebRTC cannot connect, the page goes on over a WebSocket transport by itself.
        "fallback": {"transport": "vnc", "mode": CONTROL}
        if mode == CONTROL and "vnc" in transports
        else {"transport": "screencast", "mode": VIEW},
    }
    return render(request, "sandboxes/live.html", context)


def _view_area(sandbox: Sandbox) -> dict[str, int] | None:
    """The area the task now running on the sandbox draws in, if it draws in a corner (MiniWoB++)."""
    from webapp.catalog.selectors import task_view_area
    from webapp.episodes.models import Episode

    episode = Episode.objects.filter(sandbox=sandbox, status=Episode.Status.RUNNING).select_related("task")
    running = episode.order_by("-pk").first()
    return task_view_area(task=running.task) if running is not None else None


@require_GET
@page_requires()
def wall(request: HttpRequest) -> HttpResponse:
    """Live thumbnails (screencast, a few frames per second) of every sandbox the user may see."""
    sandboxes = sandboxes_visible_to(user=request.user).exclude(state=Sandbox.State.UNHEALTHY)[:60]
    return render(request, "sandboxes/wall.html", {"sandboxes": sandboxes})
