"""Browser sandboxes: Debian's Chromium, headless, driven by Playwright over CDP.

Owns: launching Chromium confined and tracking its processes (chromium), the page, its lifecycle and
live frames (session), the provider itself (provider: stepping, files, typed calls, snapshots).
Calls: base, miniwob, display (cdp, keys), providers.confine. Called by: the registry (by name),
local_rollouts, tests and bench.
"""

from sandbox_workers.providers.browser.provider import BrowserProvider

__all__ = ["BrowserProvider"]
