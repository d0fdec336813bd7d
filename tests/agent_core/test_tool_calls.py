"""Qwen-VL computer_use / mobile_use function calls (the `tool_calls` format) as actions."""

from __future__ import annotations

import json

import pytest

from agent_core import actions as A
from agent_core.actions.compat import parse_output
from agent_core.actions.grammar import WAIT_SECONDS, ActionParseError
from agent_core.actions.pointer import end_point
from agent_core.actions.tool_calls import parse_tool_calls
from tests.agent_core.screens import FHD
from tests.agent_core.test_coords import reference_smart_resize

# Two screen points, C (960, 540) and Q (480, 270), in each coordinate space of a 1920x1080 screen.
# Smart-resized it is 1932x1092: 966 * 1920 / 1932 = 960 and 483 * 1920 / 1932 = 480 (worked by hand).
POINTS = {
    "smart_resize": {"C": [966, 546], "Q": [483, 273]},
    "relative": {"C": [500, 500], "Q": [250, 250]},
    "absolute": {"C": [960, 540], "Q": [480, 270]},
}
C, Q = (960, 540), (480, 270)


def _args(args: dict[str, object], coords: str) -> dict[str, object]:
    """`args` with the "C" / "Q" placeholders made points of the `coords` space."""
    return {k: POINTS[coords][v] if v in ("C", "Q") else v for k, v in args.items()}


def _response(tool: str, calls: list[dict[str, object]], coords: str, thought: str = "") -> str:
    blocks = [
        "<tool_call>\n" + json.dumps({"name": tool, "arguments": _args(c, coords)}) + "\n</tool_call>"
        for c in calls
    ]
    return thought + ("\n" if thought else "") + "\n".join(blocks)


COMPUTER: list[tuple[list[dict[str, object]], list[A.Action]]] = [
    ([{"action": "key", "keys": ["enter"]}], [A.Press("enter")]),
    ([{"action": "key", "keys": ["ctrl", "shift", "t"]}], [A.Hotkey(("ctrl", "shift", "t"))]),
    ([{"action": "type", "text": "hello world\n"}], [A.Type("hello world\n")]),
    ([{"action": "mouse_move", "coordinate": "C"}], [A.Hover(*C)]),
    ([{"action": "left_click", "coordinate": "C"}], [A.Click(*C)]),
    ([{"action": "right_click", "coordinate": "Q"}], [A.RightSingle(*Q)]),
    ([{"action": "middle_click", "coordinate": "Q"}], [A.MiddleSingle(*Q)]),
    ([{"action": "double_click", "coordinate": "C"}], [A.LeftDouble(*C)]),
    ([{"action": "left_click_drag", "start_coordinate": "Q", "coordinate": "C"}], [A.Drag(*Q, *C)]),
    (
        [{"action": "mouse_move", "coordinate": "Q"}, {"action": "left_click_drag", "coordinate": "C"}],
        [A.Drag(*Q, *C)],
    ),
    (
        [{"action": "mouse_move", "coordinate": "Q"}, {"action": "left_click"}],
        [A.Hover(*Q), A.Click(*Q)],
    ),
    ([{"action": "scroll", "pixels": -5, "coordinate": "Q"}], [A.Scroll(*Q, "down", 5)]),
    ([{"action": "scroll", "pixels": 3}], [A.Scroll(*C, "up", 3)]),  # no pointer yet: the centre
    ([{"action": "scroll", "pixels": 2.0, "coordinate": "C"}], [A.Scroll(*C, "up", 2)]),
    ([{"action": "hscroll", "pixels": 4, "coordinate": "Q"}], [A.Scroll(*Q, "right", 4)]),
    ([{"action": "hscroll", "pixels": -2, "coordinate": "Q"}], [A.Scroll(*Q, "left", 2)]),
    ([{"action": "wait", "time": 2}], [A.Wait(2)]),
    ([{"action": "wait"}], [A.Wait(WAIT_SECONDS)]),
    ([{"action": "terminate", "status": "success"}], [A.Finished("")]),
    ([{"action": "terminate", "status": "failure"}], [A.Finished("infeasible")]),
    ([{"action": "answer", "text": "42"}], [A.Finished("42")]),
    (
        [
            {"action": "left_click", "coordinate": "Q"},
            {"action": "type", "text": "report.pdf"},
            {"action": "key", "keys": ["enter"]},
        ],
        [A.Click(*Q), A.Type("report.pdf"), A.Press("enter")],
    ),
]
MOBILE: list[tuple[list[dict[str, object]], list[A.Action]]] = [
    ([{"action": "click", "coordinate": "C"}], [A.Click(*C)]),
    ([{"action": "long_press", "coordinate": "Q", "time": 2}], [A.LongPress(*Q, seconds=2)]),
    ([{"action": "long_press", "coordinate": "Q"}], [A.LongPress(*Q, seconds=1.0)]),
    ([{"action": "swipe", "coordinate": "C", "coordinate2": "Q"}], [A.Drag(*C, *Q)]),
    ([{"action": "type", "text": "天气"}], [A.Type("天气")]),
    ([{"action": "system_button", "button": "Back"}], [A.PressBack()]),
    ([{"action": "system_button", "button": "Home"}], [A.PressHome()]),
    ([{"action": "system_button", "button": "Enter"}], [A.Type("\n")]),
    ([{"action": "open", "text": "com.android.settings"}], [A.OpenApp("com.android.settings")]),
    ([{"action": "wait", "time": 1.5}], [A.Wait(1.5)]),
    ([{"action": "terminate", "status": "success"}], [A.Finished("")]),
    ([{"action": "terminate", "status": "failure"}], [A.Finished("infeasible")]),
    ([{"action": "answer", "text": "8 GB"}], [A.Finished("8 GB")]),
]


@pytest.mark.parametrize("coords", list(POINTS))
@pytest.mark.parametrize(("calls", "expected"), COMPUTER, ids=[str(c[0][-1]["action"]) for c in COMPUTER])
def test_computer_use_vocabulary(calls, expected, coords):
    parsed = parse_output(
        _response("computer_use", calls, coords), fmt="tool_calls", screen=FHD, coords=coords
    )
    assert list(parsed.actions) == expected


@pytest.mark.parametrize("coords", list(POINTS))
@pytest.mark.parametrize(("calls", "expected"), MOBILE, ids=[str(c[0][-1]["action"]) for c in MOBILE])
def test_mobile_use_vocabulary(calls, expected, coords):
    text = _response("mobile_use", calls, coords)
    parsed = parse_output(text, fmt="tool_calls", screen=FHD, coords=coords, platform="mobile")
    assert list(parsed.actions) == expected


# The sandbox's pointer at Q when the screenshot was taken (carried across turns by the agent).
AT_POINTER: list[tuple[list[dict[str, object]], list[A.Action]]] = [
    ([{"action": "left_click_drag", "coordinate": "C"}], [A.Drag(*Q, *C)]),  # Qwen2.5-VL's schema
    ([{"action": "scroll", "pixels": -3}], [A.Scroll(*Q, "down", 3)]),
    ([{"action": "hscroll", "pixels": 2}], [A.Scroll(*Q, "right", 2)]),
    ([{"action": "left_click"}], [A.Click(*Q)]),
    ([{"action": "middle_click"}], [A.MiddleSingle(*Q)]),
    ([{"action": "double_click"}], [A.LeftDouble(*Q)]),
    # A call that names its point moves the pointer for the calls after it.
    (
        [{"action": "mouse_move", "coordinate": "C"}, {"action": "right_click"}],
        [A.Hover(*C), A.RightSingle(*C)],
    ),
]


@pytest.mark.parametrize("coords", list(POINTS))
@pytest.mark.parametrize(("calls", "expected"), AT_POINTER, ids=[str(c[0][-1]["action"]) for c in AT_POINTER])
def test_actions_without_a_point_act_where_the_sandbox_pointer_is(calls, expected, coords):
    text = _response("computer_use", calls, coords)
    assert (
        list(parse_output(text, fmt="tool_calls", screen=FHD, coords=coords, pointer=Q).actions) == expected
    )


def test_mobile_key_is_a_key_event_and_menu_the_menu_key():
    text = _response("mobile_use", [{"action": "key", "text": "volume_up"}], "absolute")
    parsed = parse_tool_calls(text, screen=FHD, coords="absolute", platform="mobile")
    assert parsed.actions == (A.Press("volume_up"),)  # the Android sandbox sends it as KEYCODE_VOLUME_UP
    text = _response("mobile_use", [{"action": "system_button", "button": "Menu"}], "absolute")
    assert parse_tool_calls(text, screen=FHD, coords="absolute", platform="mobile").actions == (
        A.Press("menu"),
    )


def test_thought_and_action_summary_are_kept():
    text = (
        "<think>The Save button is at the top.</think>\nAction: Click Save.\n"
        '<tool_call>\n{"name": "computer_use", "arguments": {"action": "left_click", '
        '"coordinate": [960, 540]}}\n</tool_call>'
    )
    parsed = parse_tool_calls(text, screen=FHD, coords="absolute")
    assert (parsed.thought, parsed.action_summary) == ("The Save button is at the top.", "Click Save.")
    plain = parse_tool_calls(
        "Thought: first\n" + _response("computer_use", [{"action": "wait"}], "absolute"),
        screen=FHD,
        coords="absolute",
    )
    assert (plain.thought, plain.action_summary) == ("first", "")


def test_each_action_keeps_its_call_as_text():
    calls = [
        {"action": "mouse_move", "coordinate": "Q"},
        {"action": "left_click_drag", "coordinate": "C"},
        {"action": "key", "keys": ["ctrl", "s"]},
    ]
    parsed = parse_tool_calls(_response("computer_use", calls, "absolute"), screen=FHD, coords="absolute")
    texts = [[json.loads(line) for line in t.split("\n")] for t in parsed.action_texts]
    assert [[c["arguments"]["action"] for c in t] for t in texts] == [
        ["mouse_move", "left_click_drag"],
        ["key"],
    ]


CALL = {"name": "computer_use", "arguments": {"action": "left_click", "coordinate": [960, 540]}}
WAIT = {"name": "computer_use", "arguments": {"action": "wait", "time": 1}}
FORMS = [
    ("bare call", json.dumps(CALL), ""),
    ("prose then bare call", "I will click.\n" + json.dumps(CALL), "I will click."),
    ("fenced", "Click it.\n```json\n" + json.dumps(CALL) + "\n```", "Click it."),
    ("list", json.dumps([CALL, WAIT]), ""),
    ("block holding a list", "<tool_call>" + json.dumps([CALL, WAIT]) + "</tool_call>", ""),
    ("fence inside a block", "<tool_call>\n```json\n" + json.dumps(CALL) + "\n```\n</tool_call>", ""),
    ("cut-off closing tag", "ok\n<tool_call>\n" + json.dumps(CALL), "ok"),
    (
        "OpenAI message, arguments as a JSON string",
        json.dumps(
            {
                "role": "assistant",
                "content": "Clicking.",
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])},
                    }
                    for c in (CALL, WAIT)
                ],
            }
        ),
        "Clicking.",
    ),
    (
        "OpenAI message without content",
        json.dumps({"content": None, "tool_calls": [{"type": "function", "function": CALL}]}),
        "",
    ),
    ("tool_calls items in a list", json.dumps([{"type": "function", "function": CALL}]), ""),
]


@pytest.mark.parametrize(("text", "thought"), [f[1:] for f in FORMS], ids=[f[0] for f in FORMS])
def test_the_forms_models_use(text, thought):
    parsed = parse_output(text, fmt="tool_calls", screen=FHD, coords="absolute")
    assert parsed.actions[0] == A.Click(960, 540)
    assert all(a in (A.Click(960, 540), A.Wait(1)) for a in parsed.actions)
    assert parsed.thought == thought


def test_several_blocks_and_prose_between_them():
    text = (
        "First the field.\n<tool_call>" + json.dumps(CALL) + "</tool_call>\nThen wait.\n"
        "<tool_call>" + json.dumps(WAIT) + "</tool_call>"
    )
    parsed = parse_tool_calls(text, screen=FHD, coords="absolute")
    assert parsed.actions == (A.Click(960, 540), A.Wait(1))
    assert parsed.thought == "First the field.\n\nThen wait."


def _one(arguments: object, tool: str = "computer_use") -> str:
    return "<tool_call>" + json.dumps({"name": tool, "arguments": arguments}) + "</tool_call>"


MALFORMED = [
    ('<tool_call>{"name": "computer_use", "arguments": {"action": "left_cl', "not valid JSON"),
    ("<tool_call></tool_call>", "an empty call block"),
    ("I will click the OK button.", "no tool call"),
    ("[]", "an empty list of calls"),
    ("done </tool_call>", "without its <tool_call>"),
    ("<tool_call>42</tool_call>", "a call must be a JSON object, got int"),
    ('<tool_call>{"name": 5, "arguments": {}}</tool_call>', "a call needs a name"),
    ('<tool_call>{"name": "computer_use"}</tool_call>', "arguments must be a JSON object, got NoneType"),
    ('<tool_call>{"name": "computer_use", "arguments": [1]}</tool_call>', "arguments must be a JSON object"),
    ('<tool_call>{"name": "computer_use", "arguments": "{oops"}</tool_call>', "arguments: not valid JSON"),
    ('<tool_call>{"name": "computer_use", "arguments": {}, "x": 1}</tool_call>', "unknown key(s) x"),
    (_one({"action": "left_click"}, tool="browser_use"), "unknown tool 'browser_use'"),
    (_one({"action": "teleport"}), "unknown computer_use action 'teleport'"),
    (_one({"coordinate": [1, 2]}), "unknown computer_use action None"),
    (_one({"action": "click", "coordinate": [1, 2]}), "unknown computer_use action 'click'"),
    (_one({"action": "left_click", "coordinate": [1, 2], "button": "left"}), "unknown argument(s) button"),
    (_one({"action": "triple_click", "coordinate": [1, 2]}), "no triple-click action"),
    (_one({"action": "left_click"}), "before the pointer was placed"),
    (_one({"action": "mouse_move"}), "mouse_move: needs coordinate"),
    (_one({"action": "left_click", "coordinate": "500,300"}), "coordinate must be [x, y]"),
    (_one({"action": "left_click", "coordinate": [1]}), "coordinate must be [x, y]"),
    (_one({"action": "left_click", "coordinate": ["1", 2]}), "coordinate: x must be a number"),
    (_one({"action": "left_click", "coordinate": [True, 2]}), "coordinate: x must be a number"),
    (_one({"action": "left_click", "coordinate": [5000, 10]}), "outside"),
    (_one({"action": "left_click", "coordinate": [-1, 10]}), "outside"),
    (_one({"action": "left_click_drag", "coordinate": [1, 2]}), "needs start_coordinate"),
    (_one({"action": "left_click_drag", "start_coordinate": [1, 2]}), "needs coordinate"),
    (_one({"action": "key", "keys": "ctrl+c"}), "keys must be a non-empty list"),
    (_one({"action": "key", "keys": []}), "keys must be a non-empty list"),
    (_one({"action": "key", "keys": ["ctrl", 7]}), "keys must be a non-empty list"),
    (_one({"action": "type"}), "type: needs text"),
    (_one({"action": "type", "text": 5}), "text must be a string"),
    (_one({"action": "scroll"}), "needs pixels"),
    (_one({"action": "scroll", "pixels": 0}), "non-zero integer"),
    (_one({"action": "scroll", "pixels": 2.5}), "non-zero integer"),
    (_one({"action": "scroll", "pixels": "down"}), "non-zero integer"),
    (_one({"action": "wait", "time": "soon"}), "time must be a number"),
    (_one({"action": "wait", "time": 100}), "wait.seconds must be"),
    (_one({"action": "wait", "time": -1}), "time must be >= 0"),
    (_one({"action": "terminate"}), "status must be success or failure, got None"),
    (_one({"action": "terminate", "status": "done"}), "status must be success or failure"),
    (_one({"action": "answer"}), "answer: needs text"),
    (_one({"action": "system_button", "button": "Power"}, tool="mobile_use"), "no action for button 'Power'"),
    (_one({"action": "system_button"}, tool="mobile_use"), "needs button"),
    (_one({"action": "open", "text": " "}, tool="mobile_use"), "text must not be empty"),
    (_one({"action": "swipe", "coordinate": [1, 2]}, tool="mobile_use"), "needs coordinate2"),
    (_one({"action": "long_press", "coordinate": [1, 2], "time": True}, tool="mobile_use"), "time must be"),
    (
        '{"tool_calls": [{"type": "retrieval", "function": {}}]}',
        "type must be 'function', got 'retrieval'",
    ),
    ('{"tool_calls": []}', "tool_calls must be a non-empty list"),
    ('{"tool_calls": [], "content": 5}', "content must be a string"),
    ('{"tool_calls": [' + json.dumps(CALL) + '], "usage": 1}', "unknown key(s) usage"),
    ("x" * 20_001, "too long"),
    ("<tool_call>" + "[" * 5000 + "]" * 5000 + "</tool_call>", "JSON"),
    (_one({"action": "type", "text": json.loads("[" * 40 + "]" * 40)}), "nests deeper"),
    ("<tool_call>" + json.dumps(CALL) + "</tool_call>\n" + _one({"action": "zap"}), "call 1"),
]


@pytest.mark.parametrize(("text", "needle"), MALFORMED, ids=[m[1] for m in MALFORMED])
def test_malformed_calls_name_the_problem(text, needle):
    with pytest.raises(ActionParseError) as info:
        parse_output(text, fmt="tool_calls", screen=FHD, coords="absolute", platform="desktop")
    assert info.value.reason
    assert needle in str(info.value)


@pytest.mark.parametrize(
    ("platform", "tool", "arguments", "needle"),
    [
        (
            "desktop",
            "mobile_use",
            {"action": "system_button", "button": "Back"},
            "press_back() is not available",
        ),
        ("mobile", "computer_use", {"action": "key", "keys": ["ctrl", "c"]}, "hotkey() is not available"),
        ("mobile", "computer_use", {"action": "double_click", "coordinate": [1, 2]}, "left_double()"),
    ],
)
def test_actions_the_platform_lacks_are_refused(platform, tool, arguments, needle):
    with pytest.raises(ActionParseError, match=needle.replace("(", "\\(").replace(")", "\\)")):
        parse_tool_calls(_one(arguments, tool), screen=FHD, coords="absolute", platform=platform)


def test_bad_options_are_programmer_errors():
    with pytest.raises(ValueError, match="unknown coordinate space"):
        parse_tool_calls(json.dumps(CALL), screen=FHD, coords="pixels")
    with pytest.raises(ValueError, match="unknown platform"):
        parse_tool_calls(json.dumps(CALL), screen=FHD, platform="tv")
    with pytest.raises(ActionParseError, match="must be text"):
        parse_tool_calls(CALL, screen=FHD)  # type: ignore[arg-type]


def _json5_form(value: object) -> str:
    """`value` written as a model sometimes writes it: single-quoted strings, a trailing comma after
    every object and array, keys left bare where they are identifiers (what qwen-agent's json5 reads)."""
    if isinstance(value, dict):
        items = [f"{k if k.isidentifier() else _json5_form(k)}: {_json5_form(v)}" for k, v in value.items()]
        return "{" + ", ".join(items) + ",}"
    if isinstance(value, list):
        return "[" + ", ".join(_json5_form(v) for v in value) + ",]"
    if isinstance(value, str):  # JSON's escapes, with the quotes swapped
        return "'" + json.dumps(value, ensure_ascii=False)[1:-1].replace('\\"', '"').replace("'", "\\'") + "'"
    return json.dumps(value)


from hypothesis import given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

_POINT = st.tuples(st.integers(0, 1919), st.integers(0, 1079)).map(list)
_ARGS = st.one_of(
    st.fixed_dictionaries({"action": st.just("left_click"), "coordinate": _POINT}),
    st.fixed_dictionaries({"action": st.just("double_click"), "coordinate": _POINT}),
    st.fixed_dictionaries({"action": st.just("type"), "text": st.text(max_size=40)}),
    st.fixed_dictionaries(
        {
            "action": st.just("key"),
            "keys": st.lists(st.sampled_from(["ctrl", "alt", "c", "enter"]), min_size=1, max_size=3),
        }
    ),
    st.fixed_dictionaries({"action": st.just("wait"), "time": st.integers(0, 5)}),
)


@settings(max_examples=150, deadline=None)
@given(args=_ARGS)
def test_single_quoted_trailing_comma_json_reads_as_the_strict_json_does(args):
    """Qwen's own agent code reads tool-call JSON with json5 after json: so does the platform, and the
    forms it tolerates give exactly the actions strict JSON gives."""
    call = {"name": "computer_use", "arguments": args}
    strict = parse_output(
        f"<tool_call>{json.dumps(call)}</tool_call>",
        fmt="tool_calls",
        screen=FHD,
        coords="absolute",
        platform="desktop",
    )
    loose = parse_output(
        f"<tool_call>{_json5_form(call)}</tool_call>",
        fmt="tool_calls",
        screen=FHD,
        coords="absolute",
        platform="desktop",
    )
    assert loose.actions == strict.actions


# Qwen2.5-VL's processor resizes within 3,136..12,845,056 pixels (qwen-vl-utils, the checkpoints'
# preprocessor_config.json); UI-TARS-1.5's action parser (bare "smart_resize") from 78,400. On a screen
# under 78,400 pixels they differ, and the checkpoint's space is the one its model means.
QWEN25_VL_SPACE = "smart_resize:3136:12845056"


@pytest.mark.parametrize("screen", [(320, 240), (200, 150), (280, 200), (640, 100)])
def test_small_screens_map_as_the_checkpoints_processor_resizes(screen):
    w, h = screen
    h_bar, w_bar = reference_smart_resize(h, w, min_pixels=3136)
    bare_h, bare_w = reference_smart_resize(h, w)
    assert (h_bar, w_bar) != (bare_h, bare_w)  # the case the two limits disagree on
    for mx, my in [(0, 0), (w_bar // 3, h_bar // 2), (w_bar - 1, h_bar - 1), (w_bar // 2 + 1, 7)]:
        text = _one({"action": "left_click", "coordinate": [mx, my]})
        (click,) = parse_tool_calls(text, screen=screen, coords=QWEN25_VL_SPACE).actions
        # As Qwen's cookbook maps it back: x * W / w_bar, to the nearest pixel.
        assert abs(click.x - mx * w / w_bar) <= 0.5 and abs(click.y - my * h / h_bar) <= 0.5


def _on_qwens_computer(calls: list[dict[str, object]], pointer: tuple[int, int]) -> list[tuple[object, ...]]:
    """What Qwen's cookbook computer does with absolute-space calls (pyautogui on the real mouse,
    written independently of the parser): the events, the pointer moving as each one leaves it."""
    events: list[tuple[object, ...]] = []
    x, y = pointer
    for c in calls:
        at = c.get("coordinate")
        if at is not None:
            x, y = at  # type: ignore[misc]
        name = c["action"]
        if name == "left_click_drag":  # pyautogui.dragTo(x, y): from where the pointer was
            events.append(("drag", *pointer, x, y))
        elif name == "scroll":  # pyautogui.scroll(pixels) where the pointer is
            events.append(("scroll", x, y, "up" if c["pixels"] > 0 else "down", abs(c["pixels"])))  # type: ignore[operator]
        elif name == "mouse_move":
            events.append(("move", x, y))
        else:
            events.append((name, x, y))
        pointer = (x, y)
    return events


_AS_EVENT = {
    A.Drag: lambda a: ("drag", a.x1, a.y1, a.x2, a.y2),
    A.Scroll: lambda a: ("scroll", a.x, a.y, a.direction, a.amount),
    A.Hover: lambda a: ("move", a.x, a.y),
    A.Click: lambda a: ("left_click", a.x, a.y),
    A.MiddleSingle: lambda a: ("middle_click", a.x, a.y),
    A.RightSingle: lambda a: ("right_click", a.x, a.y),
    A.LeftDouble: lambda a: ("double_click", a.x, a.y),
}
_POINTER_CALL = st.one_of(
    st.fixed_dictionaries({"action": st.just("mouse_move"), "coordinate": _POINT}),
    st.fixed_dictionaries({"action": st.just("left_click_drag"), "coordinate": _POINT}),
    st.fixed_dictionaries(
        {"action": st.just("scroll"), "pixels": st.integers(-20, 20).filter(bool)},
        optional={"coordinate": _POINT},
    ),
    *[
        st.fixed_dictionaries({"action": st.just(name)}, optional={"coordinate": _POINT})
        for name in ("left_click", "middle_click", "right_click", "double_click")
    ],
)


@settings(max_examples=300, deadline=None)
@given(calls=st.lists(_POINTER_CALL, min_size=1, max_size=6), start=_POINT, per_turn=st.booleans())
def test_fuzzed_pointer_calls_do_what_they_do_on_qwens_computer(calls, start, per_turn):
    """Calls that act where the pointer is, one per turn (the agent carrying the pointer) or all in one
    response, agree with the same calls on Qwen's own computer."""
    pointer: tuple[int, int] = (start[0], start[1])
    if per_turn:
        actions: list[A.Action] = []
        for call in calls:
            (action,) = parse_tool_calls(_one(call), screen=FHD, coords="absolute", pointer=pointer).actions
            actions.append(action)
            pointer = end_point(action) or pointer
    else:
        text = "\n".join(_one(c) for c in calls)
        actions = list(parse_tool_calls(text, screen=FHD, coords="absolute", pointer=pointer).actions)
    events = [_AS_EVENT[type(action)](action) for action in actions]
    expected = _on_qwens_computer(calls, (start[0], start[1]))
    if not per_turn:
        # In one response a mouse_move just before a drag folds into it (one gesture, one step).
        expected = [
            e
            for e, after in zip(expected, [*expected[1:], None], strict=True)
            if not (e[0] == "move" and after and after[0] == "drag")
        ]
    assert events == expected
