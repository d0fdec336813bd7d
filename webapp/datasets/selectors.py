"""Reads of datasets, versions, exports and flywheel rounds."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from django.db.models import Count, Max, Q, QuerySet

from webapp.datasets.models import (
    Dataset,
    DatasetExport,
    DatasetMembership,
    DatasetVersion,
    FlywheelIteration,
    VersionWithdrawal,
)
from webapp.episodes.models import Source


def datasets_list() -> QuerySet[Dataset]:
    """Datasets with their number of versions and latest version number."""
    return Dataset.objects.annotate(n_versions=Count("versions"), latest=Max("versions__number")).order_by(
        "name"
    )


def versions_of(*, dataset: Dataset) -> QuerySet[DatasetVersion]:
    """A dataset's versions, newest first."""
    return (
        dataset.versions.select_related("parent", "iteration", "withdrawal")
        .annotate(n_exports=Count("exports", filter=Q(exports__status=DatasetExport.Status.FINISHED)))
        .order_by("-number")
    )


def version_get(*, version_id: int) -> DatasetVersion | None:
    """One version with what its page shows, or None."""
    return (
        DatasetVersion.objects.select_related("dataset", "parent", "iteration", "withdrawal", "created_by")
        .filter(pk=version_id)
        .first()
    )


def version_withdrawal(*, version: DatasetVersion) -> VersionWithdrawal | None:
    """The version's withdrawal, or None while it is in use."""
    try:
        return version.withdrawal  # type: ignore[no-any-return]
    except VersionWithdrawal.DoesNotExist:
        return None


@dataclass(frozen=True)
class LineageView:
    """A version's lineage as people read it: names where the record keeps ids, counts where it
    keeps lists."""

    sources: dict[str, int]
    policy_versions: list[tuple[int, str]]
    """(id, name) of every policy version whose episodes it holds."""
    annotators: list[tuple[int, str]]
    """(id, username) of every person who demonstrated one of its episodes."""
    reviews: int
    """How many reviews of its episodes there were."""
    added: int | None
    removed: int | None


def version_lineage(*, version: DatasetVersion) -> LineageView:
    """The version's lineage with the ids it records resolved to names (an id whose row has gone
    shows as `#id`)."""
    from django.contrib.auth import get_user_model

    from webapp.policies.models import PolicyVersion

    lineage = dict(version.lineage or {})

    def ids(key: str) -> list[int]:
        return [int(i) for i in lineage.get(key) or [] if isinstance(i, int)]

    policy_ids, annotator_ids = ids("policy_versions"), ids("annotators")
    policies = dict(PolicyVersion.objects.filter(pk__in=policy_ids).values_list("pk", "name"))
    user_model = get_user_model()
    people = dict(
        user_model.objects.filter(pk__in=annotator_ids).values_list("pk", user_model.USERNAME_FIELD)
    )
    return LineageView(
        sources={str(k): int(v) for k, v in (lineage.get("sources") or {}).items()},
        policy_versions=[(i, str(policies.get(i, f"#{i}"))) for i in policy_ids],
        annotators=[(i, str(people.get(i, f"#{i}"))) for i in annotator_ids],
        reviews=len(lineage.get("reviews") or []),
        added=lineage.get("added"),
        removed=lineage.get("removed"),
    )


def version_members(*, version: DatasetVersion, v: int | None = None) -> QuerySet[DatasetMembership]:
    """A version's episodes with their verdicts, optionally only V=`v`."""
    rows = version.memberships.select_related("episode__task", "episode__policy_version").order_by(
        "episode_id"
    )
    if v is not None:
        rows = rows.filter(validator__v=v)
    return rows


def version_pinned_by(*, version: DatasetVersion) -> QuerySet[Any]:
    """Training runs pinned to this version."""
    return version.training_runs.order_by("-created_at")


def exports_of(*, version: DatasetVersion) -> QuerySet[DatasetExport]:
    """A version's exports, newest first."""
    return version.exports.select_related("created_by").order_by("-created_at")


@dataclass
class VersionDiff:
    """What changed between two versions: episodes added, removed, and re-judged."""

    a: DatasetVersion
    b: DatasetVersion
    added: list[int] = field(default_factory=list)
    removed: list[int] = field(default_factory=list)
    changed: list[dict[str, Any]] = field(default_factory=list)
    kept: int = 0

    def to_json(self, *, limit: int = 1000) -> dict[str, Any]:
        return {
            "a": self.a.pk,
            "b": self.b.pk,
            "added": len(self.added),
            "removed": len(self.removed),
            "changed": len(self.changed),
            "kept": self.kept,
            "added_episodes": self.added[:limit],
            "removed_episodes": self.removed[:limit],
            "changed_episodes": self.changed[:limit],
        }


def versions_diff(*, a: DatasetVersion, b: DatasetVersion) -> VersionDiff:
    """The membership of `b` against `a`: added, removed, and kept episodes whose verdict changed."""
    va = dict(a.memberships.values_list("episode_id", "validator"))
    vb = dict(b.memberships.values_list("episode_id", "validator"))
    diff = VersionDiff(a=a, b=b)
    diff.added = sorted(set(vb) - set(va))
    diff.removed = sorted(set(va) - set(vb))
    both = sorted(set(va) & set(vb))
    diff.kept = len(both)
    for pk in both:
        before, after = va[pk] or {}, vb[pk] or {}
        if before.get("v") != after.get("v") or before.get("reasons") != after.get("reasons"):
            diff.changed.append(
                {"episode": pk, "before": before.get("reasons", []), "after": after.get("reasons", [])}
            )
    return diff


def rounds_closed() -> QuerySet[FlywheelIteration]:
    """Closed flywheel rounds, oldest first, with their versions."""
    return (
        FlywheelIteration.objects.filter(status=FlywheelIteration.Status.FINISHED)
        .select_related("policy_version")
        .prefetch_related("dataset_versions__dataset")
        .order_by("number")
    )


def round_closing() -> FlywheelIteration | None:
    """The round being closed now, if any."""
    return FlywheelIteration.objects.filter(status=FlywheelIteration.Status.RUNNING).first()


SOURCES = [s.value for s in Source]


def rounds_chart(*, rounds: list[FlywheelIteration]) -> dict[str, Any]:
    """P(V=1) per round, overall and by source, as Chart.js series (None where a round had none)."""
    series: dict[str, list[float | None]] = {"all": []}
    for source in SOURCES:
        series[source] = []
    for r in rounds:
        series["all"].append(r.stats.get("p_v1"))
        for source in SOURCES:
            series[source].append((r.stats.get("by_source", {}).get(source) or {}).get("p_v1"))
    return {"labels": [f"round {r.number}" for r in rounds], "series": series}


def rounds_trend(*, rounds: list[FlywheelIteration]) -> dict[str, Any]:
    """Whether P(V=1) rises round after round: the changes between consecutive rounds that have data."""
    points = [(r.number, r.stats.get("p_v1")) for r in rounds if r.stats.get("p_v1") is not None]
    steps = [
        {"from": a, "to": b, "delta": round(pb - pa, 4)}
        for (a, pa), (b, pb) in zip(points, points[1:], strict=False)
    ]
    rises = sum(1 for s in steps if s["delta"] > 0)
    falls = sum(1 for s in steps if s["delta"] < 0)
    if not steps:
        verdict = "not enough rounds with episodes to tell"
    elif rises == len(steps):
        verdict = "rises every round"
    elif falls == len(steps):
        verdict = "falls every round"
    else:
        verdict = f"rises in {rises} of {len(steps)} round-to-round changes"
    return {"steps": steps, "rises": rises, "falls": falls, "verdict": verdict}
