"""Writes for tasks and suites."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import transaction

from webapp.catalog.models import Task, TaskSuite

if TYPE_CHECKING:
    from agent_core.tasks.spec import TaskSpec


@transaction.atomic
def task_create(
    *,
    slug: str,
    title: str,
    instruction: str,
    platform: str,
    env_profile: str,
    spec: dict[str, Any] | None = None,
    max_steps: int = 15,
    max_seconds: int = 300,
    suites: Iterable[TaskSuite] = (),
    created_by: AbstractBaseUser | None = None,
) -> Task:
    """A new unpublished task, with its suite memberships written in the same transaction."""
    task = Task(
        slug=slug,
        title=title,
        instruction=instruction,
        platform=platform,
        env_profile=env_profile,
        spec=spec or {},
        max_steps=max_steps,
        max_seconds=max_seconds,
        created_by=created_by,
    )
    task.full_clean()
    task.save()
    task.suites.set(list(suites))
    return task


TASK_EDITABLE_FIELDS = ("title", "instruction", "max_steps", "max_seconds", "spec")


def task_update(*, task: Task, changes: Mapping[str, Any]) -> Task:
    """Change some of a task's editable fields; the whole row is validated before anything is saved."""
    unknown = sorted(set(changes) - set(TASK_EDITABLE_FIELDS))
    if unknown:
        raise ValueError(f"cannot change {', '.join(unknown)}; editable: {', '.join(TASK_EDITABLE_FIELDS)}")
    if not changes:
        return task
    fields = list(changes)
    if "spec" in changes and changes["spec"] != task.spec and task.is_published:
        # Publication vouches for this spec (oracle scores 1, do-nothing 0); a new spec must earn it again.
        task.is_published = False
        fields.append("is_published")
    for name, value in changes.items():
        setattr(task, name, value)
    task.full_clean()
    task.save(update_fields=[*fields, "updated_at"])
    return task


def suite_get_or_create(*, slug: str, name: str, description: str = "") -> TaskSuite:
    """The suite called `slug`, created if absent."""
    suite, _ = TaskSuite.objects.get_or_create(slug=slug, defaults={"name": name, "description": description})
    return suite


def suite_load(*, name: str) -> tuple[TaskSuite, int, int]:
    """Create or refresh the catalog's copy of a built-in suite: (suite, created, changed).

    A task whose spec changed loses its publication (its oracle check must pass again)."""
    from agent_core.suites import SUITES, suite_tasks

    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; valid: {', '.join(sorted(SUITES))}")
    _, title, description = SUITES[name]
    suite = suite_get_or_create(slug=name, name=title, description=description)
    created, changed = specs_load(suite=suite, specs=suite_tasks(name))
    return suite, created, changed


@transaction.atomic
def specs_load(*, suite: TaskSuite, specs: Iterable[TaskSpec]) -> tuple[int, int]:
    """Create or refresh the catalog's tasks for `specs`, members of `suite`: (created, changed).

    A task whose spec changed loses its publication (its checks must pass again)."""
    created = changed = 0
    for spec in specs:
        doc = spec.to_dict()
        fields = {
            "title": spec.title[:200],
            "instruction": spec.instruction,
            "platform": spec.platform,
            "env_profile": spec.profile,
            "max_steps": spec.limits.max_steps,
            "max_seconds": spec.limits.max_seconds,
            "spec_version": spec.version,
            "family": spec.family,
        }
        task = Task.objects.filter(slug=spec.id).first()
        if task is None:
            task = task_create(
                slug=spec.id,
                title=fields["title"],
                instruction=spec.instruction,
                platform=spec.platform,
                env_profile=spec.profile,
                spec=doc,
                max_steps=spec.limits.max_steps,
                max_seconds=spec.limits.max_seconds,
                suites=[suite],
            )
            Task.objects.filter(pk=task.pk).update(spec_version=spec.version, family=spec.family)
            created += 1
            continue
        task.suites.add(suite)
        if task.spec != doc or any(getattr(task, k) != v for k, v in fields.items()):
            Task.objects.filter(pk=task.pk).update(spec=doc, is_published=False, verification={}, **fields)
            changed += 1
    return created, changed


def osworld_import(
    *, paths: Iterable[str | Path]
) -> tuple[dict[str, tuple[int, int]], list[tuple[str, str]]]:
    """Import OSWorld task files into suites `osworld-<domain>`: ({suite slug: (created, changed)},
    [(path, why) for each file refused]). Imported tasks start unpublished: publication needs a
    proof (a scripted solution or an accepted demonstration scoring 1) beside do-nothing scoring 0."""
    from agent_core.tasks.osworld import import_osworld_files

    specs, refused = import_osworld_files(paths)
    by_suite: dict[str, list[TaskSpec]] = {}
    for spec in specs:
        parts = spec.id.split("/")
        domain = parts[1] if len(parts) > 2 else "other"
        by_suite.setdefault(f"osworld-{domain}", []).append(spec)
    counts = {}
    for slug, members in sorted(by_suite.items()):
        domain = slug.removeprefix("osworld-")
        suite = suite_get_or_create(
            slug=slug, name=f"OSWorld {domain}", description=f"OSWorld's {domain} tasks, imported"
        )
        counts[slug] = specs_load(suite=suite, specs=members)
    # Why each is unpublished, before any check has run: what would prove it.
    from agent_core.tasks.oracles import oracle_names

    scripted = set(oracle_names())
    unproven = [s.id for s in specs if (s.oracle or s.id) not in scripted]
    Task.objects.filter(slug__in=unproven, is_published=False, verification={}).update(
        verification={
            "status": "unchecked",
            "reason": "no proof yet: it has no scripted solution; an annotator's demonstration that its "
            "checker scores 1 proves it (Annotate → Prove a benchmark task), then doing nothing must score 0",
        }
    )
    return counts, refused
