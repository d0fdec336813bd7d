"""Catalog (floor 1): what a task is. Tasks (a spec agent_core parses, a sandbox profile, a checker) and
suites, loaded from agent_core's built-in suites or created through the API.

Owns: Task, TaskSuite, `suite_load`, task create/update rules (`Task.clean`), the OSWorld import
(`osworld_import`: one task per file), whether a task can be started now (`availability`).
Calls: agent_core.tasks (spec parsing). The sandbox profiles a task may name, and those a task can start
on now, come from the sandboxes app through `profiles_source_add` and `profiles_served_source_set` (it
sits above and registers itself).
Called by: episodes, sandboxes, annotation, rollouts, training, dashboards, demo.
"""
