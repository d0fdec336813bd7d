"""Common (floor 0): pieces every app uses. Content-addressed storage, live broadcast to WebSocket
groups, request guards, text limits, the API's error and paging helpers, `queue`: background work
started by task name (services never import their own Celery tasks), and `jobs`: the one lifecycle
(pending → running → finished | failed | cancelled) of the rows background workers own. The map of
every stateful row's states is `webapp.states`.

Calls: accounts (API token authentication).
Called by: every app.
"""
