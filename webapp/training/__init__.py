"""Training (floor 6): runs on dataset versions. A run's lifecycle on the `training` queue (launch, execute,
heartbeat, reap, stop, resume), checkpoints and metrics, promotion of a checkpoint to a policy, merges of
policies, pinning a run to a dataset version, and the rollouts an RL run samples (`rollout_source`).

Owns: TrainingRun, Checkpoint, MetricPoint, PolicyMerge, TrainingWorker (the devices a training worker
reported: `workers`, against which the launch form plans a run: `planning`).
Calls: agent_core.training (the runner), datasets, rollouts, episodes, policies, catalog.
Called by: dashboards.
"""
