"""The package layout and the direction of imports."""

from __future__ import annotations

import os
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DJANGO_SETTINGS_MODULE",)}
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.mark.parametrize("package", ["agent_core", "sandbox_workers"])
def test_core_packages_import_without_django_settings(package):
    # Every module of the package imports with no Django settings, and none pulls Django in.
    code = f"""
import importlib, pkgutil, sys
import {package}
for m in pkgutil.walk_packages({package}.__path__, "{package}."):
    importlib.import_module(m.name)
bad = sorted(n for n in sys.modules if n.split(".")[0] in ("django", "celery", "channels"))
assert not bad, bad
"""
    result = subprocess.run([sys.executable, "-c", code], env=_clean_env(), capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


def test_agent_core_never_imports_sandbox_workers_or_webapp():
    for path in (ROOT / "agent_core").rglob("*.py"):
        text = path.read_text()
        assert "import webapp" not in text and "from webapp" not in text, path
        assert "sandbox_workers" not in text, path


def test_sandbox_workers_never_imports_webapp():
    for path in (ROOT / "sandbox_workers").rglob("*.py"):
        text = path.read_text()
        assert "import webapp" not in text and "from webapp" not in text, path


def test_web_process_never_imports_torch():
    # Load the ASGI app and every URL's view module the way daphne does, then look for torch.
    code = """
import sys
from webapp.asgi import application
from django.urls import get_resolver
get_resolver().url_patterns
import webapp.celery
assert "torch" not in sys.modules and "transformers" not in sys.modules, "the web process imported torch"
"""
    env = _clean_env()
    env.setdefault("SECRET_KEY", "x" * 40)
    result = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr


def test_layout_has_every_part_of_the_design():
    for name in (
        "webapp",
        "agent_core",
        "sandbox_workers",
        "templates",
        "static",
        "tests",
        "bench",
        "manage.py",
    ):
        assert (ROOT / name).exists(), name
    assert (ROOT / "docker-compose.yml").exists()
    apps = {m.name for m in pkgutil.iter_modules([str(ROOT / "webapp")]) if m.ispkg}
    assert {
        "accounts",
        "catalog",
        "sandboxes",
        "episodes",
        "reviews",
        "datasets",
        "training",
        "dashboards",
    } <= apps
