"""Dataset pages: datasets, versions (members, exports, diff, withdrawal) and the flywheel."""

from __future__ import annotations

from django.contrib import messages
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from webapp.accounts.access import page_requires
from webapp.common.text import MAX_NOTE, text_problem
from webapp.datasets.api import archive_response
from webapp.datasets.exports import EXPORT_LAYOUTS, ExportBusy, export_cancel, export_create
from webapp.datasets.models import Dataset, DatasetExport, DatasetVersion
from webapp.datasets.rounds import RoundError, round_enqueue
from webapp.datasets.selectors import (
    datasets_list,
    exports_of,
    round_closing,
    rounds_closed,
    rounds_trend,
    version_get,
    version_lineage,
    version_members,
    version_pinned_by,
    version_withdrawal,
    versions_diff,
    versions_of,
)
from webapp.datasets.services import PIN_HELP, DatasetError, version_withdraw

MEMBERS_PER_PAGE = 50


@require_GET
@page_requires("datasets.view_dataset")
def dataset_list(request: HttpRequest) -> HttpResponse:
    """Every dataset with its latest version."""
    return render(request, "datasets/dataset_list.html", {"datasets": datasets_list()})


@require_GET
@page_requires("datasets.view_dataset", "datasets.view_datasetversion")
def dataset_detail(request: HttpRequest, dataset_id: int) -> HttpResponse:
    """A dataset's versions with their lineage, and a form to compare two of them."""
    dataset = get_object_or_404(Dataset, pk=dataset_id)
    return render(
        request,
        "datasets/dataset_detail.html",
        {"dataset": dataset, "versions": versions_of(dataset=dataset)},
    )


def _version(version_id: int) -> DatasetVersion:
    version = version_get(version_id=version_id)
    if version is None:
        raise Http404(f"no dataset version {version_id}")
    return version


@require_GET
@page_requires("datasets.view_datasetversion")
def version_detail(request: HttpRequest, version_id: int) -> HttpResponse:
    """One version: lineage, members with their verdicts, exports, pins, withdrawal."""
    version = _version(version_id)
    v = request.GET.get("v")
    members = version_members(version=version, v=int(v) if v in ("0", "1") else None)
    page = Paginator(members, MEMBERS_PER_PAGE).get_page(request.GET.get("page"))
    return render(
        request,
        "datasets/version_detail.html",
        {
            "version": version,
            "withdrawal": version_withdrawal(version=version),
            "lineage": version_lineage(version=version),
            "members": page,
            "v": v,
            "exports": exports_of(version=version)[:20],
            "pinned_by": version_pinned_by(version=version)[:20],
            "pin": f"{version.dataset.name}@v{version.number}",
            "pin_help": PIN_HELP,
            "kinds": DatasetExport.Kind.choices,
            "formats": DatasetExport.Format.choices,
            "layouts": EXPORT_LAYOUTS,
            "default_kind": "ct" if version.dataset.kind == "ct" else "sft",
            "can_export": request.user.has_perm("datasets.export_dataset"),
            "can_withdraw": request.user.has_perm("datasets.withdraw_datasetversion"),
        },
    )


@require_POST
@page_requires("datasets.export_dataset")
def export_start(request: HttpRequest, version_id: int) -> HttpResponse:
    """Queue an export of this version from the page's form."""
    version = _version(version_id)
    fields = ("last_n", "coords", "shard_records", "layout")
    options = {k: request.POST[k] for k in fields if request.POST.get(k)}
    try:
        export = export_create(
            version=version,
            kind=request.POST.get("kind", ""),
            fmt=request.POST.get("fmt", ""),
            options=options,
            created_by=request.user,
        )
        messages.success(request, f"Export #{export.pk} queued: its progress shows below.")
    except ExportBusy as exc:
        messages.warning(request, str(exc))
    except DatasetError as exc:
        messages.error(request, str(exc))
    return redirect("datasets:version_detail", version_id=version.pk)


@require_GET
@page_requires("datasets.export_dataset")
def export_row(request: HttpRequest, export_id: int) -> HttpResponse:
    """One export's row (progress bar); htmx polls it until the export ends."""
    export = get_object_or_404(DatasetExport.objects.select_related("version__dataset"), pk=export_id)
    response = render(
        request, "datasets/version_detail.html#export_row", {"export": export, "can_export": True}
    )
    if request.htmx and not export.is_active:
        response.status_code = 286  # htmx: stop polling
    return response


@require_POST
@page_requires("datasets.export_dataset")
def export_stop(request: HttpRequest, export_id: int) -> HttpResponse:
    """Cancel a pending or running export."""
    export = get_object_or_404(DatasetExport, pk=export_id)
    try:
        export_cancel(export=export)
        messages.success(request, f"Export #{export.pk} cancelled.")
    except DatasetError as exc:
        messages.error(request, str(exc))
    return redirect("datasets:version_detail", version_id=export.version_id)


@require_GET
@page_requires("datasets.export_dataset")
def export_download(request: HttpRequest, export_id: int) -> HttpResponse:
    """The finished export as one tar, streamed."""
    export = get_object_or_404(DatasetExport.objects.select_related("version__dataset"), pk=export_id)
    try:
        return archive_response(export=export)
    except DatasetError as exc:
        messages.error(request, str(exc))
        return redirect("datasets:version_detail", version_id=export.version_id)


@require_POST
@page_requires("datasets.withdraw_datasetversion")
def version_withdraw_view(request: HttpRequest, version_id: int) -> HttpResponse:
    """Withdraw a version: no new export or pin may use it."""
    version = _version(version_id)
    try:
        version_withdraw(version=version, by=request.user, reason=request.POST.get("reason", ""))
        messages.success(request, f"{version} withdrawn.")
    except DatasetError as exc:
        messages.error(request, str(exc))
    return redirect("datasets:version_detail", version_id=version.pk)


@require_GET
@page_requires("datasets.view_datasetversion")
def version_diff(request: HttpRequest) -> HttpResponse:
    """Episodes added, removed and re-judged between two versions (?a=&b=)."""
    try:
        a, b = int(request.GET.get("a", "")), int(request.GET.get("b", ""))
    except ValueError:
        return render(
            request,
            "datasets/diff.html",
            {"error": "choose two versions to compare (?a=<id>&b=<id>)"},
            status=400,
        )
    va, vb = _version(a), _version(b)
    return render(request, "datasets/diff.html", {"diff": versions_diff(a=va, b=vb), "a": va, "b": vb})


@require_GET
@page_requires("datasets.view_flywheeliteration")
def flywheel(request: HttpRequest) -> HttpResponse:
    """Per round: counts by source, P(V=1) (and whether it rises), per suite and per task."""
    # The round being closed is read before the closed ones: a round that finishes between the two
    # reads is then in the second (read the other way round, it was in neither, and the page showed
    # no round and polled for none).
    closing = round_closing()
    rounds = list(rounds_closed())
    chosen = request.GET.get("round")
    selected = next((r for r in rounds if str(r.number) == chosen), rounds[-1] if rounds else None)
    context = {
        "rounds": rounds,
        "closing": closing,
        "trend": rounds_trend(rounds=rounds),
        "selected": selected,
        "can_close": request.user.has_perm("datasets.close_flywheel_round"),
    }
    if request.htmx and request.GET.get("part") == "closing":
        response = render(request, "datasets/flywheel.html#closing", context)
        if context["closing"] is None:
            response["HX-Refresh"] = "true"  # the round closed: show it
        return response
    return render(request, "datasets/flywheel.html", context)


@require_POST
@page_requires("datasets.close_flywheel_round")
def flywheel_close(request: HttpRequest) -> HttpResponse:
    """Close the next round in the background."""
    notes = request.POST.get("notes", "")
    problem = text_problem(notes, max_length=MAX_NOTE)
    if problem:
        messages.error(request, f"The notes {problem}.")
        return redirect("datasets:flywheel")
    try:
        iteration = round_enqueue(created_by=request.user, notes=notes)
        messages.success(request, f"Closing round {iteration.number}: routing every finished episode.")
    except RoundError as exc:
        messages.error(request, str(exc))
    return redirect("datasets:flywheel")
