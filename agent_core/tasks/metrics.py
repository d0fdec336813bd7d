"""Pure metric functions `(artifact, expected, **options) -> float` in [0, 1], by registry name.

The artifact is what a checker's probe read from the sandbox (text, a mapping, None when the thing
probed does not exist); a metric never touches the sandbox itself.
"""

from __future__ import annotations

import difflib
import json
import math
import re
from collections.abc import Callable
from typing import Any

Metric = Callable[..., float]
_METRICS: dict[str, Metric] = {}


def register_metric(name: str) -> Callable[[Metric], Metric]:
    """Function decorator: make a metric available to checkers under `name`."""

    def deco(fn: Metric) -> Metric:
        _METRICS[name] = fn
        return fn

    return deco


def metric_names() -> list[str]:
    """Every registered metric name."""
    return sorted(_METRICS)


def get_metric(name: str) -> Metric:
    """The metric called `name`; an unknown name raises KeyError listing the valid ones."""
    try:
        return _METRICS[name]
    except KeyError:
        raise KeyError(f"unknown metric {name!r}; valid: {', '.join(metric_names())}") from None


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if isinstance(value, dict | list):
        return json.dumps(value, sort_keys=True)
    return str(value)


def _norm(value: Any, *, strip: bool = True, case: bool = True) -> str:
    s = _text(value)
    if strip:
        s = s.strip()
    return s if case else s.lower()


@register_metric("exact_match")
def exact_match(artifact: Any, expected: Any, *, strip: bool = True, case_sensitive: bool = True) -> float:
    """1 when the artifact's text equals the expected text (stripped unless strip=False)."""
    if artifact is None:
        return 0.0
    return float(
        _norm(artifact, strip=strip, case=case_sensitive) == _norm(expected, strip=strip, case=case_sensitive)
    )


@register_metric("contains")
def contains(artifact: Any, expected: Any, *, case_sensitive: bool = True) -> float:
    """1 when the expected text occurs in the artifact."""
    if artifact is None:
        return 0.0
    return float(_norm(expected, case=case_sensitive) in _norm(artifact, strip=False, case=case_sensitive))


@register_metric("not_contains")
def not_contains(artifact: Any, expected: Any, *, case_sensitive: bool = True) -> float:
    """1 when the expected text does not occur in the artifact (a missing artifact counts as 0)."""
    if artifact is None:
        return 0.0
    return 1.0 - contains(artifact, expected, case_sensitive=case_sensitive)


@register_metric("regex_match")
def regex_match(artifact: Any, expected: Any, *, full: bool = False) -> float:
    """1 when the pattern `expected` matches (searches, or matches the whole stripped text if full)."""
    if artifact is None:
        return 0.0
    text = _norm(artifact)
    pattern = re.compile(_text(expected), re.MULTILINE)
    return float(bool(pattern.fullmatch(text) if full else pattern.search(text)))


@register_metric("number_equal")
def number_equal(artifact: Any, expected: Any, *, tolerance: float = 0.0) -> float:
    """1 when the artifact is (or its text holds exactly one) number within `tolerance` of expected."""
    got = _number(artifact)
    want = _number(expected)
    if got is None or want is None:
        return 0.0
    return float(abs(got - want) <= tolerance)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return float(value) if math.isfinite(value) else None
    found = re.findall(r"-?\d+(?:\.\d+)?", _text(value))
    return float(found[0]) if len(found) == 1 else None


@register_metric("at_least")
def at_least(artifact: Any, expected: Any) -> float:
    """1 when the artifact is a number >= expected (e.g. a MiniWoB reward above 0)."""
    got, want = _number(artifact), _number(expected)
    return float(got is not None and want is not None and got >= want)


@register_metric("is_true")
def is_true(artifact: Any, expected: Any = None) -> float:
    """1 when the artifact is truthy (true, a non-zero number, a non-empty text or collection)."""
    if isinstance(artifact, str):
        return float(artifact.strip().lower() not in ("", "0", "false", "no"))
    return float(bool(artifact))


@register_metric("game_score")
def game_score(artifact: Any, expected: Any = None, *, baseline: float, target: float) -> float:
    """A game's raw score normalised: (score - baseline) / (target - baseline), clipped to [0, 1].

    `baseline` is at or above what doing nothing and a random player reach (0), `target` what the
    game's reference player reaches on every seed (1). A missing score is 0."""
    if isinstance(baseline, bool) or isinstance(target, bool) or not float(target) > float(baseline):
        raise ValueError(f"game_score needs numbers baseline < target, got {baseline!r} and {target!r}")
    score = _number(artifact)
    if score is None:
        return 0.0
    return max(0.0, min(1.0, (score - float(baseline)) / (float(target) - float(baseline))))


@register_metric("exists")
def exists(artifact: Any, expected: Any = None) -> float:
    """1 when the probe found something (a file that exists, a command that printed)."""
    return float(artifact is not None)


@register_metric("absent")
def absent(artifact: Any, expected: Any = None) -> float:
    """1 when the probe found nothing (a file that is gone)."""
    return float(artifact is None)


@register_metric("lines_equal")
def lines_equal(artifact: Any, expected: Any, *, ignore_blank: bool = True, sort: bool = False) -> float:
    """1 when the artifact's lines (stripped) equal the expected lines (a list, or text)."""
    if artifact is None:
        return 0.0
    want = expected if isinstance(expected, list) else _text(expected).splitlines()
    got = [ln.strip() for ln in _text(artifact).splitlines()]
    want = [str(ln).strip() for ln in want]
    if ignore_blank:
        got, want = [ln for ln in got if ln], [ln for ln in want if ln]
    if sort:
        got, want = sorted(got), sorted(want)
    return float(got == want)


@register_metric("json_equal")
def json_equal(artifact: Any, expected: Any) -> float:
    """1 when the artifact (JSON text or a value) equals the expected value."""
    if artifact is None:
        return 0.0
    if isinstance(artifact, str | bytes):
        try:
            artifact = json.loads(artifact)
        except ValueError:
            return 0.0
    return float(artifact == expected)


@register_metric("fuzzy_match")
def fuzzy_match(artifact: Any, expected: Any, *, threshold: float = 0.9) -> float:
    """1 when the texts' similarity ratio (difflib) reaches `threshold`."""
    if artifact is None:
        return 0.0
    ratio = difflib.SequenceMatcher(None, _norm(artifact), _norm(expected)).ratio()
    return float(ratio >= threshold)


# --- text and rule metrics of OSWorld's evaluators (agent_core.tasks.osworld maps their `func`s here) ---
# Each takes the probe's text where OSWorld's takes a file path or a command's output, and the
# `rules` mapping (or the value) where OSWorld's takes an expected `rule`.


def _lines(value: Any) -> list[str]:
    return _text(value).splitlines()


def _strings(value: Any, where: str) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str) or not isinstance(value, list | tuple):
        raise TypeError(f"{where}: must be a list of strings, got {type(value).__name__}")
    return [_text(v) for v in value]


def _rules(expected: Any, metric: str) -> dict[str, Any]:
    if not isinstance(expected, dict):
        raise TypeError(f"{metric}: expected must be a mapping of rules, got {type(expected).__name__}")
    return expected


@register_metric("check_include_exclude")
def check_include_exclude(artifact: Any, expected: Any, *, case_sensitive: bool = True) -> float:
    """1 when every `include` text occurs in the artifact and no `exclude` text does
    (expected: {include: [..], exclude: [..]})."""
    if artifact is None:
        return 0.0
    rules = _rules(expected, "check_include_exclude")
    text = _norm(artifact, strip=False, case=case_sensitive)
    include = [_norm(s, strip=False, case=case_sensitive) for s in _strings(rules.get("include"), "include")]
    exclude = [_norm(s, strip=False, case=case_sensitive) for s in _strings(rules.get("exclude"), "exclude")]
    return float(all(s in text for s in include) and not any(s in text for s in exclude))


@register_metric("match_in_list")
def match_in_list(artifact: Any, expected: Any, *, strip: bool = True, case_sensitive: bool = True) -> float:
    """1 when the artifact's text equals one of the expected texts (stripped unless strip=False)."""
    if artifact is None:
        return 0.0
    got = _norm(artifact, strip=strip, case=case_sensitive)
    want = [_norm(s, strip=strip, case=case_sensitive) for s in _strings(expected, "expected")]
    return float(got in want)


@register_metric("is_in_list")
def is_in_list(artifact: Any, expected: Any) -> float:
    """1 when `expected` is an item of the artifact (a list, or JSON text of one), or else occurs in
    the artifact's text."""
    if artifact is None:
        return 0.0
    if isinstance(artifact, str | bytes):
        try:
            parsed = json.loads(artifact)
        except ValueError:
            parsed = None
        if isinstance(parsed, list):
            artifact = parsed
    if isinstance(artifact, list | tuple):
        return float(expected in artifact)
    return float(_text(expected) in _text(artifact))


@register_metric("literal_match")
def literal_match(artifact: Any, expected: Any, *, type: str = "str", ignore_case: bool = False) -> float:  # noqa: A002
    """OSWorld's literal comparison: `type: str` compares str() of both; `type: list` compares two lists
    item by item as text (same length). `ignore_case` lowers both. A missing artifact (None) scores 0."""

    def lit(v: Any) -> str:
        s = str(v)
        return s.lower() if ignore_case else s

    if artifact is None:
        return 0.0
    if type == "str":
        return float(lit(artifact) == lit(expected))
    if type == "list":
        if not isinstance(artifact, list | tuple) or not isinstance(expected, list | tuple):
            return 0.0
        return float([lit(v) for v in artifact] == [lit(v) for v in expected])
    raise ValueError(f"literal_match: type {type!r} is not str or list")


def _file_text(value: Any, *, ignore_blanks: bool, ignore_case: bool) -> str:
    s = _text(value)
    if ignore_blanks:
        s = re.sub(r"\s+", " ", s).strip()
    return s.lower() if ignore_case else s


@register_metric("compare_text_file")
def compare_text_file(
    artifact: Any, expected: Any, *, ignore_blanks: bool = False, ignore_case: bool = False
) -> float:
    """1 when the file's text equals the expected text exactly (`ignore_blanks`: runs of whitespace
    count as one space, ends stripped; `ignore_case`). A missing file (None) or empty text scores 0."""
    if artifact is None or _text(artifact) == "":
        return 0.0
    a = _file_text(artifact, ignore_blanks=ignore_blanks, ignore_case=ignore_case)
    return float(a == _file_text(expected, ignore_blanks=ignore_blanks, ignore_case=ignore_case))


@register_metric("diff_text_file")
def diff_text_file(artifact: Any, expected: Any) -> float:
    """How alike the two texts' lines are (difflib ratio over lines, graded in [0, 1]); None scores 0."""
    if artifact is None:
        return 0.0
    return difflib.SequenceMatcher(None, _lines(artifact), _lines(expected), autojunk=False).ratio()


@register_metric("fuzzy_ratio")
def fuzzy_ratio(artifact: Any, expected: Any) -> float:
    """The texts' similarity, graded: 2·matches / total length (difflib, no junk heuristic; like
    rapidfuzz's fuzz.ratio / 100, which OSWorld's fuzzy_match returns). Two empty texts score 1."""
    if artifact is None:
        return 0.0
    return difflib.SequenceMatcher(None, _text(artifact), _text(expected), autojunk=False).ratio()


def _record_matches(pattern: Any, row: dict[str, Any]) -> bool:
    if not isinstance(pattern, dict):
        raise TypeError(f"check_csv: a rule must be a mapping of column to value, got {pattern!r}")
    return all(k in row and row[k] == _text(v) for k, v in pattern.items())


@register_metric("check_csv")
def check_csv(artifact: Any, expected: Any) -> float:
    """A CSV text (with a header row) checked against {expect: [{column: value}], unexpect: [..]}: 1
    when every `expect` record matches some row and no `unexpect` record matches any row."""
    if artifact is None:
        return 0.0
    import csv
    import io

    rules = _rules(expected, "check_csv")
    expect, unexpect = list(rules.get("expect") or []), list(rules.get("unexpect") or [])
    rows = list(csv.DictReader(io.StringIO(_text(artifact))))
    found = all(any(_record_matches(r, row) for row in rows) for r in expect)
    return float(found and not any(_record_matches(r, row) for r in unexpect for row in rows))


@register_metric("check_list")
def check_list(artifact: Any, expected: Any) -> float:
    """Lines checked against {expect: [regex], unexpect: [regex]}: 1 when every `expect` pattern
    matches some line and no `unexpect` pattern matches any line."""
    if artifact is None:
        return 0.0
    rules = _rules(expected, "check_list")
    lines = _lines(artifact)
    expect = [re.compile(p) for p in _strings(rules.get("expect"), "expect")]
    unexpect = [re.compile(p) for p in _strings(rules.get("unexpect"), "unexpect")]
    found = all(any(p.search(ln) for ln in lines) for p in expect)
    return float(found and not any(p.search(ln) for p in unexpect for ln in lines))


@register_metric("json_fields_equal")
def json_fields_equal(artifact: Any, expected: Any) -> float:
    """1 when the artifact (a JSON object, or its text) has every key of `expected` with an equal
    value (other keys may be there too)."""
    if artifact is None:
        return 0.0
    want = _rules(expected, "json_fields_equal")
    if isinstance(artifact, str | bytes):
        try:
            artifact = json.loads(artifact)
        except ValueError:
            return 0.0
    if not isinstance(artifact, dict):
        return 0.0
    return float(all(k in artifact and artifact[k] == v for k, v in want.items()))


# --- desktop suite ------------------------------------------------------------------------------


def _arith(text: str) -> float:
    """The value of an arithmetic expression of numbers (+ - * / // %, parentheses); ValueError else."""
    import ast
    import operator

    ops: dict[type, Callable[[float, float], float]] = {
        ast.Add: operator.add,
        ast.Sub: operator.sub,
        ast.Mult: operator.mul,
        ast.Div: operator.truediv,
        ast.FloorDiv: operator.floordiv,
        ast.Mod: operator.mod,
    }

    def ev(node: ast.AST) -> float:
        if isinstance(node, ast.Expression):
            return ev(node.body)
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            if isinstance(node.value, bool):
                raise ValueError(f"not an arithmetic expression of numbers: {text!r}")
            return float(node.value)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
            value = ev(node.operand)
            return -value if isinstance(node.op, ast.USub) else value
        if isinstance(node, ast.BinOp) and type(node.op) in ops:
            return ops[type(node.op)](ev(node.left), ev(node.right))
        raise ValueError(f"not an arithmetic expression of numbers: {text!r}")

    try:
        return ev(ast.parse(text.strip(), mode="eval"))
    except (SyntaxError, ZeroDivisionError) as exc:
        raise ValueError(f"bad arithmetic expression {text!r}: {exc}") from None


@register_metric("arith_equal")
def arith_equal(artifact: Any, expected: Any, *, tolerance: float = 0.0) -> float:
    """1 when the artifact is (or its text holds exactly one) number equal, within `tolerance`, to the
    value of `expected`: a number or an arithmetic expression of numbers, e.g. "{{a}} + {{b}} * 3"."""
    got = _number(artifact)
    if got is None:
        return 0.0
    want = _arith(_text(expected))
    return float(abs(got - want) <= tolerance)


@register_metric("osworld")
def osworld(
    artifact: Any,
    expected: Any,
    *,
    func: str,
    options: dict[str, Any] | None = None,
    expected_given: bool = True,
    timeout: float = 120.0,
    getter: dict[str, Any] | None = None,
    expected_getter: dict[str, Any] | None = None,
) -> float:
    """OSWorld's own metric function `func`, run in OSWorld's metrics environment (a process of its
    own, `agent_core.tasks.osworld_metrics`), called as OSWorld's `DesktopEnv.evaluate` calls it:
    `func(result, expected, **options)`, or `func(result, **options)` for a task without `expected`.
    With `getter`, the artifact is the files OSWorld's own getter of that name reads (Chrome's profile)
    and `result` is what that getter makes of them; with `expected_getter` (rule_relativeTime), what is
    expected is what OSWorld's getter makes of its config (`expected`, if any, is the time zone).

    A metric that raises scores 0 (it could not read the end state); an unusable metrics environment
    raises EnvError: the episode is not the agent's failure."""
    from agent_core.env import EnvError
    from agent_core.tasks import osworld_metrics

    try:
        return osworld_metrics.score(
            func, artifact, expected if expected_given else osworld_metrics.NO_EXPECTED,
            dict(options or {}), timeout=timeout, getter=getter, expected_getter=expected_getter,
        )  # fmt: skip
    except osworld_metrics.OSWorldEnvError as exc:
        raise EnvError(f"OSWorld's metric {func}: {exc}") from None
