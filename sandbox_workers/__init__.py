"""The environment side: sandbox providers, pool and leases, the host service and live streaming.

Never imports Django; depends on agent_core for the action and observation types.
"""

__version__ = "0.1.0"
