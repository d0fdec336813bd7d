"""Documents taken from outside: NUL, NaN and deep nesting are refused naming the field, never a crash."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agent_core.tasks.documents import MAX_DEPTH, DocumentError, document_problem, loads_document
from agent_core.tasks.spec import TaskSpecError, parse_task


def nested(depth: int) -> Any:
    doc: Any = []
    for _ in range(depth - 1):
        doc = [doc]
    return doc


@pytest.mark.parametrize(
    ("doc", "field", "problem"),
    [
        ({"a": {"b": ["ok", "x\x00"]}}, "a.b[1]", "may not contain NUL characters"),
        ({"a": [{"k\x00": 1}]}, "a[0].'k\\x00'", "the key may not contain NUL characters"),
        ({"a": 1, "b": float("nan")}, "b", "must be a finite number, not nan"),
        ({"a": [1e400]}, "a[0]", "must be a finite number, not inf"),
        ({"ok": 1, "deep": nested(MAX_DEPTH)}, "deep", f"nests more than {MAX_DEPTH} levels deep"),
        ("\x00", "document", "may not contain NUL characters"),
    ],
)
def test_the_first_problem_is_named_by_its_field(doc: Any, field: str, problem: str) -> None:
    assert document_problem(doc) == (field, problem)


def test_a_document_within_the_limits_has_no_problem() -> None:
    assert document_problem({"a": [1, 2.5, "text", None, True], "deep": nested(MAX_DEPTH - 1)}) is None


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # Python's parser recurses: 100,000 levels were a RecursionError (a 500 at the upload).
        (b"[" * 100_000 + b"]" * 100_000, f"document: nests more than {MAX_DEPTH} levels deep"),
        (
            json.dumps({"deep": nested(MAX_DEPTH + 1)}).encode(),
            f"deep: nests more than {MAX_DEPTH} levels deep",
        ),
        (b'{"a": NaN}', "document: is not JSON: NaN is not a JSON number"),
        (b'{"a": "\\u0000"}', "a: may not contain NUL characters"),
        (b'{"a": "\xff"}', "document: is not UTF-8 text"),
        (b"{not json", "document: is not JSON"),
    ],
)
def test_loads_document_refuses_naming_the_field(data: bytes, message: str) -> None:
    with pytest.raises(DocumentError) as err:
        loads_document(data)
    assert str(err.value).startswith(message)


def test_a_task_spec_holds_no_nul_nan_or_deep_nesting_anywhere() -> None:
    from tests.agent_core.test_task_spec import base

    parse_task(base())
    for change, message in (
        ({"title": "a\x00b"}, "title: may not contain NUL"),
        ({"origin": {"osworld": {"source": "x\x00"}}}, "origin.osworld.source: may not contain NUL"),
        ({"origin": {"deep": nested(MAX_DEPTH)}}, "origin: nests more than"),
        ({"origin": {"n": float("inf")}}, "origin.n: must be a finite number"),
    ):
        with pytest.raises(TaskSpecError, match=message):
            parse_task({**base(), **change})


def test_a_probe_reading_json_nested_past_the_parsers_recursion_scores_zero_not_a_crash() -> None:
    # What a command in the sandbox prints is the agent's doing: JSON 100,000 deep is no JSON, not an error.
    from agent_core.env import ExecOutput
    from agent_core.tasks.runner import evaluate, prepare
    from tests.agent_core.test_task_runner import FakeEnv
    from tests.agent_core.test_task_spec import base

    check = {"probe": {"op": "exec", "command": "cat ~/out.json", "parse": "json"}, "metric": "json_equal"}
    spec = parse_task({**base(), "checker": {"checks": [{**check, "expected": {"a": 1}}]}})
    env = FakeEnv(commands={"cat ~/out.json": ExecOutput(exit_code=0, stdout="[" * 100_000 + "]" * 100_000)})
    assert evaluate(prepare(spec, env, seed=0), env).reward == 0.0


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, "a:\n" + "- " * 100_000 + "x"])
def test_a_task_file_nested_past_the_parsers_recursion_is_refused_not_a_crash(text: str) -> None:
    from agent_core.tasks.spec import loads

    with pytest.raises(TaskSpecError, match="nests too deeply to read"):
        loads(text, name="t.yaml")
