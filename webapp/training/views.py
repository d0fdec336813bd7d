"""Training pages: runs with the launch form, one run (live charts, log, checkpoints), two runs compared."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_GET, require_POST

from agent_core.training.config import ConfigError, config_fields, validate_config
from webapp.accounts.access import page_requires
from webapp.catalog.models import TaskSuite
from webapp.common.params import parse_whole
from webapp.policies.models import PolicyVersion
from webapp.training.launch_checks import LaunchNotes, LaunchWarning, launch_notes
from webapp.training.merging import policy_merge_request
from webapp.training.models import Checkpoint, PolicyMerge, TrainingRun
from webapp.training.planning import LaunchPlan, launch_plan
from webapp.training.promotion import checkpoint_promote
from webapp.training.selectors import (
    METRIC_GROUPS,
    checkpoints_of,
    dataset_pins_usable,
    policies_to_train_from,
    policy_versions_active,
    run_log_tail,
    runs_compare,
    suites_to_roll_out_on,
    training_runs_list,
)
from webapp.training.services import (
    TrainingRunError,
    run_latest_checkpoint,
    training_run_launch,
    training_run_resume,
    training_run_stop,
)

LOG_LINES = 200
# Launch-form fields that are not config fields (their errors show beside them too).
FORM_FIELDS = ("algorithm", "name", "dataset", "base_policy", "suite")


def _config_inputs(
    algorithm: str,
    values: dict[str, str],
    error: TrainingRunError | None,
    warnings: dict[str, str] | None = None,
) -> list[dict[str, Any]]:
    """The config fields of `algorithm` as form inputs, with the submitted values (or defaults), each
    one's error and what a launch warning says about it."""
    errors = _errors_by_field(error)
    warnings = warnings or {}
    inputs = []
    for spec in config_fields(algorithm):
        if spec.name == "suite":
            continue  # the suite has its own select on the form
        kind = "select" if spec.choices else ("number" if spec.type in (int, float) else "text")
        inputs.append(
            {
                "name": spec.name,
                "input": f"cfg_{spec.name}",
                "kind": kind,
                "value": values.get(spec.name, "" if spec.default is None else str(spec.default)),
                "default": spec.default,
                "help": spec.help,
                "choices": spec.choices,
                "min": spec.min,
                "max": spec.max,
                "step": "1" if spec.type is int else "any",
                "error": errors.get(spec.name, ""),
                "warning": warnings.get(spec.name, ""),
            }
        )
    return inputs


def _errors_by_field(error: TrainingRunError | None) -> dict[str, str]:
    """Each field at fault → its message (every one of a refused launch, not only the first)."""
    out: dict[str, str] = {}
    for field, message in error.errors if error is not None else ():
        if field and field not in out:
            out[field] = message
    return out


def _posted_config(data: Any, algorithm: str) -> dict[str, str]:
    """The config fields of `algorithm` the form sent (cfg_<name>), as text."""
    if algorithm not in TrainingRun.Algorithm.values:
        return {}
    return {
        spec.name: data[f"cfg_{spec.name}"]
        for spec in config_fields(algorithm)
        if f"cfg_{spec.name}" in data and spec.name != "suite"
    }


def _plan_of(form: dict[str, str], config: dict[str, str], algorithm: str) -> LaunchPlan:
    """The memory plan of what the form holds (no estimate while its config is invalid)."""
    policy_id = parse_whole(form.get("base_policy", ""))
    policy = PolicyVersion.objects.filter(pk=policy_id).first() if policy_id is not None else None
    try:
        clean = validate_config(algorithm, config)
    except ConfigError as exc:
        return LaunchPlan(None, f"no estimate until the config is valid ({exc.field}: {exc.message})")
    return launch_plan(base_policy=policy, algorithm=algorithm, config=clean)


def _notes_of(form: dict[str, str], config: dict[str, str], algorithm: str) -> LaunchNotes:
    """What the form says of the run's length and the warnings to confirm (none while invalid)."""
    try:
        clean = validate_config(algorithm, config)
    except ConfigError:
        return LaunchNotes()
    return launch_notes(algorithm=algorithm, config=clean, dataset_pin=form.get("dataset", ""))


def _form_context(
    request: HttpRequest,
    *,
    form: dict[str, str] | None = None,
    config: dict[str, str] | None = None,
    error: TrainingRunError | None = None,
    unconfirmed: list[LaunchWarning] | None = None,
) -> dict[str, Any]:
    form = form or {}
    algorithm = form.get("algorithm") or TrainingRun.Algorithm.SFT
    if algorithm not in TrainingRun.Algorithm.values:
        algorithm = TrainingRun.Algorithm.SFT
    errors = _errors_by_field(error)
    field_errors = {f: errors[f] for f in FORM_FIELDS if f in errors}
    notes = _notes_of(form, config or {}, algorithm)
    config_inputs = _config_inputs(algorithm, config or {}, error, notes.by_field())
    placed = {*field_errors, *(i["name"] for i in config_inputs if i["error"])}
    return {
        "algorithms": TrainingRun.Algorithm.choices,
        "algorithm": algorithm,
        "form": form,
        "config_inputs": config_inputs,
        "error": error,
        "field_errors": field_errors,
        # What no field of the form shows beside it: said at the top.
        "other_errors": [(f, m) for f, m in (error.errors if error else []) if f not in placed],
        "base_policies": policies_to_train_from(),
        "suites": suites_to_roll_out_on(),
        "pins": dataset_pins_usable(),
        "launch_plan": _plan_of(form, config or {}, algorithm),
        "notes": notes,
        "field_warnings": notes.by_field(),
        "unconfirmed": unconfirmed or [],
    }


@require_GET
@page_requires("training.view_trainingrun")
def run_list(request: HttpRequest) -> HttpResponse:
    """Training runs, the launch form (for those who may launch) and the policy versions rollouts use."""
    can_launch = request.user.has_perm("training.launch_training")
    context: dict[str, Any] = {
        "runs": training_runs_list()[:200],
        "policies": policy_versions_active(),
        "merges": PolicyMerge.objects.select_related("policy")[:20],
        "can_launch": can_launch,
    }
    if can_launch:
        context.update(_form_context(request))
    return render(request, "training/run_list.html", context)


@require_POST
@page_requires("training.launch_training")
def policy_merge(request: HttpRequest) -> HttpResponse:
    """Merge two local policies with the weight given to the first (the second gets the rest)."""
    post = request.POST
    ids = [parse_whole(post.get("policy_a", "")), parse_whole(post.get("policy_b", ""))]
    found = {p.pk: p for p in PolicyVersion.objects.filter(pk__in=[i for i in ids if i is not None])}
    try:
        if not all(i in found for i in ids):
            raise TrainingRunError("choose two policies", "sources")
        try:
            weight = float(post.get("weight_a", ""))
        except ValueError:
            msg = "the first policy's weight must be a number from 0 to 1"
            raise TrainingRunError(msg, "weights") from None
        a, b = found[ids[0]], found[ids[1]]
        merge = policy_merge_request(
            sources=[(a, weight), (b, round(1.0 - weight, 12))], name=post.get("name", ""), by=request.user
        )
    except TrainingRunError as exc:
        messages.error(request, f"Merge refused: {exc if len(exc.errors) > 1 else exc.message}")
        return redirect("training:run_list")
    messages.success(request, f"Merge #{merge.pk} queued: it makes policy {merge.name}.")
    return redirect("training:run_list")


@require_GET
@page_requires("training.launch_training")
def launch_fields(request: HttpRequest) -> HttpResponse:
    """The launch form's per-algorithm part (htmx swaps it when the algorithm changes)."""
    context = _form_context(request, form={"algorithm": request.GET.get("algorithm", "")})
    return render(request, "training/run_list.html#algorithm_fields", context)


@require_GET
@page_requires("training.launch_training")
def launch_plan_view(request: HttpRequest) -> HttpResponse:
    """The launch form's memory plan for what it holds (htmx swaps it when a field changes)."""
    get = request.GET
    algorithm = get.get("algorithm", "")
    if algorithm not in TrainingRun.Algorithm.values:
        algorithm = TrainingRun.Algorithm.SFT
    form = {key: get.get(key, "").strip() for key in FORM_FIELDS}
    config = _posted_config(get, algorithm)
    context = {"launch_plan": _plan_of(form, config, algorithm), "notes": _notes_of(form, config, algorithm)}
    return render(request, "training/run_list.html#launch_plan", context)


@require_POST
@page_requires("training.launch_training")
def run_launch(request: HttpRequest) -> HttpResponse:
    """Launch a run from the form; a refused one comes back with the message beside the field at fault."""
    post = request.POST
    algorithm = post.get("algorithm", "")
    form = {key: post.get(key, "").strip() for key in FORM_FIELDS}
    config = _posted_config(post, algorithm)
    rl = algorithm in (TrainingRun.Algorithm.PPO, TrainingRun.Algorithm.GRPO)
    policy_id, suite_id = parse_whole(form["base_policy"]), parse_whole(form["suite"])
    policy = PolicyVersion.objects.filter(pk=policy_id).first() if policy_id is not None else None
    suite = TaskSuite.objects.filter(pk=suite_id).first() if rl and suite_id is not None else None
    # A warning (max_steps overriding the epochs asked, SFT on CT data) launches only once confirmed:
    # the *Launch anyway* button sends back the codes of the warnings it was shown.
    confirmed = [c.strip() for c in post.get("confirm", "").split(",") if c.strip()]
    unconfirmed = _notes_of(form, config, algorithm).unconfirmed(confirmed)
    if unconfirmed:
        context = {
            "runs": training_runs_list()[:200],
            "policies": policy_versions_active(),
            "can_launch": True,
            **_form_context(request, form=form, config=config, unconfirmed=unconfirmed),
        }
        return render(request, "training/run_list.html", context, status=400)
    try:
        run = training_run_launch(
            algorithm=algorithm,
            name=form["name"],
            config=config,
            created_by=request.user,
            dataset_pin=None if rl else form["dataset"],
            base_policy=policy,
            suite=suite,
        )
    except TrainingRunError as exc:
        context = {
            "runs": training_runs_list()[:200],
            "policies": policy_versions_active(),
            "can_launch": True,
            **_form_context(request, form=form, config=config, error=exc),
        }
        return render(request, "training/run_list.html", context, status=400)
    messages.success(request, f"Run #{run.pk} {run.name} queued on the training workers.")
    return redirect("training:run_detail", run_id=run.pk)


def _run(run_id: int) -> TrainingRun:
    run = training_runs_list().filter(pk=run_id).first()
    if run is None:
        raise Http404(f"no training run {run_id}")
    return run


def _live_context(request: HttpRequest, run: TrainingRun) -> dict[str, Any]:
    can_launch = request.user.has_perm("training.launch_training")
    return {
        "run": run,
        "checkpoints": checkpoints_of(run=run),
        "can_launch": can_launch,
        "can_resume": can_launch
        and run.status in (TrainingRun.Status.CANCELLED, TrainingRun.Status.FAILED)
        and run_latest_checkpoint(run) is not None,
    }


@require_GET
@page_requires("training.view_trainingrun", "training.view_checkpoint")
def run_detail(request: HttpRequest, run_id: int) -> HttpResponse:
    """One run: status, config, checkpoints, live charts and the log's tail."""
    run = _run(run_id)
    context = {
        **_live_context(request, run),
        "config_rows": sorted(run.config.items()),
        "log_lines": run_log_tail(run=run, lines=LOG_LINES),
        "groups": METRIC_GROUPS,
    }
    return render(request, "training/run_detail.html", context)


@require_GET
@page_requires("training.view_trainingrun", "training.view_checkpoint")
def run_status(request: HttpRequest, run_id: int) -> HttpResponse:
    """The run's status, actions and checkpoints; htmx polls it while the run is active."""
    run = _run(run_id)
    response = render(request, "training/run_detail.html#status", _live_context(request, run))
    if request.htmx and not run.is_active:
        response.status_code = 286  # htmx: stop polling
    return response


@require_GET
@page_requires("training.view_trainingrun")
def run_log(request: HttpRequest, run_id: int) -> HttpResponse:
    """The last lines of the run's log; htmx polls it every 2 s while the run is active."""
    run = _run(run_id)
    context = {"run": run, "log_lines": run_log_tail(run=run, lines=LOG_LINES)}
    response = render(request, "training/run_detail.html#log", context)
    if request.htmx and not run.is_active:
        response.status_code = 286
    return response


@require_POST
@page_requires("training.launch_training")
def run_stop(request: HttpRequest, run_id: int) -> HttpResponse:
    """Ask the run to stop (it saves a checkpoint first)."""
    run = get_object_or_404(TrainingRun, pk=run_id)
    try:
        run = training_run_stop(run=run, by=request.user)
        messages.success(
            request, f"Run #{run.pk}: stop requested." if run.is_active else f"Run #{run.pk} stopped."
        )
    except TrainingRunError as exc:
        messages.error(request, str(exc))
    return redirect("training:run_detail", run_id=run.pk)


@require_POST
@page_requires("training.launch_training")
def run_resume(request: HttpRequest, run_id: int) -> HttpResponse:
    """Queue a stopped or failed run again from its last checkpoint."""
    run = get_object_or_404(TrainingRun, pk=run_id)
    try:
        training_run_resume(run=run, by=request.user)
        messages.success(request, f"Run #{run.pk} queued again: it resumes from its last checkpoint.")
    except TrainingRunError as exc:
        messages.error(request, exc.message)
    return redirect("training:run_detail", run_id=run.pk)


@require_POST
@page_requires("training.launch_training")
def checkpoint_promote_view(request: HttpRequest, checkpoint_id: int) -> HttpResponse:
    """Make a checkpoint a policy version rollouts and annotation can use."""
    checkpoint = get_object_or_404(Checkpoint.objects.select_related("run__base_policy"), pk=checkpoint_id)
    try:
        policy = checkpoint_promote(checkpoint=checkpoint, name=request.POST.get("name"), by=request.user)
        messages.success(request, f"Checkpoint step {checkpoint.step} is now policy {policy.name}.")
    except TrainingRunError as exc:
        messages.error(request, exc.message)
    return redirect("training:run_detail", run_id=checkpoint.run_id)


@require_GET
@page_requires("training.view_trainingrun")
def run_compare(request: HttpRequest) -> HttpResponse:
    """Two runs side by side (?a=&b=): configs with differences marked, overlaid curves, final metrics."""
    runs = list(training_runs_list()[:200])
    try:
        a_id, b_id = int(request.GET.get("a", "")), int(request.GET.get("b", ""))
    except ValueError:
        return render(
            request,
            "training/compare.html",
            {"runs": runs, "error": "choose two runs to compare"},
            status=400 if request.GET else 200,
        )
    a, b = _run(a_id), _run(b_id)
    return render(
        request, "training/compare.html", {"runs": runs, "a": a, "b": b, "cmp": runs_compare(a=a, b=b)}
    )
