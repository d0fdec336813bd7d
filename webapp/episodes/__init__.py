"""Episodes (floor 2): what happened. An episode (one attempt at a task by a person or a policy), its steps
(screenshot, thought, action), their live stream to pages, and the tasks' difficulty statistics.

Owns: Episode, Step, `episode_create` / `step_record` / `episode_finish`, `task_stats_refresh`.
Calls: catalog (the task), policies (which policy acted), common (storage, live).
Called by: sandboxes (who may watch a sandbox), reviews, annotation, rollouts, datasets, training.
"""
