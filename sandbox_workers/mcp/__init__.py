"""MCP tools inside sandboxes: servers that run confined in a sandbox (`servers/`), the host-side hub
holding a client session per started server (`hub`); an X desktop starts them in its confinement
(`sandbox_workers.providers.xdesktop.mcp`).

An agent reaches them with the `mcp_call(server=…, tool=…, arguments=…)` action (`base.perform` sends
it to the provider's `mcp_call`); the provider's `mcp_tools` call lists every tool with its schema,
which the agent's prompt shows.
"""
