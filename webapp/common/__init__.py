"""Common (floor 0): pieces every app uses. Content-addressed storage, live broadcast to WebSocket
groups, request guards, text limits, the API's error and paging helpers, and `queue`: background work
started by task name (services never import their own Celery tasks).

Calls: accounts (API token authentication).
Called by: every app.
"""
