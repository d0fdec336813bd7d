"""Sandboxes (floor 3): where it happens. The mirror of the sandbox hosts (heartbeats), leases taken for
episodes, live-view tickets and sockets, and admin actions on sandboxes.

Owns: SandboxHost, Sandbox, Lease, ControlToken (who drives a sandbox: a person or the agent, `control.py`),
`sandbox_lease` / `lease_end`, tickets, the live consumers and where their input goes (`live_input.py`:
into the sandbox's episode through the recorder the routing gives them, raw to an idle sandbox, or nowhere).
Calls: sandbox_workers (the host client), catalog (a task's view area), episodes (who may watch).
Called by: annotation (a demonstration's sandbox and its control), rollouts (an episode's sandbox; the
agent waits while a person holds control), dashboards.
"""
