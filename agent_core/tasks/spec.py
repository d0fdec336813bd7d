"""The task format (`flywheel-task/1`): a versioned YAML/JSON document, parsed into frozen dataclasses.

    format: flywheel-task/1
    id: desktop/count-lines            # '/'-separated slug; the family defaults to the first parts
    title: Count the lines of a file
    instruction: "How many lines does ~/{{file}} have? Write the number to ~/answer.txt."
    platform: desktop                  # desktop | browser | android
    profile: desktop                   # the sandbox profile it runs on
    params:                            # seeded: the same seed gives the same values
      file: {choice: [notes.txt, todo.txt]}
      n: {int: [3, 9]}
    setup:                             # run in order before the first observation
      - {op: exec, command: "seq {{n}} > ~/{{file}}", timeout: 10}
      - {op: launch, app: mousepad, args: ["{{file}}"]}
    limits: {max_steps: 15, max_seconds: 120}
    checker:                           # probes run in the sandbox, metrics are pure functions
      combine: all                     # all (the minimum) | any (the maximum) | all_mean (0 if any
                                       # check scores 0, else the mean: OSWorld's `and`)
      before: []                       # setup steps run before the probes (OSWorld's postconfig)
      checks:
        - probe: {op: file, path: answer.txt}
          metric: number_equal
          expected: "{{n}}"
    infeasible: false                  # true: reward 1 only when the agent declares it infeasible
    mcp: [records]                     # MCP servers of the sandbox whose tools the agent's prompt lists
    oracle: desktop/count-lines        # the scripted solution (agent_core.tasks.oracles registry)

Strings anywhere may use `{{name}}` for a parameter and `{{save.field}}` for a field of a setup
step's result saved with `save_as: save`. A probe `{op: saved, key: save, field: stdout, file: x.txt}`
reads such a result (of setup or of checker.before) at scoring time, as a file named x.txt if `file` is
given (OSWorld's cache_file). Errors raise `TaskSpecError` naming the field. No string or key may hold
NUL, no number be NaN or infinite, nothing nest deeper than 32 levels (agent_core.tasks.documents).
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agent_core.tasks.documents import document_check
from agent_core.tasks.errors import TaskSpecError
from agent_core.tasks.public_urls import download_refusal
from agent_core.tasks.templating import TEMPLATE as _TEMPLATE
from agent_core.tasks.templating import render, select_path

__all__ = ["FORMAT", "TaskSpec", "TaskSpecError", "parse_task", "render", "select_path"]

FORMAT = "flywheel-task/1"
PLATFORMS = ("desktop", "browser", "android")
SETUP_OPS = {
    "exec": {"command"},
    "put_file": {"path"},
    "launch": {"app"},
    "call": {"method"},
    "goto": {"url"},
    "miniwob": {"task"},
    "game": {"game"},
    "wait": {"seconds"},
    "fetch": {"url", "path"},
    "pyautogui": {"code"},
    "window": {"action", "name"},
    "osworld_setup": {"step", "params"},
}
PROBE_OPS = {
    "exec": {"command"},
    "file": {"path"},
    "files": {"paths"},
    "fetch": {"url"},
    "call": {"method"},
    "answer": set(),
    "saved": {"key"},
    "a11y": set(),
    "a11y_xml": set(),
    "browser": set(),
    "windows": set(),
}
PARAM_KINDS = ("choice", "int", "word", "sample", "value")
TOP_LEVEL = {"format", "id", "title", "instruction", "platform", "profile", "family", "params", "setup",
             "limits", "checker", "infeasible", "oracle", "tags", "version", "description", "origin",
             "mcp"}  # fmt: skip
_SLUG = re.compile(r"^[a-z0-9][a-z0-9_.-]*(/[a-z0-9][a-z0-9_.-]*)*$")
MAX_STEPS_CAP = 500
MAX_SECONDS_CAP = 24 * 3600
# A task document is stored in a database row and parsed on every episode: files a setup puts in
# place belong in put_file steps of modest size, not in megabytes of inline text.
MAX_DOC_BYTES = 1024 * 1024


@dataclass(frozen=True)
class Param:
    """A seeded parameter: `choice` of values, `int` in [lo, hi], a random lowercase `word`,
    a `sample` of k values, or a fixed `value`."""

    name: str
    kind: str
    spec: Any

    def draw(self, rng: random.Random) -> Any:
        """One value for this parameter."""
        if self.kind == "choice":
            return rng.choice(list(self.spec))
        if self.kind == "int":
            lo, hi = self.spec
            return rng.randint(int(lo), int(hi))
        if self.kind == "word":
            length = int(self.spec.get("length", 6)) if isinstance(self.spec, Mapping) else 6
            return "".join(rng.choice(string.ascii_lowercase) for _ in range(length))
        if self.kind == "sample":
            return rng.sample(list(self.spec["from"]), int(self.spec["k"]))
        return self.spec


@dataclass(frozen=True)
class SetupStep:
    """One setup operation (see SETUP_OPS) with its timeout and, optionally, a name for its result."""

    op: str
    args: Mapping[str, Any]
    timeout: float = 30.0
    save_as: str = ""


@dataclass(frozen=True)
class Probe:
    """What to read from the sandbox at the end: command output, a file, a provider call, the answer."""

    op: str
    args: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Check:
    """One probe scored by one metric: `metric(select(probe result), expected, **options)`."""

    probe: Probe
    metric: str
    expected: Any = None
    options: Mapping[str, Any] = field(default_factory=dict)
    select: str = ""
    """A dotted path into the probe's result (for mappings and lists), e.g. `reward` or `windows.0.title`."""
    expected_probe: Probe | None = None
    """Compute `expected` in the sandbox at check time instead (e.g. what `wc -l` says)."""


@dataclass(frozen=True)
class Checker:
    checks: tuple[Check, ...]
    combine: str = "all"
    before: tuple[SetupStep, ...] = ()
    """Setup steps run before the probes read the end state (e.g. save the open document)."""


COMBINES = ("all", "any", "all_mean")


@dataclass(frozen=True)
class Limits:
    max_steps: int = 15
    max_seconds: int = 300


@dataclass(frozen=True)
class TaskSpec:
    """A parsed, validated task document."""

    id: str
    title: str
    instruction: str
    platform: str
    profile: str
    checker: Checker
    family: str = ""
    params: tuple[Param, ...] = ()
    setup: tuple[SetupStep, ...] = ()
    limits: Limits = Limits()
    infeasible: bool = False
    oracle: str = ""
    tags: tuple[str, ...] = ()
    version: int = 1
    description: str = ""
    mcp: tuple[str, ...] = ()
    """The sandbox's MCP servers the task uses: their tools are listed in the agent's prompt."""
    source: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """The document as given (what the catalog stores)."""

    def draw_params(self, seed: int) -> dict[str, Any]:
        """The parameter values for `seed` (the same seed always gives the same values)."""
        rng = random.Random(f"{self.id}:{seed}")  # noqa: S311 - task variety, not security
        return {p.name: p.draw(rng) for p in self.params}

    def to_dict(self) -> dict[str, Any]:
        """The document form (what `parse_task` accepts)."""
        return json.loads(json.dumps(self.source))  # type: ignore[no-any-return]


# --- parsing -----------------------------------------------------------------------------------


def load_task_file(path: str | Path) -> TaskSpec:
    """Parse a task file (.yaml, .yml or .json)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise TaskSpecError(f"cannot read {p}: {exc}") from None
    return parse_task(loads(text, name=str(p)))


def loads(text: str, *, name: str = "task") -> Any:
    """The document in `text` (JSON, or YAML where it is not JSON)."""
    import yaml

    try:
        try:
            return json.loads(text)
        except ValueError:
            return yaml.safe_load(text)
    except RecursionError:  # either parser recurses per level: a deep document is not read
        raise TaskSpecError(f"{name}: nests too deeply to read") from None
    except yaml.YAMLError as exc:
        raise TaskSpecError(f"{name}: neither JSON nor YAML: {exc}") from None


def parse_task(doc: Any) -> TaskSpec:
    """Validate a task document; raises TaskSpecError naming the first bad field."""
    d = _mapping(doc, "task")
    document_check(d)  # NUL, NaN, deep nesting: before anything walks it
    size = len(_json_text(d).encode())
    if size > MAX_DOC_BYTES:
        raise TaskSpecError(f"task: the document is {size} bytes; at most {MAX_DOC_BYTES} are accepted")
    fmt = d.get("format", FORMAT)
    if fmt != FORMAT:
        raise TaskSpecError(f"format: unsupported {fmt!r}; this platform reads {FORMAT!r}")
    unknown = sorted(set(d) - TOP_LEVEL)
    if unknown:
        raise TaskSpecError(f"unknown field(s) {', '.join(unknown)}; valid: {', '.join(sorted(TOP_LEVEL))}")
    task_id = _str(d, "id")
    if not _SLUG.match(task_id) or len(task_id) > 200:
        raise TaskSpecError(
            f"id: {task_id!r} is not a lowercase '/'-separated slug (e.g. miniwob/click-button)"
        )
    platform = _str(d, "platform")
    if platform not in PLATFORMS:
        raise TaskSpecError(f"platform: {platform!r} is not one of {', '.join(PLATFORMS)}")
    limits = _limits(_mapping(d.get("limits", {}), "limits"))
    params = tuple(_param(name, spec) for name, spec in _mapping(d.get("params", {}), "params").items())
    setup = tuple(_setup_step(i, s) for i, s in enumerate(_list(d.get("setup", []), "setup")))
    saved = {s.save_as for s in setup if s.save_as}
    clash = saved & {p.name for p in params}
    if clash:
        raise TaskSpecError(f"setup: save_as {', '.join(sorted(clash))} is also a parameter name")
    infeasible = d.get("infeasible", False)
    if not isinstance(infeasible, bool):
        raise TaskSpecError("infeasible: must be true or false")
    checker_doc = d.get("checker")
    if checker_doc is None and infeasible:
        checker = Checker(checks=())
    else:
        checker = _checker(checker_doc, infeasible=infeasible)
    _check_saved(checker, saved | {s.save_as for s in checker.before if s.save_as})
    _mapping(d.get("origin", {}), "origin")
    tags = _list(d.get("tags", []), "tags")
    if not all(isinstance(t, str) for t in tags):
        raise TaskSpecError("tags: must be a list of strings")
    version = d.get("version", 1)
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise TaskSpecError("version: must be a positive integer")
    mcp = _list(d.get("mcp", []), "mcp")
    if len({s for s in mcp if isinstance(s, str) and re.fullmatch(r"[a-z][a-z0-9_-]*", s)}) < len(mcp):
        raise TaskSpecError("mcp: must be a list of distinct MCP server names (e.g. [files, records])")
    spec = TaskSpec(
        id=task_id,
        title=str(d.get("title") or task_id),
        instruction=_str(d, "instruction"),
        platform=platform,
        profile=str(d.get("profile") or platform),
        checker=checker,
        family=str(d.get("family") or task_id.rsplit("/", 1)[0]),
        params=params,
        setup=setup,
        limits=limits,
        infeasible=infeasible,
        oracle=str(d.get("oracle") or ""),
        tags=tuple(tags),
        version=version,
        description=str(d.get("description") or ""),
        mcp=tuple(mcp),
        source=_json_copy({"format": FORMAT, **d}),
    )
    _check_templates(spec)
    return spec


def _limits(doc: Mapping[str, Any]) -> Limits:
    if set(doc) - {"max_steps", "max_seconds"}:
        extra = ", ".join(sorted(map(str, set(doc) - {"max_steps", "max_seconds"})))
        raise TaskSpecError(f"limits: unknown field(s) {extra}; valid: max_seconds, max_steps")
    return Limits(max_steps=_int_in(doc, "max_steps", 15, 1, MAX_STEPS_CAP, "limits."),
                  max_seconds=_int_in(doc, "max_seconds", 300, 1, MAX_SECONDS_CAP, "limits."))  # fmt: skip


def _check_saved(checker: Checker, saved: set[str]) -> None:
    """TaskSpecError where a `saved` probe names no setup or checker.before step's save_as."""
    for i, check in enumerate(checker.checks):
        for probe in (check.probe, check.expected_probe):
            if probe is not None and probe.op == "saved" and probe.args["key"] not in saved:
                key = probe.args["key"]
                raise TaskSpecError(f"checker.checks[{i}] (saved): {key!r} names no setup or checker.before"
                                    " step's save_as")  # fmt: skip


def _json_text(doc: Mapping[str, Any]) -> str:
    try:
        return json.dumps(doc)
    except (TypeError, ValueError) as exc:  # e.g. a YAML date, which has no JSON form
        raise TaskSpecError(f"task: every value must be JSON (text, number, list, mapping): {exc}") from None


def _json_copy(doc: Mapping[str, Any]) -> Any:
    return json.loads(_json_text(doc))


def _check_templates(spec: TaskSpec) -> None:
    """Every `{{name}}` must name a parameter or a saved setup result (caught now, not mid-episode);
    a setup step may only name the results of the steps before it."""
    known = {p.name for p in spec.params}
    for i, step in enumerate(spec.setup):
        for name in _TEMPLATE.findall(json.dumps(step.args)):
            if name.split(".", 1)[0] not in known:
                raise TaskSpecError(
                    f"setup[{i}]: template {{{{{name}}}}} names no parameter or earlier saved setup result"
                )
        if step.save_as:
            known.add(step.save_as)
    for name in _TEMPLATE.findall(json.dumps(spec.source)):
        if name.split(".", 1)[0] not in known:
            raise TaskSpecError(f"template {{{{{name}}}}} names no parameter or saved setup result")


def _param(name: str, spec: Any) -> Param:
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(name)):
        raise TaskSpecError(f"params: {name!r} is not a valid name")
    s = _mapping(spec, f"params.{name}")
    if len(s) != 1 or next(iter(s)) not in PARAM_KINDS:
        raise TaskSpecError(f"params.{name}: give exactly one of {', '.join(PARAM_KINDS)}")
    kind, value = next(iter(s.items()))
    if kind == "choice" and (not isinstance(value, list) or not value):
        raise TaskSpecError(f"params.{name}.choice: must be a non-empty list")
    if kind == "int" and not (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) for v in value)
    ):
        raise TaskSpecError(f"params.{name}.int: must be [lo, hi]")
    if kind == "int" and value[0] > value[1]:
        raise TaskSpecError(f"params.{name}.int: lo > hi")
    if kind == "word" and value is not None:
        length = _mapping(value, f"params.{name}.word").get("length", 6)
        if set(value) - {"length"} or not isinstance(length, int) or isinstance(length, bool):
            raise TaskSpecError(f"params.{name}.word: give {{length: n}} (or nothing)")
        if not 1 <= length <= 64:
            raise TaskSpecError(f"params.{name}.word.length: must be in [1, 64]")
    if kind == "sample":
        v = _mapping(value, f"params.{name}.sample")
        pool, k = v.get("from"), v.get("k")
        if not isinstance(pool, list) or not isinstance(k, int) or not 0 < k <= len(pool):
            raise TaskSpecError(f"params.{name}.sample: needs from: [..] and 0 < k <= len(from)")
    return Param(name=str(name), kind=kind, spec=value)


def _setup_step(i: int, doc: Any, *, where: str = "") -> SetupStep:
    where = where or f"setup[{i}]"
    s = dict(_mapping(doc, where))
    op = s.pop("op", None)
    if op not in SETUP_OPS:
        raise TaskSpecError(f"{where}.op: {op!r} is not one of {', '.join(SETUP_OPS)}")
    timeout = s.pop("timeout", 30)
    if not isinstance(timeout, int | float) or isinstance(timeout, bool) or not 0 < timeout <= 600:
        raise TaskSpecError(f"{where}.timeout: must be a number of seconds in (0, 600]")
    save_as = s.pop("save_as", "")
    if save_as and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", str(save_as)):
        raise TaskSpecError(f"{where}.save_as: {save_as!r} is not a valid name")
    missing = sorted(SETUP_OPS[op] - set(s))
    if missing:
        raise TaskSpecError(f"{where} ({op}): missing {', '.join(missing)}")
    if op == "put_file" and "content" not in s and "content_b64" not in s:
        raise TaskSpecError(f"{where} (put_file): give content or content_b64")
    if op == "window" and s["action"] not in ("activate", "close"):
        raise TaskSpecError(f"{where} (window): action must be activate or close, got {s['action']!r}")
    if op == "fetch" and (refused := download_refusal(str(s["url"]))) is not None:  # http(s), public
        raise TaskSpecError(f"{where} (fetch): {refused}")
    if op == "pyautogui":
        _pyautogui_steps(s, where)
    return SetupStep(op=op, args=s, timeout=float(timeout), save_as=str(save_as))


def _pyautogui_steps(args: Mapping[str, Any], where: str) -> None:
    """A pyautogui setup step must be code our action reader understands, on a given screen size."""
    from agent_core.actions.grammar import ActionParseError
    from agent_core.actions.pyautogui_code import parse_pyautogui

    screen = args.get("screen", [1920, 1080])
    if not (
        isinstance(screen, list)
        and len(screen) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in screen)
    ):
        raise TaskSpecError(f"{where} (pyautogui): screen must be [width, height] in pixels")
    if "{{" in str(args["code"]):
        return  # templated: read when rendered
    try:
        parse_pyautogui(str(args["code"]), screen=(screen[0], screen[1]))
    except ActionParseError as exc:
        raise TaskSpecError(f"{where} (pyautogui): {exc}") from None


def _probe(doc: Any, where: str) -> Probe:
    s = dict(_mapping(doc, where))
    op = s.pop("op", None)
    if op not in PROBE_OPS:
        raise TaskSpecError(f"{where}.op: {op!r} is not one of {', '.join(PROBE_OPS)}")
    missing = sorted(PROBE_OPS[op] - set(s))
    if missing:
        raise TaskSpecError(f"{where} ({op}): missing {', '.join(missing)}")
    if op == "fetch" and (refused := download_refusal(str(s["url"]))) is not None:
        raise TaskSpecError(f"{where} (fetch): {refused}")
    return Probe(op=op, args=s)


def _checker(doc: Any, *, infeasible: bool = False) -> Checker:
    from agent_core.tasks.metrics import metric_names

    d = _mapping(doc, "checker")
    extra = sorted(set(d) - {"combine", "checks", "before"})
    if extra:
        raise TaskSpecError(f"checker: unknown field(s) {', '.join(extra)}; valid: before, checks, combine")
    combine = d.get("combine", "all")
    if combine not in COMBINES:
        raise TaskSpecError(f"checker.combine: {combine!r} is not one of {', '.join(COMBINES)}")
    before = tuple(
        _setup_step(i, s, where=f"checker.before[{i}]")
        for i, s in enumerate(_list(d.get("before", []), "checker.before"))
    )
    checks = []
    for i, c in enumerate(_list(d.get("checks"), "checker.checks")):
        where = f"checker.checks[{i}]"
        cd = _mapping(c, where)
        extra = sorted(set(cd) - {"probe", "metric", "expected", "options", "select", "expected_probe"})
        if extra:
            raise TaskSpecError(f"{where}: unknown field(s) {', '.join(extra)}")
        metric = cd.get("metric")
        if metric not in metric_names():
            raise TaskSpecError(f"{where}.metric: {metric!r} is unknown; valid: {', '.join(metric_names())}")
        checks.append(
            Check(
                probe=_probe(cd.get("probe"), f"{where}.probe"),
                metric=str(metric),
                expected=cd.get("expected"),
                options=dict(_mapping(cd.get("options", {}), f"{where}.options")),
                select=str(cd.get("select", "")),
                expected_probe=_probe(cd["expected_probe"], f"{where}.expected_probe")
                if cd.get("expected_probe") is not None
                else None,
            )
        )
    if not checks and not infeasible:
        raise TaskSpecError("checker.checks: a feasible task needs at least one check")
    return Checker(checks=tuple(checks), combine=str(combine), before=before)


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise TaskSpecError(f"{where}: must be a mapping, got {type(value).__name__}")
    return value


def _list(value: Any, where: str) -> Sequence[Any]:
    if not isinstance(value, list):
        raise TaskSpecError(f"{where}: must be a list, got {type(value).__name__}")
    return value


def _str(d: Mapping[str, Any], key: str) -> str:
    value = d.get(key)
    if not isinstance(value, str) or not value.strip():
        raise TaskSpecError(f"{key}: must be a non-empty string")
    return value


def _int_in(d: Mapping[str, Any], key: str, default: int, lo: int, hi: int, prefix: str) -> int:
    value = d.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or not lo <= value <= hi:
        raise TaskSpecError(f"{prefix}{key}: must be an integer in [{lo}, {hi}]")
    return value
