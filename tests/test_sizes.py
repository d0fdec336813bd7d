"""Modules a reader can hold in their head: no product module over 500 lines, no function over 80.

Long ones are split along their seams (issue 20: every noun in its room). Migrations are generated
history and do not count.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("agent_core", "sandbox_workers", "webapp")
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 80


def _modules() -> list[Path]:
    return sorted(
        p
        for pkg in PACKAGES
        for p in (ROOT / pkg).rglob("*.py")
        if "migrations" not in p.relative_to(ROOT).parts
    )


def long_functions(source: str, *, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """`name (n lines)` of each function or method of `source` longer than `limit` lines."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            length = (node.end_lineno or node.lineno) - node.lineno + 1
            if length > limit:
                found.append(f"{node.name} ({length} lines)")
    return found


def test_the_function_finder_counts_a_function_from_its_def_to_its_last_line():
    body = "\n".join(f"    x{i} = {i}" for i in range(80))
    assert long_functions(f"def ok():\n{body[: body.rindex(chr(10))]}\n") == []
    assert long_functions(f"def long():\n{body}\n") == ["long (81 lines)"]
    assert long_functions(
        f"class C:\n    async def m(self):\n    {body.replace(chr(10), chr(10) + '    ')}\n"
    ) == ["m (81 lines)"]


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_over_500_lines(package):
    long = [
        f"{p.relative_to(ROOT)} ({n} lines)"
        for p in _modules()
        if p.relative_to(ROOT).parts[0] == package
        and (n := len(p.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert not long, "split along its seams: " + ", ".join(long)


@pytest.mark.parametrize("package", PACKAGES)
def test_no_function_over_80_lines(package):
    long = [
        f"{p.relative_to(ROOT)}: {f}"
        for p in _modules()
        if p.relative_to(ROOT).parts[0] == package
        for f in long_functions(p.read_text())
    ]
    assert not long, "split into named steps: " + ", ".join(long)
