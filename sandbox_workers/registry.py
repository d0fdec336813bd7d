"""Which provider class serves each provider name.

The built-in providers are named here by module and imported on first use, so neither `base` (which
defines what a provider is) nor the pool imports them: the providers import `base`, never the other
way round. A provider outside this package registers itself with `base.register_provider` once its
module is imported.
"""

from __future__ import annotations

import importlib

from sandbox_workers.base import PROVIDERS, Provider, SandboxError

BUILT_IN = {
    "xdesktop": "sandbox_workers.providers.xdesktop",
    "browser": "sandbox_workers.providers.browser",
    "android": "sandbox_workers.providers.android",
}
"""Provider name → the module whose import registers it."""


def provider_class(name: str) -> type[Provider]:
    """The provider registered as `name`; raises with the valid names."""
    if name not in PROVIDERS and name in BUILT_IN:
        importlib.import_module(BUILT_IN[name])
    try:
        return PROVIDERS[name]
    except KeyError:
        valid = sorted(set(PROVIDERS) | set(BUILT_IN))
        raise SandboxError(f"unknown provider {name!r}; valid: {', '.join(valid)}") from None
