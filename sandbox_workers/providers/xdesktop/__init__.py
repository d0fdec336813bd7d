"""The X desktop sandbox: Xvfb + openbox + desktop apps, confined by bubblewrap.

Owns: what runs in a desktop (parts), its plumbing, its lifecycle (start, repair, reset, stop) and the
provider itself (provider: stepping, files, snapshots, host restarts). Calls: base, display (X11),
providers.confine. Called by: the registry (by name), the pool through it, tests and bench.
"""

from sandbox_workers.providers.xdesktop.provider import XDesktopProvider

__all__ = ["XDesktopProvider"]
