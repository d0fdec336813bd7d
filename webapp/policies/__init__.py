"""Policies: what an agent is (`PolicyVersion`: a checkpoint, an endpoint or a baseline), the agent_core
policy a row stands for (`runtime.policy_for`), and the policy servers (vLLM) that serve versions.

Owns: PolicyVersion, PolicyServer (mirrored from the servers' heartbeats, `api.py`; silent ones go
offline, `tasks.servers_check`), policy naming (`services.free_policy_name`), which servers serve a model
(`selectors.server_urls_for`, `version_ready`) and which LoRA adapters a server should hold
(`selectors.adapters_wanted`), `runtime.policy_for` / `observation_for`, the policy servers page.
Calls: agent_core.policies (the policy classes), sandbox_workers.agent_env (observation modes),
accounts (who may see the servers page).
Called by: rollouts (which policy runs an episode), annotation (a policy's suggestion), training (a run's
base policy; a promoted checkpoint becomes a PolicyVersion), datasets (a round's policy), episodes.
It sits below every app that names a policy and imports none of them (the checkpoint is a foreign key
by name, "training.Checkpoint").
"""
