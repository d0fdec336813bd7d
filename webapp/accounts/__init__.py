"""Accounts (floor 0): who is asking. Users, the four roles (annotator, reviewer, researcher, admin) as
groups with their permissions (`roles.py`, synced after every migrate), API tokens, login throttling.

Owns: roles and permissions, API tokens, `create_user`.
Calls: nothing in webapp.
Called by: every app (permission checks), webapp.common.api (token authentication).
"""
