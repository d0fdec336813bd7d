"""Template tag of the catalog: why a task cannot be started now (webapp.catalog.availability)."""

from __future__ import annotations

from django import template

from webapp.catalog.availability import profiles_served_once, task_unavailable_reason
from webapp.catalog.models import Task

register = template.Library()


@register.simple_tag(takes_context=True)
def task_unavailable(context: template.Context, task: Task) -> str:
    """Why `task` cannot be started now ("" if it can); the profiles served are read once a page."""
    return task_unavailable_reason(task=task, served=profiles_served_once(context.get("request")))
