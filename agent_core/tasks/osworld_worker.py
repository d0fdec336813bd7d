"""OSWorld's own metric functions (`desktop_env.evaluators.metrics`), served one JSON line at a time.

Run by `agent_core.tasks.osworld_metrics` as `.venv-osworld/bin/python <this file>` (scripts/osworld-env.sh):
desktop-env's pins clash with ours, so it imports only the standard library and that environment, never
the project. One request per stdin line, one reply per stdout line; the process stays up between
requests because a metric module's imports take seconds.

    {"func": name, "result": v, "expected": v, "options": {...}, "timeout": s}  → {"score": float}
        `expected` absent: func(result, **options), as DesktopEnv.evaluate() calls a metric without one.
    {"func": name, "probe": true}  → {"module": "…metrics.vlc", "missing": ["librosa"]}
    {"func": …, "getter": {"name": "profile_name", "config": {...}, "files": ["Default/Preferences"]},
     "result": <file value or null per file>, …}  → the metric on what OSWorld's own getter
        (`desktop_env.evaluators.getters`, get_<name>) returns on those files: they are what its
        controller's get_file gives it, by their place in Chrome's profile folder (`files`).
    {"func": "chrome_open_tabs", "setup": "chrome_open_tabs", "params": {...}, "devtools": <endpoint>}
        → {"ok": true}: OSWorld's own SetupController step (`DEVTOOLS_SETUPS`), connected over CDP to
        the desktop's Chromium through the sandbox host's endpoint (as the DevTools getters are:
        {"getter": {"name": "open_tabs_info", "config": {...}, "devtools": true}, "result": {"endpoint"}}).
    a failure of any               → {"error": "<type>: <message>", "traceback": "…"} (+ "timeout": true)

A value {"__file__": "<base64>", "name": "x.xlsx"} (also inside lists and mappings: getters with
`multi`) becomes the path of that file, written to a fresh folder that is removed after the request,
as OSWorld's getters hand metrics local paths; null stays None (OSWorld's "file not found").

`metrics/__init__.py` imports every module (and so easyocr, librosa, …), so it is never run: the
packages are registered empty and only the module that defines the function is imported, the one
`__init__.py` imports the name from (read with `ast`, the last import winning as it does there;
`check_file_exists` is in docs.py and gimp.py), else the module whose source defines it. Libraries
left out of the environment (`LEFT_OUT`) are stub modules: the rest of their module loads, and a
metric that touches one fails with a clear error even where OSWorld's code catches the exception
(compare_audios would otherwise score two unreadable files 1.0).
"""

from __future__ import annotations

import ast
import base64
import contextlib
import importlib
import importlib.machinery
import importlib.util
import json
import os
import re
import signal
import sys
import tempfile
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

PACKAGE = "desktop_env.evaluators.metrics"
GETTERS = "desktop_env.evaluators.getters"
HOME = "/home/user"  # OSWorld's VM user's home: where its getters look
# What the getters' modules import at their top, where it is not installed (Google Drive; Playwright is,
# for the DevTools getters): stand-ins whose every name fails when called.
GETTER_STUBS = ("playwright", "playwright.sync_api", "pydrive", "pydrive.auth", "pydrive.drive")
DEFAULT_TIMEOUT = 120.0
# Heavy libraries scripts/osworld-env.sh does not install (torch-based OCR, audio analysis).
LEFT_OUT = ("easyocr", "librosa")
_touched: set[str] = set()


class MetricTimeout(BaseException):
    """A request ran past its time; a BaseException so a metric's `except Exception` lets it through."""


class _LeftOut(types.ModuleType):
    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        _touched.add(self.__name__)
        raise ModuleNotFoundError(f"{self.__name__} is not installed in the OSWorld metrics environment")


class _Stub(types.ModuleType):
    """A module not installed here whose names exist (a getter module imports them) but fail if used."""

    def __getattr__(self, attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)

        def unavailable(*args: Any, **kwargs: Any) -> Any:
            _touched.add(self.__name__)
            raise ModuleNotFoundError(f"{self.__name__} is not installed in the OSWorld metrics environment")

        return unavailable


def _register_packages() -> Path:
    """Empty package modules for desktop_env, …evaluators, …metrics and …getters; the metrics folder."""
    spec = importlib.util.find_spec("desktop_env")  # finds the package without running its __init__
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("desktop_env is not installed (run scripts/osworld-env.sh)")
    top = Path(list(spec.submodule_search_locations)[0])
    folders = {
        "desktop_env": top,
        "desktop_env.evaluators": top / "evaluators",
        PACKAGE: top / "evaluators/metrics",
        GETTERS: top / "evaluators/getters",
    }
    for name, folder in folders.items():
        if name not in sys.modules:
            package_spec = importlib.machinery.ModuleSpec(name, None, is_package=True)
            package_spec.submodule_search_locations = [str(folder)]
            sys.modules[name] = importlib.util.module_from_spec(package_spec)
    for lib in LEFT_OUT:
        if lib not in sys.modules and importlib.util.find_spec(lib) is None:
            sys.modules[lib] = _LeftOut(lib)
    for lib in GETTER_STUBS:
        root = lib.split(".")[0]
        installed = not isinstance(sys.modules.get(root), _Stub) and (
            root in sys.modules or importlib.util.find_spec(root) is not None
        )
        if lib not in sys.modules and not installed:
            sys.modules[lib] = _Stub(lib)
    return folders[PACKAGE]


class _Controller:
    """The part of OSWorld's PythonController its file-reading getters use, over files read before."""

    def __init__(self, files: dict[str, bytes | None]) -> None:
        self.files = files

    def execute_python_command(self, command: str) -> dict[str, Any]:
        # The getters ask the VM where a file is ("import os; print(os.path.join(os.getenv('HOME'), …))").
        import subprocess

        done = subprocess.run(  # noqa: S603 - the getter's own code, from desktop-env's source
            [sys.executable, "-c", command],
            env={"HOME": HOME, "PATH": os.environ.get("PATH", "/usr/bin:/bin")},
            capture_output=True,
            text=True,
            timeout=30,
        )
        status = "success" if done.returncode == 0 else "error"
        return {"status": status, "output": done.stdout, "error": done.stderr, "returncode": done.returncode}

    def get_file(self, path: str) -> bytes | None:
        """The file's bytes; None for one that is not there, as OSWorld's controller gives."""
        for place, data in self.files.items():
            if path.replace("\\", "/").endswith("/" + place):
                return data
        return None


class _GetterEnv:
    """What OSWorld's getters read of `env`: the platform, the controller, a cache folder."""

    vm_platform = "Linux"

    def __init__(self, files: dict[str, bytes | None], cache_dir: str) -> None:
        self.controller = _Controller(files)
        self.cache_dir = cache_dir


def _getter(name: str) -> Callable[..., Any]:
    """OSWorld's getter get_<name>, its module (alone) imported."""
    folder = Path(sys.modules[GETTERS].__path__[0])
    for path in sorted(folder.glob("*.py")):
        if re.search(rf"^def get_{re.escape(name)}\(", path.read_text(encoding="utf-8"), re.MULTILINE):
            return getattr(importlib.import_module(f"{GETTERS}.{path.stem}"), f"get_{name}")  # type: ignore[no-any-return]
    raise LookupError(f"get_{name} is not a getter of {GETTERS}")


class _DevToolsEnv(_GetterEnv):
    """`env` for a getter that connects to Chrome's DevTools (`connect_over_cdp(f"http://{vm_ip}:{chromium_port}")`):
    the sandbox host's endpoint for the desktop's Chromium, split so that OSWorld's own formatting
    rebuilds it. Without one (no browser the host started), a closed port: the getter's own
    could-not-connect path runs, as on a VM whose Chrome is gone."""

    def __init__(self, endpoint: str | None, cache_dir: str, tree: str | None = None) -> None:
        super().__init__({}, cache_dir)
        self.controller.get_accessibility_tree = lambda: tree  # type: ignore[attr-defined]
        from urllib.parse import urlsplit

        if endpoint:
            url = urlsplit(endpoint)
            self.vm_ip = url.hostname or "127.0.0.1"
            self.chromium_port = f"{url.port or 80}{url.path}"
        else:
            self.vm_ip, self.chromium_port = "127.0.0.1", "9"
        self.server_port = "9"  # OSWorld's VM server, which its fallback asks to relaunch Chrome: none here


# OSWorld's setup steps that drive Chrome through DevTools: its SetupController's own methods, each
# compiled alone from desktop_env/controllers/setup.py (whose module imports Google Drive, AWS, …).
DEVTOOLS_SETUPS = ("chrome_open_tabs", "chrome_close_tabs")


def _setup_method(name: str) -> Callable[..., Any]:
    """SetupController._<name>_setup from OSWorld's source, with the names its body uses."""
    if name not in DEVTOOLS_SETUPS:
        raise LookupError(
            f"{name!r} is not a setup step this worker runs; valid: {', '.join(DEVTOOLS_SETUPS)}"
        )
    path = Path(sys.modules[GETTERS].__path__[0]).parent.parent / "controllers/setup.py"
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found: list[ast.stmt] = [
        node
        for cls in tree.body
        if isinstance(cls, ast.ClassDef) and cls.name == "SetupController"
        for node in cls.body
        if isinstance(node, ast.FunctionDef) and node.name == f"_{name}_setup"
    ]
    if not found:
        raise LookupError(f"SetupController._{name}_setup is not in {path}")
    # The module's own top-level imports and names, each where it loads here (Google Drive's, AWS's and
    # the like do not; the two Chrome steps use none of them).
    namespace: dict[str, Any] = {"__name__": "desktop_env.controllers.setup"}
    for node in tree.body:
        if isinstance(node, ast.Import | ast.ImportFrom | ast.Assign):
            with contextlib.suppress(Exception):
                exec(compile(ast.Module(body=[node], type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    exec(compile(ast.Module(body=found, type_ignores=[]), str(path), "exec"), namespace)  # noqa: S102
    return namespace[f"_{name}_setup"]  # type: ignore[no-any-return]


def _run_setup(request: dict[str, Any], folder: Path) -> dict[str, Any]:
    """OSWorld's own setup step `setup` ({params}) on the live browser behind `devtools`."""
    cache = folder / "setup-cache"
    cache.mkdir()
    endpoint = request.get("devtools")
    controller = _DevToolsEnv(str(endpoint) if endpoint else None, str(cache))
    _setup_method(str(request["setup"]))(controller, **dict(request.get("params") or {}))
    return {"ok": True}


def _expected_from_getter(request: dict[str, Any], folder: Path) -> Any:
    """What OSWorld's getter of what is expected (rule_relativeTime) gives on its config; `expected`, when
    given, is the desktop's time zone, which it then computes in."""
    spec = request["expected_getter"]
    config = dict(spec.get("config") or {})
    zone = request.get("expected")
    if isinstance(zone, str) and zone.strip():
        config["rules"] = {**dict(config.get("rules") or {}), "timezone": zone.strip()}
    cache = folder / "expected-cache"
    cache.mkdir()
    return _getter(str(spec["name"]))(_GetterEnv({}, str(cache)), config)


def _run_getter(spec: dict[str, Any], result: Any, folder: Path) -> Any:
    """What OSWorld's getter returns on the files the probe read (`result`: one value or a list), or,
    for a DevTools getter (`devtools`), on the live browser behind the endpoint the probe got."""
    cache = folder / "getter-cache"
    if spec.get("devtools"):
        cache.mkdir()
        state = result if isinstance(result, dict) else {}
        endpoint, tree = state.get("endpoint"), state.get("tree")
        env = _DevToolsEnv(str(endpoint) if endpoint else None, str(cache), str(tree) if tree else None)
        return _getter(str(spec["name"]))(env, dict(spec.get("config") or {}))
    places = [str(p) for p in spec.get("files", [])]
    values = result if isinstance(result, list) else [result]
    if len(values) != len(places):
        raise ValueError(f"the getter needs {len(places)} file(s), the probe read {len(values)}")
    files = {
        place: base64.b64decode(v["__file__"]) if isinstance(v, dict) and "__file__" in v else None
        for place, v in zip(places, values, strict=True)
    }
    cache.mkdir()
    return _getter(str(spec["name"]))(_GetterEnv(files, str(cache)), dict(spec.get("config") or {}))


class Metrics:
    """OSWorld's metric functions by name, each module imported on first use."""

    def __init__(self) -> None:
        self.folder = _register_packages()
        self.exported = self._exported()
        self._defined: dict[str, str] | None = None

    def _exported(self) -> dict[str, str]:
        # `from .table import (compare_table, …)` in __init__.py, in order: a later import rebinds the name.
        tree = ast.parse((self.folder / "__init__.py").read_text(encoding="utf-8"))
        names: dict[str, str] = {}
        for node in tree.body:
            if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
                for alias in node.names:
                    names[alias.asname or alias.name] = node.module
        return names

    def module_of(self, name: str) -> str:
        """The submodule (`table`) that defines the metric `name`; LookupError when none does."""
        if name in self.exported:
            return self.exported[name]
        if self._defined is None:
            self._defined = {}
            for path in sorted(self.folder.glob("*.py")):
                if path.stem != "__init__":
                    for found in re.findall(r"^def (\w+)\(", path.read_text(encoding="utf-8"), re.MULTILINE):
                        self._defined.setdefault(found, path.stem)
        if name not in self._defined:
            raise LookupError(
                f"{name!r} is not a metric of {PACKAGE}; valid: {', '.join(sorted(self.exported))}"
            )
        return self._defined[name]

    def get(self, name: str) -> Callable[..., Any]:
        """The metric function called `name`, its module imported (alone) if it was not yet."""
        module = importlib.import_module(f"{PACKAGE}.{self.module_of(name)}")
        func = getattr(module, name)
        if not callable(func):
            raise TypeError(f"{PACKAGE}.{module.__name__}.{name} is not a function")
        return func  # type: ignore[no-any-return]

    def probe(self, name: str) -> dict[str, Any]:
        """Where `name` loads from and which left-out libraries its own code names."""
        func = self.get(name)
        names = set(getattr(getattr(func, "__code__", None), "co_names", ()))
        return {"module": func.__module__, "missing": [lib for lib in LEFT_OUT if lib in names]}


def _materialize(value: Any, folder: Path, counter: list[int]) -> Any:
    if isinstance(value, list):
        return [_materialize(v, folder, counter) for v in value]
    if isinstance(value, dict):
        if "__file__" in value:
            name = os.path.basename(str(value.get("name") or "file"))
            if name in ("", ".", ".."):
                raise ValueError(f"bad file name {value.get('name')!r}")
            # One folder per file: the result and the expected file may share a name.
            sub = folder / str(counter[0])
            counter[0] += 1
            sub.mkdir()
            path = sub / name
            path.write_bytes(base64.b64decode(value["__file__"]))
            return str(path)
        return {k: _materialize(v, folder, counter) for k, v in value.items()}
    return value


def _on_alarm(signum: int, frame: types.FrameType | None) -> None:
    raise MetricTimeout


def handle(metrics: Metrics, request: dict[str, Any]) -> dict[str, Any]:
    """The reply to one request; never raises."""
    name = request.get("func")
    if not isinstance(name, str):
        return {"error": "ValueError: the request names no func", "traceback": ""}
    timeout = float(request.get("timeout") or DEFAULT_TIMEOUT)
    cwd = os.getcwd()
    _touched.clear()
    with tempfile.TemporaryDirectory(prefix="osworld-metric-") as tmp:
        try:
            signal.setitimer(signal.ITIMER_REAL, timeout)
            if request.get("probe"):
                return metrics.probe(name)
            if request.get("setup"):
                return _run_setup(request, Path(tmp))
            func = metrics.get(name)
            counter = [0]
            if request.get("getter"):
                result = _run_getter(request["getter"], request.get("result"), Path(tmp))
            else:
                result = _materialize(request.get("result"), Path(tmp), counter)
            options = _materialize(request.get("options") or {}, Path(tmp), counter)
            # Metrics write scratch files to the working folder: keep them in the request's folder.
            os.chdir(tmp)
            if request.get("expected_getter"):
                value = func(result, _expected_from_getter(request, Path(tmp)), **options)
            elif "expected" in request:
                value = func(result, _materialize(request["expected"], Path(tmp), counter), **options)
            else:
                value = func(result, **options)
        except MetricTimeout:
            return {"error": f"TimeoutError: {name} gave no score within {timeout:g} s", "timeout": True}
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}", "traceback": traceback.format_exc()}
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            os.chdir(cwd)
    if _touched:
        libs = ", ".join(sorted(_touched))
        return {"error": f"ModuleNotFoundError: {name} needs {libs}, not in the OSWorld metrics environment"}
    # OSWorld takes float(metric) of whatever a metric returns (bools and numpy scalars included).
    try:
        if isinstance(value, str | bytes):
            raise TypeError
        return {"score": float(value)}
    except (TypeError, ValueError):
        return {"error": f"TypeError: {name} returned {value!r}, not a number"}


def serve(stdin: IO[bytes], out: IO[str]) -> None:
    """Answer requests, one a line, until stdin closes."""
    metrics = Metrics()
    signal.signal(signal.SIGALRM, _on_alarm)
    for line in stdin:
        if line.strip():
            reply: dict[str, Any]
            try:
                request = json.loads(line)
                if not isinstance(request, dict):
                    raise ValueError("not a JSON object")
                float(request.get("timeout") or 0)
            except (ValueError, TypeError) as exc:
                reply = {"error": f"ValueError: a bad request: {exc}"}
            else:
                try:
                    reply = handle(metrics, request)
                except MetricTimeout:  # the timer fired just as the metric returned
                    reply = {"error": "TimeoutError: the request ran out of time", "timeout": True}
            out.write(json.dumps(reply) + "\n")
            out.flush()


def probe_all(out: IO[str]) -> int:
    """Load every metric that metrics/__init__.py exports; write a JSON summary; 1 when any fails."""
    metrics = Metrics()
    failed: dict[str, str] = {}
    needs: dict[str, list[str]] = {}
    for name in metrics.exported:
        try:
            missing = metrics.probe(name)["missing"]
        except Exception as exc:
            failed[name] = f"{type(exc).__name__}: {exc}"
            continue
        if missing:
            needs[name] = missing
    loaded = len(metrics.exported) - len(failed)
    summary = {"exported": len(metrics.exported), "loaded": loaded, "failed": failed, "needs_left_out": needs}
    out.write(json.dumps(summary, indent=1) + "\n")
    return 1 if failed else 0


def main() -> int:
    # Replies keep the real stdout; anything else written there (OSWorld's metrics print) goes to
    # stderr, so it cannot break a reply line.
    out = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)
    if sys.argv[1:] == ["--probe-all"]:
        return probe_all(out)
    serve(sys.stdin.buffer, out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
