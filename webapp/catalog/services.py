"""Writes for tasks and suites."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction

from webapp.catalog.models import Task, TaskSuite

if TYPE_CHECKING:
    from agent_core.tasks.osworld_files import TaskFile
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
    spec_version: int = 1,
    family: str = "",
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
        spec_version=spec_version,
        family=family,
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
    outcomes = [spec_load(suite=suite, spec=spec) for spec in specs]
    return outcomes.count("created"), outcomes.count("changed")


def spec_load(*, suite: TaskSuite, spec: TaskSpec) -> str:
    """Create or refresh the catalog's task for `spec`, a member of `suite`: "created", "changed" or
    "same". A refreshed row is validated as a new one is (`Task.clean`: text, profile, the spec), so a
    re-import stores nothing a create would refuse; ValidationError naming the field otherwise."""
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
        task_create(slug=spec.id, spec=doc, suites=[suite], **fields)
        return "created"
    task.suites.add(suite)
    if task.spec == doc and all(getattr(task, k) == v for k, v in fields.items()):
        return "same"
    for name, value in {**fields, "spec": doc, "is_published": False, "verification": {}}.items():
        setattr(task, name, value)
    task.full_clean()
    task.save(update_fields=[*fields, "spec", "is_published", "verification", "updated_at"])
    return "changed"


@dataclass
class OSWorldImport:
    """What an import of OSWorld task files did."""

    counts: dict[str, tuple[int, int]] = field(default_factory=dict)
    """Per suite slug: (tasks created, tasks changed)."""
    slugs: list[str] = field(default_factory=list)
    """The task each imported file is, in file order."""
    refused: list[tuple[str, str]] = field(default_factory=list)
    """(file, why) for each file not imported."""
    known: list[tuple[str, str]] = field(default_factory=list)
    """(file, slug) for each file imported before under another domain: it stays that one task."""
    unavailable: list[str] = field(default_factory=list)
    """The imported tasks whose profile no sandbox host serves now: listed, but not startable."""


def _osworld_suite(slug: str) -> str:
    """The suite of an imported OSWorld task: osworld-<domain> (osworld-other for a task with none)."""
    parts = slug.split("/")
    return f"osworld-{parts[1] if len(parts) > 2 else 'other'}"


def _imported_before(spec: TaskSpec) -> str | None:
    """The slug of the task this very OSWorld file was imported as before under another domain (where
    no folder says, the domain is the uploader's choice or a guess), or None: `spec` is its own task."""
    from agent_core.tasks.osworld_tables import DOMAINS

    doc = (spec.source.get("origin") or {}).get("osworld")
    if not isinstance(doc, dict) or Task.objects.filter(slug=spec.id).exists():
        return None
    prefix, raw = spec.id.split("/", 1)[0], str(doc.get("id", "")).strip().lower()
    slugs = [f"{prefix}/{raw}", *(f"{prefix}/{d}/{raw}" for d in DOMAINS)]
    for task in Task.objects.filter(slug__in=slugs).order_by("slug"):
        if isinstance(task.spec, dict) and (task.spec.get("origin") or {}).get("osworld") == doc:
            return task.slug
    return None


@transaction.atomic
def osworld_import(
    *, paths: Iterable[str | Path] = (), files: Iterable[TaskFile] = (), domain: str = ""
) -> OSWorldImport:
    """Import OSWorld task files (`paths` to read, or `files` read already: an upload's) into suites
    `osworld-<domain>`; `domain` is the caller's choice where a file's folder does not say
    (agent_core.tasks.osworld_files). One task per file: a file imported before under another domain
    refreshes that task. Each file is stored on its own, so one refused leaves the others imported.
    Imported tasks start unpublished: publication needs a proof (a scripted solution or an accepted
    demonstration scoring 1) beside do-nothing scoring 0. A task whose profile no host serves now is
    imported all the same, and listed as unavailable."""
    from agent_core.tasks.oracles import oracle_names
    from agent_core.tasks.osworld_files import import_task_files, read_task_files
    from agent_core.tasks.spec import parse_task
    from webapp.catalog.availability import profiles_served

    result = OSWorldImport()
    read, result.refused = read_task_files(paths)
    imported, refused = import_task_files([*read, *files], domain=domain)
    result.refused.extend(refused)
    for name, spec in imported:
        before = _imported_before(spec)
        if before is not None:
            spec = parse_task({**spec.to_dict(), "id": before})
        slug = _osworld_suite(spec.id)
        domain_name = slug.removeprefix("osworld-")
        try:
            with transaction.atomic():  # a file refused here leaves no trace, not even an empty suite
                suite = suite_get_or_create(
                    slug=slug,
                    name=f"OSWorld {domain_name}",
                    description=f"OSWorld's {domain_name} tasks, imported",
                )
                outcome = spec_load(suite=suite, spec=spec)
        except ValidationError as exc:
            why = "; ".join(f"{key}: {' '.join(messages)}" for key, messages in exc.message_dict.items())
            result.refused.append((name, f"cannot be stored: {why}"))
            continue
        created, changed = result.counts.get(slug, (0, 0))
        result.counts[slug] = (created + (outcome == "created"), changed + (outcome == "changed"))
        result.slugs.append(spec.id)
        if before is not None:
            result.known.append((name, before))
    # Why each is unpublished, before any check has run: what would prove it.
    scripted = set(oracle_names())
    tasks = list(Task.objects.filter(slug__in=result.slugs))
    unproven = [t.slug for t in tasks if ((t.spec or {}).get("oracle") or t.slug) not in scripted]
    Task.objects.filter(slug__in=unproven, is_published=False, verification={}).update(
        verification={
            "status": "unchecked",
            "reason": "no proof yet: it has no scripted solution; an annotator's demonstration that its "
            "checker scores 1 proves it (Annotate → Prove a benchmark task), then doing nothing must score 0",
        }
    )
    served = profiles_served()
    result.unavailable = sorted(t.slug for t in tasks if t.env_profile not in served)
    return result
