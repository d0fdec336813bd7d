"""Rollouts (floor 4): agents producing episodes. Batches of episodes on a suite by a policy, one Celery
task per episode (`episode_rollout`), the reaper, and the publication check of tasks (`verification`).

Owns: RolloutBatch, EpisodeWait (what a waiting episode waits for: `waits`, shown on the batch page),
`batch_create` / `batch_advance` / `episode_run`, `task_verify` (on the `checks` queue).
Calls: episodes, sandboxes (lease, control), catalog, policies (`policy_for`).
Called by: training (rollouts of an RL run).
"""
