"""Android sandboxes: one phone or emulator, reached through an adb server with adbutils.

Owns: the adb side (adb: a client that never starts a server, raw screencaps, key codes, text for
`input`) and the provider itself (provider). Calls: base, adbutils. Called by: the registry (by
name), the pool through it, tests.
"""

from sandbox_workers.providers.android.provider import AndroidProvider

__all__ = ["AndroidProvider"]
