"""Reads of training runs and policy versions."""

from __future__ import annotations

import math
from typing import Any

from django.db.models import Count, Q, QuerySet

from webapp.catalog.models import TaskSuite
from webapp.datasets.models import DatasetVersion
from webapp.policies.models import PolicyVersion
from webapp.training.models import Checkpoint, MetricPoint, TrainingRun


def training_runs_list() -> QuerySet[TrainingRun]:
    """Runs newest first, with their checkpoint counts."""
    return (
        TrainingRun.objects.select_related("dataset_version__dataset", "created_by", "base_policy", "suite")
        .annotate(n_checkpoints=Count("checkpoints"))
        .order_by("-created_at")
    )


def metric_series(*, run: TrainingRun, name: str) -> list[tuple[int, float]]:
    """A run's metric as (step, value) points in step order."""
    return list(MetricPoint.objects.filter(run=run, name=name).order_by("step").values_list("step", "value"))


def policy_versions_active() -> QuerySet[PolicyVersion]:
    """Policies rollouts may use, newest first."""
    return PolicyVersion.objects.filter(is_active=True).order_by("-created_at")


def policy_versions_list(*, active: bool | None = None) -> QuerySet[PolicyVersion]:
    """Every policy (or only active / inactive ones), newest first."""
    qs = PolicyVersion.objects.select_related("checkpoint")
    if active is not None:
        qs = qs.filter(is_active=active)
    return qs.order_by("-created_at", "-pk")


def checkpoints_of(*, run: TrainingRun) -> QuerySet[Checkpoint]:
    """A run's checkpoints in step order, with the policy each became (if any)."""
    return run.checkpoints.select_related("policy_version").order_by("step")


def metric_names(*, run: TrainingRun) -> list[str]:
    """The names of a run's metric series, sorted."""
    names = MetricPoint.objects.filter(run=run).values_list("name", flat=True)
    return list(names.distinct().order_by("name"))


# --- launching ---------------------------------------------------------------------------------------


def policies_to_train_from() -> QuerySet[PolicyVersion]:
    """Active local policies (a checkpoint or a model directory): what a run may start from."""
    return (
        PolicyVersion.objects.filter(backend=PolicyVersion.Backend.LOCAL, is_active=True)
        .select_related("checkpoint")
        .order_by("-created_at", "-pk")
    )


def dataset_pins_usable(*, limit: int = 200) -> list[dict[str, Any]]:
    """Sealed, not withdrawn, non-empty dataset versions as pins (name@vN), newest first."""
    versions = (
        DatasetVersion.objects.filter(sealed_at__isnull=False, withdrawal__isnull=True, num_episodes__gt=0)
        .select_related("dataset")
        .order_by("-created_at", "-pk")[:limit]
    )
    return [
        {
            "pin": f"{v.dataset.name}@v{v.number}",
            "kind": v.dataset.kind,
            "episodes": v.num_episodes,
            "steps": v.num_steps,
        }
        for v in versions
    ]


def suites_to_roll_out_on() -> QuerySet[TaskSuite]:
    """Suites with at least one published task, with their count."""
    return (
        TaskSuite.objects.annotate(n_published=Count("tasks", filter=Q(tasks__is_published=True)))
        .filter(n_published__gt=0)
        .order_by("slug")
    )


# --- metrics and logs ----------------------------------------------------------------------------------


def _group(key: str, title: str, left: list[str], right: list[str] | None = None) -> dict[str, Any]:
    return {"key": key, "title": title, "metrics": left, "right": right or []}


# The run page's charts. "rl/success/*" takes every metric under the prefix; `right` ones get a second
# y axis (a learning rate beside a loss). A metric no group names gets a chart of its own.
METRIC_GROUPS: list[dict[str, Any]] = [
    _group("reward", "Reward and success", ["rl/reward", "rl/success"]),
    _group("task-success", "Success per task", ["rl/success/*"]),
    _group("entropy", "Entropy", ["rl/entropy"]),
    _group("kl", "KL to the reference policy", ["rl/kl"]),
    _group("clip", "Clip fraction", ["rl/clip_frac"]),
    _group("value", "Value loss and explained variance", ["rl/value_loss"], ["rl/explained_var"]),
    _group("length", "Response length (tokens)", ["rl/response_len"]),
    _group(
        "is",
        "Per-token π_old / π_rollout (trainer vs. the engine that sampled) and truncated share",
        ["rl/is_weight_mean", "rl/is_weight_max", "rl/is_weight_min"],
        ["rl/is_truncated_frac"],
    ),
    _group(
        "mismatch",
        "Engine/trainer log-prob mismatch |π_old − π_rollout| per token on the current version's turns "
        "(mean, max; lagged: turns of older versions), and turns whose rebuilt prompt was not the one "
        "the engine read (never trained)",
        ["rl/logprob_mismatch_mean", "rl/logprob_mismatch_max", "rl/logprob_mismatch_lagged_mean"],
        ["rl/rebuild_differs"],
    ),
    _group("mismatch-turn", "Mismatch by turn index of the episode (mean)", ["rl/logprob_mismatch/*"]),
    _group("mismatch-turn-max", "Mismatch by turn index of the episode (max)", ["rl/logprob_mismatch_max/*"]),
    _group("speed", "Tokens per second and step time (s)", ["train/tokens_per_s"], ["train/step_time_s"]),
    _group("env", "Environment utilisation and policy lag", ["rl/env_utilisation"], ["rl/policy_lag"]),
    _group(
        "sampling",
        "Dynamic sampling: episodes sampled and trained on, groups that all agreed",
        ["rl/sampled_episodes", "rl/episodes"],
        ["rl/groups_uninformative"],
    ),
    _group(
        "critic",
        "PPO: critic's explained variance before the update, and policy λ",
        ["rl/critic_ev"],
        ["rl/lambda_policy"],
    ),
    _group("loss", "Loss and learning rate", ["train/loss"], ["train/lr"]),
]

MAX_POINTS = 2000


def _thin(points: list[tuple[int, float]], max_points: int) -> list[tuple[int, float]]:
    # Every k-th point and always the last: a long run's chart stays light and still ends where the run is.
    if len(points) <= max_points:
        return points
    k = math.ceil(len(points) / max_points)
    thinned = points[::k]
    if thinned[-1] != points[-1]:
        thinned.append(points[-1])
    return thinned


def _json_number(value: float) -> float | None:
    return value if math.isfinite(value) else None


def run_series(
    *, run: TrainingRun, names: list[str] | None = None, max_points: int = MAX_POINTS
) -> dict[str, dict[str, list[Any]]]:
    """Every metric series of a run (or those in `names`) as {name: {"steps": [...], "values": [...]}}.

    Non-finite values come back as null (JSON has no NaN); long series are thinned to max_points.
    """
    return run_series_since(run=run, names=names, max_points=max_points)[0]


def run_series_since(
    *, run: TrainingRun, after: int = 0, names: list[str] | None = None, max_points: int = MAX_POINTS
) -> tuple[dict[str, dict[str, list[Any]]], int]:
    """The points recorded after point id `after` (every point for 0), as run_series shapes them, and
    the cursor for the next call: the newest point's id (or `after`, when there is none newer).

    A live chart asks with its last cursor and appends what comes back, instead of reloading every
    point every few seconds. One trainer writes a run's points, so ids grow in the order they are
    committed and a cursor never skips one.
    """
    qs = MetricPoint.objects.filter(run=run, pk__gt=max(0, after))
    if names is not None:
        qs = qs.filter(name__in=names)
    grouped: dict[str, list[tuple[int, float]]] = {}
    cursor = max(0, after)
    for pk, name, step, value in qs.order_by("name", "step", "pk").values_list("pk", "name", "step", "value"):
        grouped.setdefault(name, []).append((step, value))
        cursor = max(cursor, pk)
    out: dict[str, dict[str, list[Any]]] = {}
    for name, points in grouped.items():
        points = _thin(points, max_points)
        out[name] = {"steps": [s for s, _ in points], "values": [_json_number(v) for _, v in points]}
    return out, cursor


def run_final_metrics(*, run: TrainingRun) -> dict[str, float | None]:
    """Each metric's value at its last step."""
    latest: dict[str, tuple[int, float]] = {}
    for name, step, value in MetricPoint.objects.filter(run=run).values_list("name", "step", "value"):
        if name not in latest or step >= latest[name][0]:
            latest[name] = (step, value)
    return {name: _json_number(value) for name, (_, value) in sorted(latest.items())}


def run_log_tail(*, run: TrainingRun, lines: int = 200, max_bytes: int = 1 << 20) -> list[str]:
    """The last `lines` lines of the run's log ([] while there is none)."""
    if not run.log_file or lines <= 0:
        return []
    path = run.path(run.log_file)
    try:
        with path.open("rb") as f:
            f.seek(0, 2)
            size = f.tell()
            chunk = 8192
            data = b""
            # Read backwards until enough lines (or max_bytes): a long run's log is never read whole.
            while size > 0 and data.count(b"\n") <= lines and len(data) < max_bytes:
                step = min(chunk, size)
                size -= step
                f.seek(size)
                data = f.read(step) + data
                chunk *= 2
    except OSError:
        return []
    text = data.decode("utf-8", errors="replace").splitlines()
    return text[-lines:]


# --- comparing two runs --------------------------------------------------------------------------------


def _short(value: float | None) -> str:
    return "–" if value is None else f"{value:.4g}"


def runs_compare(*, a: TrainingRun, b: TrainingRun) -> dict[str, Any]:
    """Two runs side by side: config rows (with which differ), shared metric names, final metrics."""
    keys = sorted(set(a.config) | set(b.config))
    missing = object()
    config_rows = []
    for key in keys:
        va, vb = a.config.get(key, missing), b.config.get(key, missing)
        config_rows.append(
            {
                "field": key,
                "a": None if va is missing else va,
                "b": None if vb is missing else vb,
                "differs": va != vb,
            }
        )
    meta_rows = [
        {"field": "algorithm", "a": a.algorithm, "b": b.algorithm},
        {"field": "base policy", "a": str(a.base_policy or ""), "b": str(b.base_policy or "")},
        {
            "field": "data",
            "a": str(a.dataset_version or a.suite or ""),
            "b": str(b.dataset_version or b.suite or ""),
        },
        {"field": "status", "a": a.status, "b": b.status},
        {"field": "step", "a": a.step, "b": b.step},
    ]
    for row in meta_rows:
        row["differs"] = row["a"] != row["b"]
    final_a, final_b = run_final_metrics(run=a), run_final_metrics(run=b)
    shared = sorted(set(final_a) & set(final_b))
    finals = [
        {
            "metric": name,
            "a": final_a.get(name),
            "b": final_b.get(name),
            "a_text": _short(final_a.get(name)),
            "b_text": _short(final_b.get(name)),
        }
        for name in sorted(set(final_a) | set(final_b))
    ]
    return {
        "meta": meta_rows,
        "config": config_rows,
        "shared_metrics": shared,
        "final": finals,
        "differing": [r["field"] for r in config_rows if r["differs"]],
    }
