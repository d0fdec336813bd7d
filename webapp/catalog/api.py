"""JSON API for tasks: list, read, create and edit."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError as ModelValidationError
from django.db import IntegrityError
from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from pydantic import ConfigDict, field_validator
from pydantic_core import PydanticCustomError

from webapp.catalog.availability import profiles_served_once, task_unavailable_reason
from webapp.catalog.models import Platform, Task
from webapp.catalog.selectors import suites_by_slug, tasks_filtered
from webapp.catalog.services import task_create, task_update
from webapp.common.api import ErrorOut, PageIn, api_enum, invalid_input, object_or_404, page_of, require_perm

router = Router(tags=["tasks"])

# Documented in the OpenAPI description; the handlers in webapp.api write these bodies.
DENIED = {401: ErrorOut, 403: ErrorOut}

TaskPlatform = api_enum("TaskPlatform", Platform)


class TaskOut(Schema):
    id: int
    slug: str
    title: str
    instruction: str
    platform: TaskPlatform
    env_profile: str
    spec: dict[str, Any]
    spec_version: int
    max_steps: int
    max_seconds: int
    suites: list[str]
    is_published: bool
    attempts: int
    successes: int
    success_rate: float | None
    created_at: datetime
    updated_at: datetime

    unavailable: str = Field(
        description="Why the task cannot be started now (no sandbox host serves its profile); empty if it can"
    )

    @staticmethod
    def resolve_suites(obj: Task) -> list[str]:
        return sorted(suite.slug for suite in obj.suites.all())

    @staticmethod
    def resolve_unavailable(obj: Task, context: Any) -> str:
        served = profiles_served_once((context or {}).get("request"))
        return task_unavailable_reason(task=obj, served=served)


class TaskPage(Schema):
    count: int
    items: list[TaskOut]


class TaskFilters(PageIn):
    q: str = Field("", description="Text in the slug, title or instruction")
    platform: TaskPlatform | None = None
    suite: str = Field("", description="Slug of a suite the task belongs to")
    published: bool | None = None


class TaskIn(Schema):
    model_config = ConfigDict(extra="forbid")

    slug: str = Field(min_length=1, max_length=200, description="e.g. miniwob/click-button")
    title: str = Field(min_length=1, max_length=200)
    instruction: str = Field(min_length=1)
    platform: TaskPlatform
    env_profile: str = Field(min_length=1, max_length=100, description="Sandbox profile the task runs on")
    spec: dict[str, Any] = Field(default_factory=dict, description="The task document: setup, checker")
    max_steps: int = Field(15, ge=1, le=1000)
    max_seconds: int = Field(300, ge=1, le=86400)
    suites: list[str] = Field(default_factory=list, description="Slugs of existing suites")


class TaskPatch(Schema):
    """Only the fields sent change; null is refused rather than read as "clear"."""

    model_config = ConfigDict(extra="forbid")

    title: str | None = Field(None, min_length=1, max_length=200)
    instruction: str | None = Field(None, min_length=1)
    max_steps: int | None = Field(None, ge=1, le=1000)
    max_seconds: int | None = Field(None, ge=1, le=86400)
    spec: dict[str, Any] | None = None

    @field_validator("*", mode="before")
    @classmethod
    def _not_null(cls, value: Any) -> Any:
        if value is None:
            raise PydanticCustomError("not_null", "may not be null (leave the field out to keep it)")
        return value


@router.get("/tasks", response={200: TaskPage, 400: ErrorOut, **DENIED})
def task_list(request: HttpRequest, filters: Query[TaskFilters]) -> dict[str, Any]:
    """Tasks by slug, narrowed by text, platform, suite and publication state."""
    require_perm(request, "catalog.view_task")
    tasks = tasks_filtered(
        query=filters.q,
        platform=filters.platform or "",
        suite=filters.suite,
        published=filters.published,
    )
    return page_of(tasks, filters)


@router.get("/tasks/{task_id}", response={200: TaskOut, 404: ErrorOut, **DENIED})
def task_detail(request: HttpRequest, task_id: int) -> Task:
    """One task."""
    require_perm(request, "catalog.view_task")
    return object_or_404(tasks_filtered(), task_id, "task")


@router.post("/tasks", response={201: TaskOut, 400: ErrorOut, **DENIED})
def task_add(request: HttpRequest, payload: TaskIn) -> Status[Task]:
    """Create an unpublished task; every suite named must already exist."""
    require_perm(request, "catalog.add_task")
    suites = suites_by_slug(slugs=payload.suites)
    unknown = sorted(set(payload.suites) - set(suites))
    if unknown:
        raise invalid_input({"suites": [f"unknown suite(s): {', '.join(unknown)}"]})
    fields = payload.model_dump(exclude={"suites"})
    try:
        task = task_create(**fields, suites=suites.values(), created_by=request.user)
    except ModelValidationError as exc:
        raise invalid_input(exc.message_dict)
    except IntegrityError:
        # A concurrent request took the slug between validation and insert.
        if Task.objects.filter(slug=payload.slug).exists():
            raise invalid_input({"slug": [f"a task with slug {payload.slug!r} already exists"]})
        raise
    return Status(201, task)


@router.patch("/tasks/{task_id}", response={200: TaskOut, 400: ErrorOut, 404: ErrorOut, **DENIED})
def task_edit(request: HttpRequest, task_id: int, payload: TaskPatch) -> Task:
    """Change a task's title, instruction, limits or spec; fields left out keep their value."""
    require_perm(request, "catalog.change_task")
    task = object_or_404(tasks_filtered(), task_id, "task")
    try:
        return task_update(task=task, changes=payload.model_dump(exclude_unset=True))
    except ModelValidationError as exc:
        raise invalid_input(exc.message_dict)
