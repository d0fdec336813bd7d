"""The task format `flywheel-task/1`: validation, seeded parameters, templates, loading, round trips."""

from __future__ import annotations

import copy
import datetime
import json
import string
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from agent_core.tasks.spec import (
    FORMAT,
    Param,
    TaskSpecError,
    load_task_file,
    loads,
    parse_task,
    render,
    select_path,
)


def base() -> dict[str, Any]:
    """A valid document every bad case below breaks in one place."""
    return {
        "format": FORMAT,
        "id": "desktop/count-lines",
        "title": "Count the lines",
        "instruction": "How many lines does ~/{{file}} have? Write it to ~/answer.txt.",
        "platform": "desktop",
        "params": {"file": {"choice": ["a.txt", "b.txt"]}, "n": {"int": [3, 9]}},
        "setup": [
            {"op": "exec", "command": "seq {{n}} > ~/{{file}}", "timeout": 10, "save_as": "made"},
            {"op": "launch", "app": "mousepad", "args": ["{{file}}"]},
        ],
        "limits": {"max_steps": 10, "max_seconds": 120},
        "checker": {
            "checks": [
                {"probe": {"op": "file", "path": "answer.txt"}, "metric": "number_equal", "expected": "{{n}}"}
            ]
        },
    }


def with_(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation setting the dotted `path` (list indices allowed) to `value`."""

    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


def without(path: str) -> Callable[[dict[str, Any]], None]:
    def mutate(doc: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node: Any = doc
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        del node[last]

    return mutate


CHECK0 = "checker.checks.0"
BAD: list[tuple[str, Callable[[dict[str, Any]], None], str]] = [
    ("unknown field", with_("colour", "red"), "unknown field(s) colour"),
    ("other format", with_("format", "flywheel-task/2"), "format:"),
    ("uppercase id", with_("id", "Desktop/Count"), "id:"),
    ("empty id part", with_("id", "desktop//count"), "id:"),
    ("id with space", with_("id", "desktop/count lines"), "id:"),
    ("no id", without("id"), "id:"),
    ("bad platform", with_("platform", "windows"), "platform:"),
    ("empty instruction", with_("instruction", "  "), "instruction:"),
    ("params not a mapping", with_("params", ["file"]), "params:"),
    ("bad param name", with_("params.1x", {"value": 1}), "params: '1x'"),
    ("two param kinds", with_("params.n", {"int": [1, 2], "choice": [1]}), "params.n:"),
    ("unknown param kind", with_("params.n", {"float": [1, 2]}), "params.n:"),
    ("empty choice", with_("params.file", {"choice": []}), "params.file.choice"),
    ("int lo > hi", with_("params.n", {"int": [9, 3]}), "params.n.int"),
    ("int of text", with_("params.n", {"int": ["a", 3]}), "params.n.int"),
    ("int of bools", with_("params.n", {"int": [True, 3]}), "params.n.int"),
    ("int of one", with_("params.n", {"int": [3]}), "params.n.int"),
    ("sample k > pool", with_("params.s", {"sample": {"from": [1, 2], "k": 3}}), "params.s.sample"),
    ("sample no pool", with_("params.s", {"sample": {"k": 1}}), "params.s.sample"),
    ("word length 0", with_("params.w", {"word": {"length": 0}}), "params.w.word.length"),
    ("word unknown key", with_("params.w", {"word": {"size": 3}}), "params.w.word"),
    ("setup not a list", with_("setup", {"op": "exec"}), "setup:"),
    ("unknown setup op", with_("setup.0.op", "reboot"), "setup[0].op"),
    ("setup no op", without("setup.0.op"), "setup[0].op"),
    ("exec without command", without("setup.0.command"), "setup[0] (exec): missing command"),
    ("launch without app", without("setup.1.app"), "setup[1] (launch): missing app"),
    ("put_file no content", with_("setup.0", {"op": "put_file", "path": "x"}), "setup[0] (put_file)"),
    ("put_file no path", with_("setup.0", {"op": "put_file", "content": "x"}), "missing path"),
    ("timeout 0", with_("setup.0.timeout", 0), "setup[0].timeout"),
    ("timeout too long", with_("setup.0.timeout", 601), "setup[0].timeout"),
    ("timeout text", with_("setup.0.timeout", "10"), "setup[0].timeout"),
    ("timeout bool", with_("setup.0.timeout", True), "setup[0].timeout"),
    ("bad save_as", with_("setup.0.save_as", "1st"), "setup[0].save_as"),
    ("save_as = param", with_("setup.0.save_as", "n"), "save_as n is also a parameter"),
    ("max_steps 0", with_("limits.max_steps", 0), "limits.max_steps"),
    ("max_seconds huge", with_("limits.max_seconds", 10**9), "limits.max_seconds"),
    ("limits typo", with_("limits.max_step", 5), "limits: unknown field(s) max_step"),
    ("infeasible text", with_("infeasible", "yes"), "infeasible:"),
    ("no checker", without("checker"), "checker:"),
    ("no checks", with_("checker.checks", []), "checker.checks: a feasible task"),
    ("checks not a list", with_("checker.checks", {}), "checker.checks:"),
    ("bad combine", with_("checker.combine", "most"), "checker.combine"),
    ("checker typo", with_("checker.combin", "any"), "checker: unknown field(s) combin"),
    ("check typo", with_(f"{CHECK0}.expect", 3), "checker.checks[0]: unknown field(s) expect"),
    ("unknown metric", with_(f"{CHECK0}.metric", "vibes"), "checker.checks[0].metric: 'vibes'"),
    ("no metric", without(f"{CHECK0}.metric"), "checker.checks[0].metric"),
    ("unknown probe op", with_(f"{CHECK0}.probe.op", "psychic"), "checker.checks[0].probe.op"),
    ("exec probe w/o command", with_(f"{CHECK0}.probe", {"op": "exec"}), "probe (exec): missing command"),
    ("no probe", without(f"{CHECK0}.probe"), "checker.checks[0].probe:"),
    ("bad expected_probe", with_(f"{CHECK0}.expected_probe", {"op": "x"}), "checks[0].expected_probe.op"),
    ("options not a mapping", with_(f"{CHECK0}.options", [1]), "checker.checks[0].options"),
    ("template naming nothing", with_("instruction", "Open {{nothing}}"), "{{nothing}}"),
    ("template naming nothing deep", with_(f"{CHECK0}.expected", "{{made2.x}}"), "{{made2.x}}"),
    ("setup naming a later save", with_("setup.0.command", "echo {{later}}"), "setup[0]: template"),
    ("tags not strings", with_("tags", ["a", 1]), "tags:"),
    ("tags not a list", with_("tags", "a"), "tags:"),
    ("version 0", with_("version", 0), "version:"),
    ("version bool", with_("version", True), "version:"),
    ("a YAML date", with_("description", datetime.date(2024, 1, 2)), "must be JSON"),
]


@pytest.mark.parametrize(("mutate", "field"), [(m, f) for _, m, f in BAD], ids=[n for n, _, _ in BAD])
def test_bad_documents_name_the_field(mutate: Callable[[dict[str, Any]], None], field: str) -> None:
    doc = base()
    if field == "setup[0]: template":  # the later step saves it, so only the order is wrong
        doc["setup"][1]["save_as"] = "later"
    mutate(doc)
    with pytest.raises(TaskSpecError) as err:
        parse_task(doc)
    assert field in str(err.value)


@pytest.mark.parametrize("doc", [None, [], "id: x", 3])
def test_a_document_must_be_a_mapping(doc: Any) -> None:
    with pytest.raises(TaskSpecError, match="task: must be a mapping"):
        parse_task(doc)


def test_valid_document_and_defaults() -> None:
    spec = parse_task(base())
    assert spec.id == "desktop/count-lines"
    assert spec.family == "desktop"
    assert spec.profile == "desktop"
    assert spec.limits.max_steps == 10 and spec.limits.max_seconds == 120
    assert [s.op for s in spec.setup] == ["exec", "launch"]
    assert spec.setup[0].timeout == 10.0 and spec.setup[0].save_as == "made"
    assert spec.setup[1].timeout == 30.0
    assert spec.setup[0].args == {"command": "seq {{n}} > ~/{{file}}"}
    assert spec.checker.combine == "all"
    assert spec.checker.checks[0].probe.op == "file"
    assert not spec.infeasible

    doc = base()
    for key in ("title", "limits", "setup", "params"):
        del doc[key]
    doc["instruction"] = "Say hi"
    doc["checker"]["checks"][0]["expected"] = 3
    minimal = parse_task(doc)
    assert minimal.title == minimal.id
    assert minimal.limits.max_steps == 15 and minimal.limits.max_seconds == 300
    assert minimal.params == () and minimal.setup == ()


def test_infeasible_tasks_need_no_checks() -> None:
    doc = base()
    del doc["checker"]
    doc["infeasible"] = True
    assert parse_task(doc).checker.checks == ()
    doc["checker"] = {"checks": []}
    assert parse_task(doc).checker.checks == ()


def test_family_and_profile_can_be_given() -> None:
    doc = base() | {"family": "counting", "profile": "desktop-mousepad"}
    spec = parse_task(doc)
    assert (spec.family, spec.profile) == ("counting", "desktop-mousepad")


# --- seeded parameters ---------------------------------------------------------------------------


def params_spec() -> Any:
    doc = base()
    doc["params"] = {
        "file": {"choice": ["a.txt", "b.txt", "c.txt"]},
        "n": {"int": [3, 9]},
        "w": {"word": {"length": 8}},
        "w6": {"word": None},
        "s": {"sample": {"from": list(range(10)), "k": 3}},
        "v": {"value": {"fixed": [1, 2]}},
    }
    return parse_task(doc)


@given(seed=st.integers(min_value=-(2**63), max_value=2**63))
def test_params_are_a_function_of_the_seed(seed: int) -> None:
    spec = params_spec()
    first = spec.draw_params(seed)
    assert spec.draw_params(seed) == first
    assert first["file"] in ("a.txt", "b.txt", "c.txt")
    assert 3 <= first["n"] <= 9
    assert len(first["w"]) == 8 and set(first["w"]) <= set(string.ascii_lowercase)
    assert len(first["w6"]) == 6
    assert len(set(first["s"])) == 3 and set(first["s"]) <= set(range(10))
    assert first["v"] == {"fixed": [1, 2]}


def test_different_seeds_vary() -> None:
    spec = params_spec()
    draws = [spec.draw_params(seed) for seed in range(30)]
    for name in ("file", "n", "w", "s"):
        assert len({json.dumps(d[name]) for d in draws}) > 1, name


def test_the_same_seed_differs_across_tasks() -> None:
    a = params_spec()
    doc = a.to_dict() | {"id": "desktop/other"}
    b = parse_task(doc)
    assert any(a.draw_params(s)["w"] != b.draw_params(s)["w"] for s in range(3))


def test_param_value_kind_is_returned_as_is() -> None:
    import random

    assert Param("x", "value", [1, 2]).draw(random.Random(0)) == [1, 2]  # noqa: S311


# --- templates -----------------------------------------------------------------------------------

CONTEXT = {"n": 7, "name": "notes", "items": ["a", "b"], "cfg": {"k": 1}, "none": None, "save": {"pid": 42}}


@pytest.mark.parametrize(
    ("template", "rendered"),
    [
        ("{{n}}", 7),
        ("{{ n }}", 7),
        ("{{items}}", ["a", "b"]),
        ("{{cfg}}", {"k": 1}),
        ("{{none}}", None),
        ("{{save.pid}}", 42),
        ("{{items.1}}", "b"),
        ("{{save.missing}}", None),
        ("n={{n}}", "n=7"),
        ("{{n}}\n", "7\n"),
        (" {{n}}", " 7"),
        ("{{items}} and {{name}}", "a b and notes"),
        ("cfg {{cfg}}", 'cfg {"k": 1}'),
        ("pid {{save.pid}}!", "pid 42!"),
        ("no template", "no template"),
        ("{single}", "{single}"),
    ],
)
def test_render(template: str, rendered: Any) -> None:
    assert render(template, CONTEXT) == rendered


def test_render_walks_lists_and_mappings() -> None:
    value = {"command": "seq {{n}}", "args": ["{{name}}.txt", "{{n}}"], "deep": {"x": ("{{n}}",)}, "k": 3}
    assert render(value, CONTEXT) == {
        "command": "seq 7",
        "args": ["notes.txt", 7],
        "deep": {"x": [7]},
        "k": 3,
    }


def test_render_of_an_unknown_name_raises() -> None:
    with pytest.raises(TaskSpecError, match="nope"):
        render("x {{nope}}", CONTEXT)


@given(st.text())
def test_render_without_placeholders_is_identity(text: str) -> None:
    if "{{" not in text:
        assert render(text, CONTEXT) == text


@given(st.one_of(st.integers(), st.text(), st.lists(st.integers()), st.none(), st.booleans()))
def test_a_whole_placeholder_keeps_the_type(value: Any) -> None:
    assert render("{{v}}", {"v": value}) == value


# --- select paths --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "selected"),
    [
        ("", {"windows": [{"title": "a"}, {"title": "b"}], "reward": 1}),
        ("reward", 1),
        ("windows.0.title", "a"),
        ("windows.-1.title", "b"),
        ("windows.2", None),
        ("windows.-3", None),
        ("windows.x", None),
        ("windows.--1", None),
        ("windows.²", None),
        ("reward.x", None),
        ("missing.deeper", None),
    ],
)
def test_select_path(path: str, selected: Any) -> None:
    value = {"windows": [{"title": "a"}, {"title": "b"}], "reward": 1}
    assert select_path(value, path) == selected


# Text a task document may hold: anything but NUL (agent_core.tasks.documents refuses it).
stored_text = st.characters(blacklist_characters="\x00")
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(stored_text, max_size=5),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(stored_text, max_size=3), inner, max_size=4)
    ),
    max_leaves=12,
)


@given(json_values, st.lists(st.text(max_size=4), max_size=4))
def test_select_path_never_raises(value: Any, parts: list[str]) -> None:
    select_path(value, ".".join(parts))


# --- loading and round trips ---------------------------------------------------------------------

YAML_DOC = """\
format: flywheel-task/1
id: desktop/count-lines
instruction: "How many lines does ~/{{file}} have?"
platform: desktop
params:
  file: {choice: [notes.txt, todo.txt]}
  n: {int: [3, 9]}
setup:
  - {op: exec, command: "seq {{n}} > ~/{{file}}", timeout: 10}
  - op: put_file
    path: readme.txt
    content: |
      {{file}}
checker:
  combine: any
  checks:
    - probe: {op: file, path: answer.txt}
      metric: number_equal
      expected: "{{n}}"
"""


def test_yaml_and_json_files_load_the_same(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text(YAML_DOC)
    from_yaml = load_task_file(tmp_path / "t.yaml")
    (tmp_path / "t.json").write_text(json.dumps(from_yaml.to_dict()))
    from_json = load_task_file(tmp_path / "t.json")
    assert from_yaml == from_json
    assert from_yaml.checker.combine == "any"
    assert from_yaml.setup[1].args["content"] == "{{file}}\n"
    assert render(from_yaml.setup[1].args["content"], {"file": "x"}) == "x\n"


def test_loading_errors_are_task_spec_errors(tmp_path: Path) -> None:
    with pytest.raises(TaskSpecError, match="cannot read"):
        load_task_file(tmp_path / "missing.yaml")
    with pytest.raises(TaskSpecError, match="neither JSON nor YAML"):
        loads("a: [1, 2\n  b: }")
    (tmp_path / "empty.yaml").write_text("")
    with pytest.raises(TaskSpecError, match="task: must be a mapping"):
        load_task_file(tmp_path / "empty.yaml")


def test_to_dict_round_trips() -> None:
    spec = parse_task(base())
    doc = spec.to_dict()
    assert doc["format"] == FORMAT
    assert parse_task(doc) == spec
    assert parse_task(json.loads(json.dumps(doc))).to_dict() == doc
    doc["title"] = "changed"
    assert spec.to_dict()["title"] == "Count the lines"  # a copy


def test_to_dict_is_the_document_as_given() -> None:
    doc = base()
    del doc["format"]
    original = copy.deepcopy(doc)
    spec = parse_task(doc)
    assert spec.to_dict() == {"format": FORMAT, **original}
    assert doc == original  # parsing does not change the caller's document


param_docs = st.fixed_dictionaries(
    {},
    optional={
        "c": st.lists(st.integers() | st.text(stored_text, max_size=4), min_size=1, max_size=4).map(
            lambda v: {"choice": v}
        ),
        "i": st.tuples(st.integers(-50, 50), st.integers(0, 50)).map(lambda t: {"int": [t[0], t[0] + t[1]]}),
        "w": st.integers(1, 64).map(lambda n: {"word": {"length": n}}),
        "v": json_values.map(lambda v: {"value": v}),
    },
)


@given(
    params=param_docs,
    combine=st.sampled_from(["all", "any"]),
    max_steps=st.integers(1, 500),
    tags=st.lists(st.text(stored_text, max_size=5), max_size=3),
    seed=st.integers(0, 1000),
)
def test_round_trip_property(
    params: dict[str, Any], combine: str, max_steps: int, tags: list[str], seed: int
) -> None:
    doc = base()
    doc["params"] = {**doc["params"], **params}
    doc["checker"]["combine"] = combine
    doc["limits"]["max_steps"] = max_steps
    doc["tags"] = tags
    spec = parse_task(doc)
    again = parse_task(spec.to_dict())
    assert again == spec
    assert again.draw_params(seed) == spec.draw_params(seed)


def test_a_document_over_the_size_limit_is_refused_before_anything_else() -> None:
    from agent_core.tasks.spec import MAX_DOC_BYTES

    doc = base()
    doc["setup"].append({"op": "put_file", "path": "big.txt", "content": "x" * MAX_DOC_BYTES})
    with pytest.raises(TaskSpecError, match=f"task: the document is .* bytes; at most {MAX_DOC_BYTES}"):
        parse_task(doc)
    doc["setup"][-1]["content"] = "x" * 1000
    assert parse_task(doc).setup[-1].args["content"] == "x" * 1000
