"""Fixtures of the X desktop and confinement tests (names start with xdesktop_ / confine_)."""

from __future__ import annotations

import importlib
import shutil
import sys
import types
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from sandbox_workers.base import Profile
from sandbox_workers.providers.browser import BrowserProvider
from tests.procs import worker_slot

XDESKTOP_TOOLS = ("Xvfb", "x11vnc", "bwrap", "openbox", "xterm", "dbus-daemon")


def xdesktop_module() -> types.ModuleType:
    """sandbox_workers.providers.xdesktop, even while a sibling provider module does not import yet."""
    try:
        return importlib.import_module("sandbox_workers.providers.xdesktop")
    except Exception:  # noqa: BLE001 (a sibling's import error: load ours without the package __init__)
        if "sandbox_workers.providers" not in sys.modules:
            pkg = types.ModuleType("sandbox_workers.providers")
            pkg.__path__ = [str(Path(__file__).resolve().parents[2] / "sandbox_workers" / "providers")]
            sys.modules["sandbox_workers.providers"] = pkg
        return importlib.import_module("sandbox_workers.providers.xdesktop")


def reachable(base: Path) -> Path:
    """`base` with o+x on its parents: the sandbox uid must traverse them (pytest's are 0700)."""
    for parent in [base, *base.parents]:
        if parent in (Path("/tmp"), Path("/")):
            break
        parent.chmod(parent.stat().st_mode | 0o011)
    return base


@pytest.fixture(scope="session")
def xdesktop_tools() -> None:
    """Skip unless the desktop's programs are installed."""
    missing = [t for t in XDESKTOP_TOOLS if shutil.which(t) is None]
    if missing:
        pytest.skip(f"not installed: {', '.join(missing)}")


@pytest.fixture
def xdesktop_root(tmp_path: Path) -> Path:
    """A fresh sandbox root the sandbox uid can reach."""
    return reachable(tmp_path) / "sandbox"


@pytest.fixture
def xdesktop_factory(xdesktop_tools: None, tmp_path: Path) -> Iterator[Callable[..., Any]]:
    """make(name, **profile) → a started XDesktopProvider; every one is stopped at the end."""
    mod = xdesktop_module()
    made: list[Any] = []
    base = reachable(tmp_path)

    def make(name: str = "sb", *, start: bool = True, **profile: Any) -> Any:
        p = mod.XDesktopProvider(
            sandbox_id=f"xdt-{name}-{tmp_path.name[-12:]}",
            profile=Profile(name=name, provider="xdesktop", **profile),
            root=base / name,
        )
        made.append(p)
        if start:
            p.start()
        return p

    yield make
    for p in made:
        p.stop()
        if p.root.exists():  # detached by the test (a "host restart") and never adopted and stopped
            mod.XDesktopProvider.cleanup(root=p.root, state={})


@pytest.fixture(scope="module")
def xdesktop_sandbox(xdesktop_tools: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One started desktop (xterm) shared by the tests of a module that do not break it."""
    mod = xdesktop_module()
    base = reachable(tmp_path_factory.mktemp("xdesktop"))
    p = mod.XDesktopProvider(
        sandbox_id=f"xdt-shared-{base.name}", profile=Profile(name="x", provider="xdesktop"), root=base / "sb"
    )
    p.start()
    yield p
    p.stop()


@contextmanager
def started_browser(
    tmp_path_factory: pytest.TempPathFactory, name: str, slot: int
) -> Iterator[BrowserProvider]:
    """A started (confined) browser sandbox named `name` on this xdist worker's `slot`, removed after."""
    root = reachable(tmp_path_factory.mktemp(name)) / "sb"
    provider = BrowserProvider(sandbox_id=name, profile=Profile(name="b", provider="browser"), root=root)
    provider.slot = worker_slot(slot)
    provider.start()
    try:
        yield provider
    finally:
        provider.stop()
        shutil.rmtree(root, ignore_errors=True)


def describe(outcome: Any) -> str:
    """An episode's outcome as a failed assertion should show it: how it stopped, its steps, its check."""
    steps = [s.action_text or s.invalid_reason for s in outcome.steps]
    return f"{outcome.stop_reason}, steps {steps}, check {outcome.check}"
