"""Confinement of sandboxed processes with bubblewrap, cgroups, rlimits and a disk quota.

Owns: the Confinement and its bwrap command line (bwrap), sandbox cgroups (cgroups), spawning confined
processes and running one to completion (spawning), file access that never leaves the workspace
(workspace), a disk volume per sandbox root (disk). Calls: base only. Called by: the providers that
confine (xdesktop; browser's Chromium).
"""
