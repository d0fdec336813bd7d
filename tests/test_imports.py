"""No import circles: within each package, the modules' imports (deferred ones inside functions too)
form no cycle. A deferred import only hides a circle from Python's loader, not from a reader.

Services start background work by name (webapp.common.queue) rather than importing their own tasks,
and the sandbox providers are found through sandbox_workers.registry rather than by `base`.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent_core", "sandbox_workers", "webapp")


def _modules() -> dict[str, Path]:
    mods = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
            mods[name] = path
    return mods


def _imported(mods: dict[str, Path], module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The project modules an import statement of `module` loads (the nearest module for a name)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            parts = module.split(".")
            if mods[module].name != "__init__.py":
                parts = parts[:-1]
            parts = parts[: len(parts) - (node.level - 1)]
            base = ".".join([*parts, base] if base else parts)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
    found = []
    for name in names:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        if name:
            found.append(name)
    return found


def import_graph() -> dict[str, set[str]]:
    mods = _modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for module, path in mods.items():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for dep in _imported(mods, module, node):
                    # A package importing its own submodules is how packages work, not a circle.
                    if dep != module and not dep.startswith(module + "."):
                        graph[module].add(dep)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_cycle_finder_finds_a_circle_and_only_a_circle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_import_circle_in(package):
    graph = {m: deps for m, deps in import_graph().items() if m.split(".")[0] == package}
    found = cycles(graph)
    assert not found, "import circles (each a set of modules that import one another):\n" + "\n".join(
        " ↔ ".join(c) for c in found
    )


def test_every_task_a_service_enqueues_by_name_is_registered_and_routed():
    from webapp.celery import app
    from webapp.common.queue import ENQUEUED, enqueue

    app.loader.import_default_modules()
    for name in ENQUEUED:
        assert name in app.tasks, f"{name} is enqueued by name but no such task is registered"
        assert app.amqp.router.route({}, name)["queue"].name in {q.name for q in app.conf.task_queues}
    with pytest.raises(ValueError, match="not a task services enqueue"):
        enqueue("webapp.rollouts.tasks.no_such_task", 1)


# The floors of webapp, ground first: an app imports only apps on its own floor or below, and no two
# apps import each other. Each app's __init__ says what it owns, what it calls and who calls it.
FLOORS = (
    ("accounts", "common"),  # who is asking; shared web plumbing
    ("policies", "catalog"),  # what an agent is; what a task is
    ("episodes",),  # what happened: episodes, steps, task statistics
    ("sandboxes",),  # where it happens: hosts, sandboxes, leases, live access
    ("reviews", "annotation", "rollouts"),  # people and agents producing episodes
    ("datasets",),  # episodes routed into versions, exports, flywheel rounds
    ("training",),  # runs on dataset versions, checkpoints, merges
    ("dashboards", "demo"),  # reading everything; seeding a demo
)


def app_graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for module, deps in import_graph().items():
        parts = module.split(".")
        if parts[0] != "webapp" or len(parts) < 2:
            continue
        for dep in deps:
            dep_parts = dep.split(".")
            if dep_parts[0] == "webapp" and len(dep_parts) > 1 and dep_parts[1] != parts[1]:
                edges[parts[1]].add(dep_parts[1])
    return edges


def test_every_webapp_app_has_a_floor():
    apps = {p.name for p in (ROOT / "webapp").iterdir() if (p / "__init__.py").exists()}
    placed = {app for floor in FLOORS for app in floor}
    assert apps == placed, f"apps without a floor: {apps - placed}; floors naming no app: {placed - apps}"


def test_no_webapp_app_imports_a_floor_above_or_one_that_imports_it():
    floor_of = {app: n for n, floor in enumerate(FLOORS) for app in floor}
    edges = app_graph()
    upward = sorted(
        f"{a} (floor {floor_of[a]}) imports {b} (floor {floor_of[b]})"
        for a, deps in edges.items()
        for b in deps
        if b in floor_of and a in floor_of and floor_of[b] > floor_of[a]
    )
    mutual = sorted(
        {" ↔ ".join(sorted((a, b))) for a, deps in edges.items() for b in deps if a in edges.get(b, ())}
    )
    assert not upward and not mutual, "\n".join(upward + mutual)


# sandbox_workers stands on its ground and spreads two wings: the providers (and the confinement they
# share) and the live views stand on the ground (base, registry, the pool, profiles, display, …); the
# ground imports neither wing, and neither wing imports the other. The host and the local rollouts stand
# above and put them together; nothing imports them. Each package's __init__ says what it owns, calls and
# is called by.
SANDBOX_WINGS = ("providers", "live")
SANDBOX_TOP = ("host", "local_rollouts")


def wing_violations(graph: dict[str, set[str]]) -> list[str]:
    """The imports between parts of sandbox_workers that its ground, wings and top forbid."""
    found = []
    for module, deps in graph.items():
        parts = module.split(".")
        if parts[0] != "sandbox_workers" or len(parts) < 2:
            continue
        for dep in deps:
            dep_parts = dep.split(".")
            if dep_parts[0] != "sandbox_workers" or len(dep_parts) < 2 or dep_parts[1] == parts[1]:
                continue
            if dep_parts[1] in SANDBOX_TOP:
                found.append(f"{module} imports {dep}, which stands on top (nothing imports it)")
            elif dep_parts[1] in SANDBOX_WINGS and parts[1] not in SANDBOX_TOP:
                where = "the wing " + parts[1] if parts[1] in SANDBOX_WINGS else "the ground"
                found.append(f"{module} ({where}) imports {dep} (the wing {dep_parts[1]})")
    return sorted(found)


def test_the_wing_rule_finds_the_ground_or_a_wing_importing_a_wing():
    graph = {
        "sandbox_workers.base": {"sandbox_workers.providers.xdesktop.provider"},
        "sandbox_workers.live.relay": {"sandbox_workers.providers.confine.bwrap", "sandbox_workers.pool"},
        "sandbox_workers.providers.browser.session": {"sandbox_workers.display.cdp", "sandbox_workers.host"},
        "sandbox_workers.host": {"sandbox_workers.live.relay", "sandbox_workers.pool"},
        "sandbox_workers.providers.xdesktop.provider": {"sandbox_workers.providers.confine.bwrap"},
    }
    assert wing_violations(graph) == [
        "sandbox_workers.base (the ground) imports sandbox_workers.providers.xdesktop.provider "
        "(the wing providers)",
        "sandbox_workers.live.relay (the wing live) imports sandbox_workers.providers.confine.bwrap "
        "(the wing providers)",
        "sandbox_workers.providers.browser.session imports sandbox_workers.host, which stands on top "
        "(nothing imports it)",
    ]


def test_sandbox_workers_ground_imports_no_wing_and_no_wing_the_other():
    for name in (*SANDBOX_WINGS, *SANDBOX_TOP):
        path = ROOT / "sandbox_workers" / name
        assert path.is_dir() or path.with_suffix(".py").exists(), f"no part {name} in sandbox_workers"
    found = wing_violations(import_graph())
    assert not found, "\n".join(found)
