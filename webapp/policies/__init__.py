"""Policies: what an agent is (`PolicyVersion`: a checkpoint, an endpoint or a baseline) and the
agent_core policy a row stands for (`runtime.policy_for`).

Owns: PolicyVersion, policy naming (`services.free_policy_name`), `runtime.policy_for` / `observation_for`.
Calls: agent_core.policies (the policy classes), sandbox_workers.agent_env (observation modes).
Called by: rollouts (which policy runs an episode), annotation (a policy's suggestion), training (a run's
base policy; a promoted checkpoint becomes a PolicyVersion), datasets (a round's policy), episodes.
It sits below every app that names a policy and imports none of them (the checkpoint is a foreign key
by name, "training.Checkpoint").
"""
