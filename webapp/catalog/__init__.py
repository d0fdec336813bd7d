"""Catalog (floor 1): what a task is. Tasks (a spec agent_core parses, a sandbox profile, a checker) and
suites, loaded from agent_core's built-in suites or created through the API.

Owns: Task, TaskSuite, `suite_load`, task create/update rules (`Task.clean`).
Calls: agent_core.tasks (spec parsing). The sandbox profiles a task may name come from the sandboxes app
through `profiles_source_add` (it sits above and registers itself).
Called by: episodes, sandboxes, annotation, rollouts, training, dashboards, demo.
"""
