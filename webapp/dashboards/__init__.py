"""Dashboards (floor 7): reading everything. Health samples of hosts and queues, metrics, the
rollout wall, and the pages and API that chart them.

Calls: every app below (reads only).
Called by: nothing in webapp.
"""
