"""The built-in sandbox providers; importing this package registers them."""

from sandbox_workers.providers import android, browser, xdesktop

__all__ = ["android", "browser", "xdesktop"]
