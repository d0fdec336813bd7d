"""Import OSWorld tasks (`evaluation_examples/examples/<domain>/<id>.json`) as `flywheel-task/1` specs.

Every part of a task is mapped or the task is refused with an `OSWorldImportError` naming the task,
the item and what is missing; nothing is dropped silently (an unknown key is a refusal). The task runs
on the `office` desktop profile (OSWorld's applications, a 1920×1080 screen, $HOME /home/user as in
OSWorld's VM) and is scored by OSWorld's own metric functions (`osworld` metric: desktop-env's
functions in a process and environment of their own, `agent_core.tasks.osworld_metrics`) with
OSWorld's combination rule (`and`: 0 when any metric is 0, else the mean: `all_mean`; `or`: the
maximum: `any`). The document as given is kept under `origin.osworld`. Task files, many at once and
each under one domain: agent_core.tasks.osworld_files.

Setup steps (`config[i].type`, and `evaluator.postconfig`, which becomes `checker.before`):
    download           → fetch (by the sandbox host, into its content-addressed cache, mirror first)
    execute, command   → exec (argv lists are shell-quoted; `python` runs python3; `~` expanded by the
                         shell as OSWorld's server does); a `python -c` pyautogui script → pyautogui
                         (read with ast, run through the sandbox's own input path). Refused: sudo,
                         OSWorld's {PLACEHOLDER}s, `until`, `stdout`/`stderr` (OSWorld's host cache).
    launch             → launch, by `LAUNCH_APPS` (per-app flags; `socat`, OSWorld's DevTools port
                         forward, is skipped); `code` (VS Code) is refused: not packaged for Debian
    open               → launch of the app for the file's extension (`OPEN_APPS`; no extension: a
                         folder, pcmanfm)
    chrome_open_tabs,
    chrome_close_tabs  → osworld_setup: OSWorld's own SetupController steps, run by its code
                         (osworld_worker.py) over the DevTools of the desktop's Chromium (the host's
                         endpoint for the lease)
    activate_window,
    close_window       → window {action, name, strict, by_class}
    sleep              → wait
    refused            → googledrive, login (online accounts), and the rest of `SETUP_REFUSED`
Getters (`evaluator.result` / `evaluator.expected`):
    vm_file            → file probe, raw (a file for the metric, named as `dest`); `multi` → files
                         probe with `gives`. `time_suffix` only changes the name OSWorld gives its
                         local copy, which no metric reads.
    cloud_file         → fetch probe (the sandbox host's cache and mirror); `multi` refused
    vm_command_line    → exec probe with any_exit (OSWorld reads stdout whatever the exit code)
    vm_command_error   → exec probe of the command's stderr
    gimp_config_file   → file probe of ~/.config/GIMP/2.10/<file_name>
    rule               → expected: the rule's `rules`, as OSWorld's get_rule gives them
    open_tabs_info,
    page_info          → OSWorld's own getter, connected over CDP to the desktop's Chromium (the
                         probe gets the host's DevTools endpoint: `DEVTOOLS_GETTERS`)
    refused            → `GETTER_REFUSED` (Chrome's active tab, which OSWorld finds in its XML
                         accessibility tree; relative-time rules, …), each with its reason
Metrics: any function of desktop-env's metrics (`OSWORLD_METRICS`), with its options as given.
    `func: infeasible` → `infeasible: true` (no checker).
A task needs the network when a command or a launched URL reaches a web host (downloads do not: the
host fetches them): it is tagged `needs:network`. A Windows task (Windows paths, Windows apps) is
refused.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Iterable, Mapping
from pathlib import PurePosixPath
from typing import Any

from agent_core.tasks.documents import document_problem
from agent_core.tasks.osworld_evaluator import EvaluatorMapping
from agent_core.tasks.osworld_tables import (
    DROPPED_FLAGS,
    EVALUATOR_KEYS,
    HOME,
    HOME_DIRS,
    KILLERS,
    LAUNCH_APPS,
    OPEN_APPS,
    PLACEHOLDER,
    PROCESS_NAMES,
    PROFILE,
    ROOT_INSTALLS,
    ROOT_STEP,
    SCREEN,
    SETUP_REFUSED,
    SKIPPED_LAUNCHES,
    SUDO,
    TASK_KEYS,
    UNAVAILABLE_PROGRAMS,
    URL,
    WEB_URL,
    WINDOW_NAMES,
    WINDOWS_APPS,
    WINDOWS_PATH,
)
from agent_core.tasks.public_urls import download_refusal
from agent_core.tasks.spec import FORMAT, TaskSpec, TaskSpecError, parse_task

__all__ = ["HOME_DIRS", "OSWorldImportError", "import_osworld_task"]


class OSWorldImportError(TaskSpecError):
    """An OSWorld task that cannot be imported; the message names the task and the item."""


def import_osworld_task(doc: Mapping[str, Any], *, id_prefix: str = "osworld") -> TaskSpec:
    """The `flywheel-task/1` spec of one OSWorld task document; OSWorldImportError if any part of it
    has no faithful equivalent on our desktops."""
    if not isinstance(doc, Mapping):
        raise OSWorldImportError(f"OSWorld task: must be a JSON object, got {type(doc).__name__}")
    raw_id = doc.get("id")
    problem = document_problem(doc)
    if problem is not None:
        named = f" {raw_id}" if isinstance(raw_id, str) and problem[0] != "id" else ""
        raise OSWorldImportError(f"OSWorld task{named}: {problem[0]}: {problem[1]}")
    if not isinstance(raw_id, str) or not raw_id.strip():
        raise OSWorldImportError("OSWorld task: id must be a non-empty string")
    imp = _Importer(raw_id)
    unknown = sorted(set(map(str, doc)) - TASK_KEYS)
    if unknown:
        raise imp.error("task", f"unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(TASK_KEYS))}")
    instruction = doc.get("instruction")
    if not isinstance(instruction, str) or not instruction.strip():
        raise imp.error("instruction", "must be a non-empty string")
    apps = doc.get("related_apps", [])
    if not isinstance(apps, list) or not all(isinstance(a, str) for a in apps):
        raise imp.error("related_apps", "must be a list of strings")
    imp.check_platform(doc, apps)
    config = doc.get("config", [])
    if not isinstance(config, list):
        raise imp.error("config", "must be a list of setup steps")
    setup: list[dict[str, Any]] = [
        {"op": "exec", "command": "mkdir -p " + " ".join(f"{HOME}/{d}" for d in HOME_DIRS), "timeout": 10}
    ]
    for i, step in enumerate(config):
        setup.extend(imp.setup_step(f"config[{i}]", step))
    evaluator = doc.get("evaluator")
    if not isinstance(evaluator, Mapping):
        raise imp.error("evaluator", "must be an object")
    unknown = sorted(set(map(str, evaluator)) - EVALUATOR_KEYS)
    if unknown:
        raise imp.error("evaluator", f"unknown key(s) {', '.join(unknown)}")
    for key in ("proxy", "fixed_ip"):
        if doc.get(key) not in (None, False, True):
            raise imp.error(key, "must be true or false")
    if doc.get("proxy") or doc.get("fixed_ip"):
        imp.network.add(f"OSWorld runs it {'behind its proxy' if doc.get('proxy') else 'from a fixed IP'}")
    task: dict[str, Any] = {
        "format": FORMAT,
        "id": f"{id_prefix}/{raw_id.strip().lower()}",
        "title": _title(instruction),
        "instruction": instruction,
        "platform": "desktop",
        "profile": PROFILE,
        "setup": setup,
        "limits": {"max_steps": 15, "max_seconds": 900},
        "description": f"Imported from OSWorld task {raw_id}"
        + (f" ({doc['source']})" if isinstance(doc.get("source"), str) and doc["source"] else ""),
        "origin": {"osworld": json.loads(json.dumps(doc))},
    }
    if evaluator.get("func") == "infeasible":
        if set(evaluator) - {"func", "postconfig"} and any(evaluator.get(k) for k in ("result", "expected")):
            raise imp.error("evaluator", "an infeasible task has no result or expected to read")
        task["infeasible"] = True
    else:
        task["checker"] = imp.checker(evaluator)
    needs = sorted({*imp.apps, *(a.lower() for a in apps)})
    task["tags"] = ["osworld", *(f"app:{a}" for a in needs)]
    if isinstance(doc.get("snapshot"), str):
        task["tags"].append(f"osworld-snapshot:{doc['snapshot']}")
    if imp.network:
        task["tags"].append("needs:network")
        task["description"] += ". Needs the network: " + "; ".join(sorted(imp.network))
    try:
        return parse_task(task)
    except OSWorldImportError:
        raise
    except TaskSpecError as exc:
        raise imp.error("task", f"the imported document is not a valid task: {exc}") from None


def _title(instruction: str, limit: int = 80) -> str:
    one_line = " ".join(instruction.split())
    return one_line if len(one_line) <= limit else one_line[: limit - 1].rstrip() + "…"


class _Importer(EvaluatorMapping):
    """The conversions of one task (so every error names it), and what the task turned out to need."""

    def __init__(self, task_id: str) -> None:
        self.task_id = task_id
        self.apps: set[str] = set()
        self.network: set[str] = set()
        self.cache: dict[str, tuple[str, str]] = {}
        """OSWorld's host-cache files a step's stdout/stderr fills: name → (our save_as, the field)."""

    def error(self, where: str, why: str) -> OSWorldImportError:
        return OSWorldImportError(f"OSWorld task {self.task_id}: {where}: {why}")

    def check_platform(self, doc: Mapping[str, Any], apps: list[str]) -> None:
        windows = sorted({a.lower() for a in apps} & WINDOWS_APPS)
        if isinstance(doc.get("snapshot"), str) and doc["snapshot"].lower() in WINDOWS_APPS:
            windows.append(f"snapshot {doc['snapshot']}")
        paths = [m for m in _paths(doc) if WINDOWS_PATH.search(m)]
        if windows or paths:
            what = ", ".join([*windows, *(f"path {p}" for p in paths[:1])])
            raise self.error("platform", f"a Windows task ({what}); our desktops run Linux")

    # --- setup ----------------------------------------------------------------------------------
    def setup_step(self, where: str, step: Any) -> list[dict[str, Any]]:
        if not isinstance(step, Mapping) or not isinstance(step.get("type"), str):
            raise self.error(where, "must be an object with a type")
        if set(step) - {"type", "parameters"}:
            raise self.error(where, f"unknown key(s) {', '.join(sorted(set(step) - {'type', 'parameters'}))}")
        kind = step["type"]
        where = f"{where} ({kind})"
        params = step.get("parameters", {})
        if not isinstance(params, Mapping):
            raise self.error(where, "parameters must be an object")
        if kind in SETUP_REFUSED:
            raise self.error(where, SETUP_REFUSED[kind])
        handlers = {
            "download": (self.download, {"files"}),
            "execute": (self.execute, {"command", "shell", "until", "stdout", "stderr"}),
            "command": (self.execute, {"command", "shell", "until", "stdout", "stderr"}),
            "launch": (self.launch, {"command", "shell"}),
            "open": (self.open, {"path"}),
            "chrome_open_tabs": (self.tabs, {"urls_to_open"}),
            "chrome_close_tabs": (self.tabs, {"urls_to_close"}),
            "activate_window": (self.window, {"window_name", "strict", "by_class"}),
            "close_window": (self.window, {"window_name", "strict", "by_class"}),
            "sleep": (self.sleep, {"seconds"}),
        }
        if kind not in handlers:
            raise self.error(where, f"this setup type is not supported (supported: {', '.join(handlers)})")
        handler, known = handlers[kind]
        extra = sorted(set(map(str, params)) - known)
        if extra:
            raise self.error(where, f"unknown parameter(s) {', '.join(extra)}")
        return handler(kind, params, where)

    def download(self, kind: str, params: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        files = params.get("files")
        if not isinstance(files, list) or not files:
            raise self.error(where, "files must be a non-empty list of {url, path}")
        steps = []
        for j, f in enumerate(files):
            if not isinstance(f, Mapping) or set(f) != {"url", "path"}:
                raise self.error(f"{where} files[{j}]", "must be an object with exactly url and path")
            url, path = f["url"], f["path"]
            if not isinstance(url, str) or not URL.match(url):
                raise self.error(f"{where} files[{j}]", f"url must be http(s), got {url!r}")
            if (refused := download_refusal(url)) is not None:
                raise self.error(f"{where} files[{j}]", refused)
            path = self.home_path(path, f"{where} files[{j}]")
            steps.append({"op": "fetch", "url": url, "path": path, "timeout": 300})
        return steps

    def execute(self, kind: str, params: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        if params.get("until"):
            raise self.error(where, "`until` (retry until an output appears) is not supported")
        command = params.get("command")
        code = _pyautogui_code(command)
        caching = {key: params[key] for key in ("stdout", "stderr") if params.get(key)}
        if code is not None:
            if caching:
                raise self.error(where, "a pyautogui script has no output to save")
            return [{"op": "pyautogui", "code": code, "screen": SCREEN, "timeout": 60}]
        text = self.command(command, bool(params.get("shell", False)), where)
        # OSWorld's controller logs a command that fails (a non-zero exit, a timeout: its server answers
        # with the exit code, or an error) and goes on to the next step: so does ours.
        step: dict[str, Any] = {"op": "exec", "command": text, "timeout": 120, "check": False}
        if caching:
            # OSWorld writes the command's output to a file of its host's cache (whatever the exit
            # code), which the cache_file getter reads: here the step's result, kept for the checker.
            step["save_as"] = f"cache_{len(self.cache)}"
            for key, name in caching.items():
                if not isinstance(name, str) or not name or "/" in name:
                    raise self.error(where, f"{key} must be a file name")
                self.cache[name] = (step["save_as"], key)
        return [step]

    def command(self, command: Any, shell: bool, where: str) -> str:
        """The shell text of an OSWorld command (an argv list or a string)."""
        if isinstance(command, list) and command and all(isinstance(a, str) for a in command):
            argv = ["python3" if command[0] == "python" else command[0], *command[1:]]
            # OSWorld's server expands a leading ~ of each argument (os.path.expanduser).
            argv = [HOME + a[1:] if a == "~" or a.startswith("~/") else a for a in argv]
            text = " ".join(argv) if shell else shlex.join(argv)
        elif isinstance(command, str) and command.strip():
            text = re.sub(r"^(\s*)python(?=\s)", r"\1python3", command)
        else:
            raise self.error(where, "command must be a non-empty string or list of strings")
        if SUDO.search(text):
            text = _without_satisfied_root_steps(text)
        if SUDO.search(text):
            raise self.error(where, "the command needs root (sudo), which our desktops do not give")
        if "pyautogui" in text:
            raise self.error(where, "pyautogui is run only as `python -c <script>` of pyautogui calls")
        placeholder = PLACEHOLDER.search(text)
        if placeholder:
            raise self.error(
                where, f"OSWorld's placeholder {placeholder.group()} has no value on our desktops"
            )
        if WEB_URL.search(text):
            self.network.add(f"{where} reaches a web host")
        return text

    def launch(self, kind: str, params: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        command = params.get("command")
        if isinstance(command, str):
            try:
                argv = shlex.split(command)
            except ValueError as exc:
                raise self.error(where, f"command cannot be split: {exc}") from None
        elif isinstance(command, list) and all(isinstance(a, str) for a in command):
            argv = list(command)
        else:
            raise self.error(where, "command must be a string or a list of strings")
        if not argv:
            raise self.error(where, "command is empty")
        program = PurePosixPath(argv[0]).name
        if program in SKIPPED_LAUNCHES:
            return []
        if program in KILLERS:
            return [self.kill(argv, where)]
        if program in UNAVAILABLE_PROGRAMS:
            raise self.error(where, UNAVAILABLE_PROGRAMS[program])
        if program not in LAUNCH_APPS:
            raise self.error(
                where,
                f"program {program!r} has no counterpart among our apps (mapped: {', '.join(LAUNCH_APPS)})",
            )
        app, flags = LAUNCH_APPS[program]
        args = []
        for arg in argv[1:]:
            if arg.startswith("-"):
                if arg.startswith(DROPPED_FLAGS):
                    continue
                # The same program here as in OSWorld's image takes its flags as they are.
                if program != app and not (flags and arg.startswith(flags)):
                    raise self.error(where, f"flag {arg!r} of {program} has no mapping for {app}")
            elif WEB_URL.match(arg):
                self.network.add(f"{where} opens {arg}")
            args.append(arg)
        self.apps.add(app)
        return [{"op": "launch", "app": app, "args": args, "timeout": 60}]

    def open(self, kind: str, params: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        path = params.get("path")
        if not isinstance(path, str) or not path.strip():
            raise self.error(where, "path must be a non-empty string")
        suffix = PurePosixPath(path).suffix.lower()
        if path.endswith("/") or not suffix:
            app = "pcmanfm"  # OSWorld opens a folder in the file manager
        else:
            app = OPEN_APPS.get(suffix, "")
            if not app:
                raise self.error(where, f"no app of ours opens {suffix} files ({path})")
        self.apps.add(app)
        step: dict[str, Any] = {"op": "launch", "app": app, "args": [path], "timeout": 60}
        if app in TITLED_BY_DOCUMENT:
            # OSWorld's server waits for a window whose title holds the file's name, with or without
            # its extension: the document has loaded, and keys typed now reach it.
            step["title"] = PurePosixPath(path).stem
        return [step]

    def tabs(self, kind: str, params: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        """chrome_open_tabs / chrome_close_tabs: OSWorld's own steps, on the browser's DevTools."""
        key = "urls_to_open" if kind == "chrome_open_tabs" else "urls_to_close"
        urls = params.get(key)
        if not isinstance(urls, list) or not urls or not all(isinstance(u, str) and u for u in urls):
            raise self.error(where, f"{key} must be a non-empty list of URLs")
        for url in urls:
            if kind == "chrome_open_tabs" and WEB_URL.match(url):
                self.network.add(f"{where} opens {url}")
        self.apps.add("chromium")
        # OSWorld's own code retries its connection for up to 75 s (a browser still starting).
        return [{"op": "osworld_setup", "step": kind, "params": {key: list(urls)}, "timeout": 180}]

    def window(self, kind: str, params: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        name = params.get("window_name")
        if not isinstance(name, str) or not name:
            raise self.error(where, "window_name must be a non-empty string")
        for key in ("strict", "by_class"):
            if not isinstance(params.get(key, False), bool):
                raise self.error(where, f"{key} must be true or false")
        for theirs, ours in WINDOW_NAMES.items():
            name = name.replace(theirs, ours)
        return [
            {
                "op": "window",
                "action": "activate" if kind == "activate_window" else "close",
                "name": name,
                "strict": bool(params.get("strict", False)),
                "by_class": bool(params.get("by_class", False)),
                "check": False,  # OSWorld logs a window it cannot find and goes on
                "timeout": 30,
            }
        ]

    def kill(self, argv: list[str], where: str) -> dict[str, Any]:
        """pkill/killall of an app's processes, waiting (10 s at most) until they are gone: the app
        has written its state (Chrome its profile) and a launch after it starts a new one."""
        names = argv[1:]
        if not names or any(n.startswith("-") for n in names):
            raise self.error(where, f"{shlex.join(argv)}: only `{argv[0]} NAME…` of an app is mapped")
        ours = []
        for name in names:
            if name not in PROCESS_NAMES:
                raise self.error(
                    where, f"{argv[0]} {name}: not one of our apps' processes ({', '.join(PROCESS_NAMES)})"
                )
            ours.append(PROCESS_NAMES[name])
        # The sandbox host signals the sandbox's processes and waits until they are gone (OSWorld's next
        # step, a getter reading Chrome's profile, needs the app to have written it and quit).
        return {"op": "call", "method": "pkill", "params": {"names": ours, "wait_s": 10}, "timeout": 30}

    def sleep(self, kind: str, params: Mapping[str, Any], where: str) -> list[dict[str, Any]]:
        seconds = params.get("seconds")
        if not isinstance(seconds, int | float) or isinstance(seconds, bool) or not 0 <= seconds <= 590:
            raise self.error(where, "seconds must be a number in [0, 590]")
        return [{"op": "wait", "seconds": seconds, "timeout": seconds + 10}]


# The apps whose window title names the document they opened (Chromium shows the page's own title, VLC
# the media's metadata, the file manager the folder).
TITLED_BY_DOCUMENT = frozenset({"libreoffice", "gimp", "mousepad"})


def _without_satisfied_root_steps(text: str) -> str:
    """`text` with its root-only steps that our desktops already satisfy (ROOT_INSTALLS) dropped from
    its && chain; unchanged when a step needs more (the caller then refuses the sudo)."""
    kept = []
    for part in text.split("&&"):
        m = ROOT_STEP.match(part)
        if m is None:
            kept.append(part.strip())
            continue
        names = [w for w in (m.group("rest") or "").split() if not w.startswith("-")]
        if m.group("apt") and m.group("verb") == "update" and not names:
            continue
        wanted = ROOT_INSTALLS["pip" if m.group("pip") else "apt"]
        if not names or not set(names) <= wanted:
            return text
    return " && ".join(kept) or "true"


def _pyautogui_code(command: Any) -> str | None:
    """The script of a `python -c "import pyautogui; …"` command, else None."""
    if (
        isinstance(command, list)
        and len(command) == 3
        and command[0] in ("python", "python3")
        and command[1] == "-c"
        and isinstance(command[2], str)
        and "pyautogui" in command[2]
    ):
        return command[2]
    return None


def _paths(value: Any, key: str = "") -> Iterable[str]:
    """Every string given as a path (a `path` key) anywhere in a task document."""
    if isinstance(value, str) and key == "path":
        yield value
    elif isinstance(value, Mapping):
        for k, v in value.items():
            yield from _paths(v, str(k))
    elif isinstance(value, list):
        for v in value:
            yield from _paths(v, key)
