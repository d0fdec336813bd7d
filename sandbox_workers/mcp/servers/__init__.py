"""The MCP servers that run INSIDE a sandbox (stdio transport, one process each).

They are started by `sandbox_workers.mcp.hub` through the sandbox's own confinement (its uid, bwrap
namespaces, cgroup and workspace), with this folder bound read-only into the sandbox as the package
`flywheel_mcp_servers` beside the host venv's site-packages: so they import only each other (relative
imports) and the `mcp` SDK, never the rest of `sandbox_workers`.
"""
