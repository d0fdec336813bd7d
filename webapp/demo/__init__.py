"""The demo floor: `manage.py seed_demo` (one user per role, the built-in suites, baseline policies, a
tiny local policy, an assignment) for `make run`.

Owns: no models, only the seeding command.
Calls: every app it seeds (accounts, catalog, policies, annotation, training's tiny_policy command).
Called by: scripts/run.sh (`make run`), tests/webapp/accounts/test_roles_and_commands.py.
It sits on the top floor: nothing imports it.
"""
