"""Annotation (floor 4): people demonstrating. Assignments and a demonstration's lifecycle (queued,
prepared on the `interactive` queue, recorded through the session socket).

Owns: Assignment, `demo_start` / `demo_prepare` / `demo_submit`, the session recorder (`session.py`, driven
by `live_input.py` for the session socket and for the live transports' control input).
Calls: episodes, sandboxes (lease, control), catalog, policies (a policy's suggestion), reviews.
Called by: demo (seeding an assignment).
"""
