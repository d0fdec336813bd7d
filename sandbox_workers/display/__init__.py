"""Driving a sandbox's screen: X11 for the desktop, Chromium's DevTools protocol for the browser.

Owns: key names (keys), the X connection and its input (x11), screen capture and PNG encoding
(capture), the Playwright loop, page input, screencast and virtual time (cdp).
Calls: base (errors, screenshots) and agent_core's actions only. Called by: the providers.
"""
