"""Template tags of the catalog: a task's instruction as a person is to read it."""

from __future__ import annotations

from django import template

from webapp.catalog.models import Task
from webapp.catalog.selectors import InstructionPreview, task_instruction_preview

register = template.Library()


@register.simple_tag
def instruction_shown(task: Task, seed: int | None, given: object = "") -> InstructionPreview:
    """The instruction to show for `task` on `seed`: the one an episode was `given` (once prepared),
    else the instance that seed draws (never the template's `{{name}}` marks)."""
    if isinstance(given, str) and given:
        return InstructionPreview(given, exact=True)
    return task_instruction_preview(task=task, seed=int(seed or 0))
