"""What a rollout launch asks for, read the same way from the Rollouts page and the API: which tasks of
the suite (slugs or shell-style patterns) and which seeds (a list, or a first seed and a count).
Every mistake is a RolloutError naming the field."""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Sequence

from webapp.catalog.models import Task, TaskSuite
from webapp.rollouts.services import MAX_SEED, MAX_SEEDS, RolloutError, seeds_checked

_RANGE = re.compile(r"^(\d+)\s*-\s*(\d+)$")


def seeds_parse(text: str) -> list[int]:
    """Seeds from text such as "0, 3, 7", "100-109" or "0-4 10": lists and inclusive ranges."""
    seeds: list[int] = []
    for item in re.split(r"[\s,;]+", text.strip()):
        if not item:
            continue
        if item.isdigit():
            seeds.append(int(item))
        elif m := _RANGE.match(item):
            first, last = int(m[1]), int(m[2])
            if last < first:
                raise RolloutError(f"the range {item} runs backwards", field="seeds")
            if last - first + 1 > MAX_SEEDS:
                raise RolloutError(f"the range {item} holds more than {MAX_SEEDS} seeds", field="seeds")
            seeds.extend(range(first, last + 1))
        else:
            raise RolloutError(
                f"{item!r} is not a seed: write whole numbers ≥ 0 and ranges such as 100-109", field="seeds"
            )
        if len(seeds) > MAX_SEEDS:
            raise RolloutError(f"at most {MAX_SEEDS} seeds", field="seeds")
    if not seeds:
        raise RolloutError("no seed given", field="seeds")
    return seeds


def batch_seeds(
    *, seeds: Sequence[int] | None, episodes_per_task: int | None, first_seed: int | None
) -> list[int]:
    """The seeds each task runs with: `seeds` as given, or `episodes_per_task` from `first_seed` (0)."""
    if seeds is not None:
        clash = [f for f, v in (("episodes_per_task", episodes_per_task), ("first_seed", first_seed)) if v]
        if clash:
            raise RolloutError(
                f"give seeds, or episodes_per_task and first_seed, not both ({', '.join(clash)} given too)",
                field="seeds",
            )
        return seeds_checked(seeds)
    count = 1 if episodes_per_task is None else episodes_per_task
    if not 1 <= count <= MAX_SEEDS:
        raise RolloutError(f"episodes per task must be between 1 and {MAX_SEEDS}", field="episodes_per_task")
    first = first_seed or 0
    if not 0 <= first <= MAX_SEED - count:
        raise RolloutError(f"the first seed must be between 0 and {MAX_SEED - count}", field="first_seed")
    return list(range(first, first + count))


def tasks_matching(*, suite: TaskSuite, patterns: Iterable[str]) -> list[Task] | None:
    """The tasks of `suite` that slugs or patterns name, in slug order; None when none is given (the
    whole suite). A pattern (`miniwob/click-*`) picks the published tasks it matches; a slug names
    one task, which must be published for the batch to launch."""
    wanted = [p.strip() for p in patterns if p.strip()]
    if not wanted:
        return None
    tasks = list(suite.tasks.order_by("slug"))
    chosen: dict[int, Task] = {}
    for pattern in wanted:
        if any(c in pattern for c in "*?["):
            hits = [t for t in tasks if t.is_published and fnmatch.fnmatchcase(t.slug, pattern)]
            if not hits:
                why = f"{pattern!r} matches no published task of suite {suite.slug}"
                raise RolloutError(why, field="tasks")
        else:
            hits = [t for t in tasks if t.slug == pattern]
            if not hits:
                raise RolloutError(f"suite {suite.slug} has no task {pattern!r}", field="tasks")
        chosen.update((t.pk, t) for t in hits)
    return sorted(chosen.values(), key=lambda t: t.slug)


def task_patterns_parse(text: str) -> list[str]:
    """Task slugs or patterns from the form's text: separated by commas, spaces or new lines."""
    return [p for p in re.split(r"[\s,]+", text.strip()) if p]
