"""OSWorld's evaluator (`func`, `result`, `expected`, `options`, `conj`, `postconfig`) as our checker:
OSWorld's own metric functions (`osworld` metric) on what our probes read, as its getters would give it."""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from pathlib import PurePosixPath
from typing import Any

from agent_core.tasks.osworld_tables import (
    A11Y_RENAMES,
    A11Y_TREE_GETTERS,
    CHROME_FILE_GETTERS,
    CHROME_PROFILE,
    DEVTOOLS_GETTERS,
    GETTER_REFUSED,
    HOME,
    OSWORLD_METRICS,
    URL,
    VM_FILE_GETTERS,
    WEB_URL,
)
from agent_core.tasks.public_urls import download_refusal
from agent_core.tasks.spec import TaskSpecError


class EvaluatorMapping:
    """The evaluator half of one task's import (the setup half, `error` and `command` are the importer's)."""

    cache: dict[str, tuple[str, str]]
    """OSWorld's host-cache files the setup fills (the importer's): name → (save_as, stdout/stderr)."""
    network: set[str]
    """Why the task needs the network (the importer's): it is then tagged needs:network."""

    def error(self, where: str, why: str) -> TaskSpecError:
        raise NotImplementedError

    def setup_step(self, where: str, step: Any) -> list[dict[str, Any]]:
        raise NotImplementedError

    def command(self, command: Any, shell: bool, where: str) -> str:
        raise NotImplementedError

    def checker(self, ev: Mapping[str, Any]) -> dict[str, Any]:
        funcs = ev.get("func")
        single = isinstance(funcs, str)
        funcs = [funcs] if single else funcs
        if not isinstance(funcs, list) or not funcs or not all(isinstance(f, str) for f in funcs):
            raise self.error("evaluator.func", "must be a function name or a list of them")
        if "infeasible" in funcs:
            raise self.error("evaluator.func", "infeasible must be the only function")
        n = len(funcs)
        results = self.per_func(ev.get("result"), n, single, "result")
        has_expected = bool(ev.get("expected"))
        expecteds = self.per_func(ev.get("expected"), n, single, "expected") if has_expected else [None] * n
        options = self.per_func(ev.get("options", {} if single else [{}] * n), n, single, "options")
        conj = ev.get("conj", "and")
        if conj not in ("and", "or"):
            raise self.error("evaluator.conj", f"{conj!r} is not and / or")
        before = ev.get("postconfig", [])
        if not isinstance(before, list):
            raise self.error("evaluator.postconfig", "must be a list of setup steps")
        # The postconfig first: the cache files its steps fill are what cache_file getters name.
        steps = [
            s for i, step in enumerate(before) for s in self.setup_step(f"evaluator.postconfig[{i}]", step)
        ]
        checks = [
            self.check(f, r, e, o, has_expected, i if not single else None)
            for i, (f, r, e, o) in enumerate(zip(funcs, results, expecteds, options, strict=True))
        ]
        checker: dict[str, Any] = {"combine": "all_mean" if conj == "and" else "any", "checks": checks}
        if steps:
            checker["before"] = steps
        return checker

    def per_func(self, value: Any, n: int, single: bool, name: str) -> list[Any]:
        if single:
            return [value]
        if not isinstance(value, list) or len(value) != n:
            raise self.error(f"evaluator.{name}", f"must be a list of {n} (one per function)")
        return value

    def check(
        self, func: str, result: Any, expected: Any, options: Any, has_expected: bool, i: int | None
    ) -> dict[str, Any]:
        where = f"evaluator.func {func!r}" if i is None else f"evaluator.func[{i}] {func!r}"
        if func not in OSWORLD_METRICS:
            raise self.error(where, "is not one of OSWorld's metric functions (desktop-env 1.0.2)")
        if options is None:
            options = {}
        if not isinstance(options, Mapping):
            raise self.error(f"{where} options", "must be an object")
        check: dict[str, Any] = {
            "metric": "osworld",
            "options": {"func": func, "options": dict(options), "expected_given": has_expected},
        }
        kind = result.get("type") if isinstance(result, Mapping) else None
        if kind in CHROME_FILE_GETTERS:
            places = CHROME_FILE_GETTERS[kind]
            check["probe"] = {
                "op": "files",
                "paths": [f"{CHROME_PROFILE}/{place}" for place in places],
                "names": [PurePosixPath(place).name for place in places],
            }
            # The whole getter config goes to OSWorld's getter, which reads what it needs of it.
            check["options"]["getter"] = {"name": kind, "config": dict(result), "files": list(places)}
        elif kind in VM_FILE_GETTERS:
            key, known = VM_FILE_GETTERS[kind]
            extra = sorted(set(map(str, result)) - known - {"type", key})
            if extra:
                raise self.error(f"{where} result ({kind})", f"unknown key(s) {', '.join(extra)}")
            rel = self.home_path(result.get(key), f"{where} result ({kind}) {key}")
            check["probe"] = {"op": "files", "paths": [rel], "names": [PurePosixPath(rel).name]}
            check["options"]["getter"] = {"name": kind, "config": dict(result), "files": [rel]}
        elif kind in DEVTOOLS_GETTERS:
            check["probe"] = self.devtools(result, f"{where} result ({kind})")
            check["options"]["getter"] = {
                "name": kind, "config": dict(result), "devtools": True, "a11y": kind in A11Y_TREE_GETTERS,
            }  # fmt: skip
        else:
            check["probe"] = self.getter(result, f"{where} result")
        if not has_expected:
            return check
        if isinstance(expected, Mapping) and expected.get("type") == "rule":
            if set(expected) - {"type", "rules"}:
                raise self.error(
                    f"{where} expected",
                    f"unknown key(s) {', '.join(sorted(set(expected) - {'type', 'rules'}))}",
                )
            check["expected"] = expected.get("rules")
        elif isinstance(expected, Mapping) and expected.get("type") == "time_diff_range":
            # OSWorld's getter gives its config's diff_range_in_minutes: the same, run by its own code.
            if set(expected) - {"type", "diff_range_in_minutes"}:
                raise self.error(f"{where} expected", "time_diff_range takes diff_range_in_minutes only")
            check["options"]["expected_getter"] = {"name": "time_diff_range", "config": dict(expected)}
        elif isinstance(expected, Mapping) and expected.get("type") == "rule_relativeTime":
            rules = expected.get("rules")
            if set(expected) - {"type", "rules"} or not isinstance(rules, Mapping):
                raise self.error(f"{where} expected", "rule_relativeTime takes rules (an object) only")
            if not isinstance(rules.get("relativeTime"), Mapping) or "from" not in rules["relativeTime"]:
                raise self.error(f"{where} expected", "rules.relativeTime must name at least from")
            # OSWorld's own getter turns the relative time into dates when it scores, in the time zone
            # the rules give, else the one an IP geolocation service gives its scoring host; here the
            # desktop's own zone (the agent's "today" is the desktop's), read by the probe.
            check["options"]["expected_getter"] = {"name": "rule_relativeTime", "config": dict(expected)}
            if "timezone" not in rules:
                check["expected_probe"] = {"op": "exec", "command": TIMEZONE, "timeout": 30}
        else:
            check["expected_probe"] = self.getter(expected, f"{where} expected")
        return check

    def devtools(self, getter: Mapping[str, Any], where: str) -> dict[str, Any]:
        """A getter of Chrome's live state: OSWorld's own code, connected over CDP to the endpoint that
        the sandbox host serves for the desktop's Chromium (its `devtools` call)."""
        extra = sorted(set(map(str, getter)) - DEVTOOLS_GETTERS[str(getter["type"])] - {"type"})
        if extra:
            raise self.error(where, f"unknown key(s) {', '.join(extra)}")
        url = getter.get("url")
        if "url" in DEVTOOLS_GETTERS[str(getter["type"])]:
            if not isinstance(url, str) or not url:
                raise self.error(where, "url must be a non-empty string")
            if WEB_URL.match(url):
                self.network.add(f"{where} opens {url}")
        if getter["type"] in A11Y_TREE_GETTERS:
            return {"op": "browser", "a11y": True, "renames": dict(A11Y_RENAMES)}
        return {"op": "browser"}

    def getter(self, getter: Any, where: str) -> dict[str, Any]:
        """Our probe for an OSWorld getter."""
        if not isinstance(getter, Mapping) or not isinstance(getter.get("type"), str):
            raise self.error(where, "must be a getter object with a type")
        kind = getter["type"]
        where = f"{where} ({kind})"
        if kind in GETTER_REFUSED:
            raise self.error(where, GETTER_REFUSED[kind])
        if kind in CHROME_FILE_GETTERS or kind in DEVTOOLS_GETTERS:
            raise self.error(where, "Chrome's state is read for the result only, not for what is expected")
        known = {
            "vm_file": {"path", "dest", "multi", "gives", "time_suffix", "time_format"},
            "cloud_file": {"path", "dest", "multi", "gives"},
            "vm_command_line": {"command", "shell"},
            "vm_command_error": {"command", "shell"},
            "gimp_config_file": {"dest", "file_name"},
            "list_directory": {"path"},
            "cache_file": {"path"},
            "vlc_config": {"dest"},
            "vlc_playing_info": {"dest"},
            "accessibility_tree": set(),
        }
        if kind not in known:
            raise self.error(where, f"this getter is not supported (supported: {', '.join(known)}, rule)")
        extra = sorted(set(map(str, getter)) - known[kind] - {"type"})
        if extra:
            raise self.error(where, f"unknown key(s) {', '.join(extra)}")
        if kind == "vm_file":
            return self.vm_file(getter, where)
        if kind == "cloud_file":
            if getter.get("multi"):
                paths, dests = getter.get("path"), getter.get("dest")
                if not (isinstance(paths, list) and isinstance(dests, list) and len(paths) == len(dests)):
                    raise self.error(where, "multi needs path and dest lists of one length")
                gives = getter.get("gives", [0])
                if not isinstance(gives, list) or len(gives) != 1 or gives[0] not in range(len(paths)):
                    raise self.error(where, "multi cloud files are mapped only when gives names one of them")
                url, dest = paths[gives[0]], dests[gives[0]]
            else:
                url, dest = getter.get("path"), getter.get("dest")
            if not isinstance(url, str) or not URL.match(url):
                raise self.error(where, f"path must be an http(s) URL, got {url!r}")
            if (refused := download_refusal(url, "path")) is not None:
                raise self.error(where, refused)
            return {"op": "fetch", "url": url, "name": _name(dest, url)}
        if kind in ("vm_command_line", "vm_command_error"):
            command = self.command(getter.get("command"), bool(getter.get("shell", False)), where)
            if kind == "vm_command_error":
                command = f"{{ {command}\n}} 2>&1 >/dev/null"
            return {"op": "exec", "command": command, "any_exit": True, "timeout": 60}
        if kind in ("vlc_config", "vlc_playing_info"):
            return _vlc_probe(kind, getter)
        if kind == "accessibility_tree":  # the desktop's tree in OSWorld's XML form, as its server gives it
            return {"op": "a11y_xml", "renames": dict(A11Y_RENAMES)}
        if kind == "cache_file":
            name = getter.get("path")
            if name not in self.cache:
                raise self.error(where, f"no setup or postconfig step saves its output as {name!r}")
            key, field = self.cache[name]
            return {"op": "saved", "key": key, "field": field, "file": name}
        if kind == "list_directory":
            # OSWorld's server walks the folder in the VM (POST /list_directory); ours walks it in the
            # sandbox, the same way, and the probe reads the tree back as JSON.
            rel = self.home_path(getter.get("path"), where)
            return {
                "op": "exec",
                "command": f"python3 -c {shlex.quote(LIST_DIRECTORY)} {shlex.quote(rel)}",
                "parse": "json",
                "timeout": 60,
            }
        # gimp_config_file: OSWorld reads ~/.config/GIMP/2.10/<file_name>.
        name = getter.get("file_name")
        if not isinstance(name, str) or not name or "/" in name:
            raise self.error(where, "file_name must be a file name")
        return {
            "op": "file",
            "path": f".config/GIMP/2.10/{name}",
            "raw": True,
            "name": _name(getter.get("dest"), name),
        }

    def vm_file(self, getter: Mapping[str, Any], where: str) -> dict[str, Any]:
        # OSWorld tests `multi` for truth (`config.get("multi", False)`): "true" counts, as there.
        if not getter.get("multi"):
            path = getter.get("path")
            if not isinstance(path, str):
                raise self.error(where, "path must be a string (a list needs multi: true)")
            return {
                "op": "file",
                "path": self.home_path(path, where),
                "raw": True,
                "name": _name(getter.get("dest"), path),
            }
        paths, dests = getter.get("path"), getter.get("dest")
        if not (isinstance(paths, list) and isinstance(dests, list) and len(paths) == len(dests) and paths):
            raise self.error(where, "multi needs path and dest lists of one length")
        gives = getter.get("gives", [0])
        if not isinstance(gives, list) or not all(isinstance(g, int) and 0 <= g < len(paths) for g in gives):
            raise self.error(where, f"gives must list indices into the {len(paths)} paths")
        return {
            "op": "files",
            "paths": [self.home_path(p, where) for p in paths],
            "names": [_name(d, p) for d, p in zip(dests, paths, strict=True)],
            "gives": gives,
        }

    def home_path(self, path: Any, where: str) -> str:
        """A path under /home/user (or ~), relative to the workspace."""
        if not isinstance(path, str) or not path:
            raise self.error(where, f"path must be a non-empty string, got {path!r}")
        p = PurePosixPath(path)
        if p.parts[:1] == ("~",):
            p = PurePosixPath(HOME, *p.parts[1:])
        elif not p.is_absolute():
            p = PurePosixPath(HOME, p)  # OSWorld's server runs in the home folder
        try:
            rel = p.relative_to(HOME)
        except ValueError:
            raise self.error(
                where, f"{path} is outside {HOME}, the only place our sandboxes give files"
            ) from None
        if ".." in rel.parts or not rel.parts:
            raise self.error(where, f"{path} does not name a file under {HOME}")
        return str(rel)


# OSWorld's server's directory tree (its /list_directory route): {type, name, children} per folder,
# {type: file, name} per file, in os.listdir's order; {error} for a folder it cannot read. A path that is
# no folder is its HTTP 400, for which the getter gives None: here an exit code, for which the probe does.
LIST_DIRECTORY = """import json, os, sys
def tree(d):
    t = {"type": "directory", "name": os.path.basename(d), "children": []}
    try:
        for entry in os.listdir(d):
            full = os.path.join(d, entry)
            t["children"].append(tree(full) if os.path.isdir(full) else {"type": "file", "name": entry})
    except OSError as e:
        t = {"error": str(e)}
    return t
start = os.path.join(os.path.expanduser("~"), sys.argv[1])
if not os.path.isdir(start):
    sys.exit(1)
print(json.dumps(tree(start)))
"""


# The desktop's time zone by name (Debian's /etc/timezone; a TZ the session sets wins).
TIMEZONE = 'echo "${TZ:-$(cat /etc/timezone 2>/dev/null || echo UTC)}"'


def _vlc_probe(kind: str, getter: Mapping[str, Any]) -> dict[str, Any]:
    """Our probe for OSWorld's VLC getters."""
    if kind == "vlc_config":
        # OSWorld reads ~/.config/vlc/vlcrc (the desktops give VLC one as its image has it, written
        # by VLC itself at its first launch).
        return {
            "op": "file",
            "path": ".config/vlc/vlcrc",
            "raw": True,
            "name": _name(getter.get("dest"), "vlcrc"),
        }
    if kind == "vlc_playing_info":
        # OSWorld asks VLC's HTTP interface for status.xml; the sandbox's own VLC answers inside it.
        return {
            "op": "exec",
            "command": f"python3 -c {shlex.quote(VLC_STATUS)}",
            "file": _name(getter.get("dest"), "status.xml"),
            "timeout": 30,
        }
    raise ValueError(kind)


# OSWorld's vlc_playing_info getter: GET VLC's status.xml on port 8080 with its password (basic auth, no
# user); anything but a 200 gives None (here an exit code, for which the probe does).
VLC_STATUS = """import base64, sys, urllib.request
req = urllib.request.Request("http://127.0.0.1:8080/requests/status.xml")
req.add_header("Authorization", "Basic " + base64.b64encode(b":password").decode())
try:
    with urllib.request.urlopen(req, timeout=10) as r:
        sys.stdout.write(r.read().decode("utf-8", "replace"))
except OSError:
    sys.exit(1)
"""


def _name(dest: Any, path: Any) -> str:
    """The file name a metric sees: OSWorld's `dest`, else the path's last part."""
    if isinstance(dest, str) and dest and "/" not in dest:
        return dest
    return PurePosixPath(str(path).split("?", 1)[0]).name or "file"
