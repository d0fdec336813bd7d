"""The UI-TARS grammar written: formatting, round trips through the parser (hypothesis), the JSON form."""

from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from agent_core import actions as A
from agent_core.actions.coords import model_size
from agent_core.actions.grammar import (
    MAX_RESPONSE_CHARS,
    WAIT_SECONDS,
    ActionParseError,
    ParsedResponse,
    format_action,
    format_response,
    parse_response,
)
from agent_core.actions.json_form import parse_json_response, response_to_json
from tests.agent_core.screens import HD

# --- formatting --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("action", "box", "point"),
    [
        (A.Click(640, 360), "click(start_box='(644,364)')", "click(point='<point>644 364</point>')"),
        (
            A.Drag(10, 20, 497, 593),
            "drag(start_box='(10,20)', end_box='(500,600)')",
            "drag(start_point='<point>10 20</point>', end_point='<point>500 600</point>')",
        ),
        (
            A.Scroll(640, 360, "down", 5),
            "scroll(start_box='(644,364)', direction='down')",
            "scroll(point='<point>644 364</point>', direction='down')",
        ),
        (A.Scroll(0, 0, "up", 2), "scroll(start_box='(0,0)', direction='up', amount='2')", None),
        (A.Hotkey(("ctrl", "shift", "t")), "hotkey(key='ctrl shift t')", None),
        (A.Type('it\'s "done"\n'), "type(content='it\\'s \"done\"\\n')", None),
        (A.Type("C:\\tmp"), "type(content='C:\\\\tmp')", None),
        (A.Wait(WAIT_SECONDS), "wait()", None),
        (A.Wait(0.5), "wait(seconds='0.5')", None),
        (A.Finished(""), "finished()", None),
        (A.Finished("infeasible: no printer"), "finished(content='infeasible: no printer')", None),
        (A.CallUser(), "call_user()", None),
        (A.PressHome(), "press_home()", None),
        (A.LongPress(640, 360, 2.0), "long_press(start_box='(644,364)', seconds='2.0')", None),
        (A.Terminal("ls", 30.0), "terminal(command='ls')", None),
        (
            A.McpCall("fs", "read", {"p": "x"}),
            "mcp_call(server='fs', tool='read', arguments='{\"p\": \"x\"}')",
            None,
        ),
    ],
)
def test_format_action_canonical_text(action, box, point):
    assert format_action(action, screen=HD) == box
    if point is not None:
        assert format_action(action, screen=HD, style="point") == point


def test_format_response_layout():
    text = format_response(
        thought="Search for it.",
        actions=[A.Click(640, 360), A.Type("cats\n")],
        screen=HD,
        reflection="Nothing happened.",
        action_summary="Type the query.",
    )
    assert text == (
        "Reflection: Nothing happened.\nThought: Search for it.\nAction_Summary: Type the query.\n"
        "Action: click(start_box='(644,364)')\n\ntype(content='cats\\n')"
    )


@pytest.mark.parametrize(
    ("kwargs", "needle"),
    [
        ({"thought": "x", "actions": []}, "at least one action"),
        ({"thought": "x\nAction: wait()", "actions": [A.Wait()]}, "section header"),
        ({"thought": "x", "actions": [A.Wait()], "style": "xml"}, "valid: box, point"),
        ({"thought": "x", "actions": [A.Press("page down")]}, "cannot be written"),
        ({"thought": "x", "actions": [A.Hotkey(("ctrl+c",))]}, "several keys"),
        ({"thought": "x", "actions": [A.McpCall("a", "b", {"x": object()})]}, "not JSON"),
    ],
)
def test_format_refuses_what_would_not_read_back(kwargs, needle):
    with pytest.raises(ValueError, match=needle):
        format_response(screen=HD, **kwargs)


def test_format_clamps_off_screen_points_like_to_screen():
    assert format_action(A.Click(5000, 10), screen=HD, coords="absolute") == "click(start_box='(1279,10)')"


# --- round trips (hypothesis) ------------------------------------------------------------------

KEYS = ["ctrl", "shift", "alt", "super", "c", "v", "t", "enter", "tab", "f4", "+", "-", "escape", "pagedown"]
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=40)
NONBLANK = TEXT.filter(lambda s: s.strip() != "")
JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
    | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=6,
)
THOUGHT = st.text(st.sampled_from(list("abc xyz\n.,!?'\"()=-天气确定") + ["é", "😀"]), max_size=60)


def actions_for(screen, platform):
    width, height = screen
    xs, ys = st.integers(0, width - 1), st.integers(0, height - 1)
    common = [
        st.builds(A.Click, xs, ys),
        st.builds(A.Drag, xs, ys, xs, ys),
        st.builds(A.Scroll, xs, ys, st.sampled_from(A.SCROLL_DIRECTIONS), st.integers(1, 50)),
        st.builds(A.Type, TEXT),
        st.builds(A.Wait, st.floats(0, 60)),
        st.builds(A.Finished, TEXT),
        st.just(A.CallUser()),
        st.builds(A.Terminal, NONBLANK, st.floats(0, 3600)),
        st.builds(A.FileRead, NONBLANK),
        st.builds(A.FileWrite, NONBLANK, TEXT),
        st.builds(A.McpCall, TEXT, TEXT, st.dictionaries(TEXT, JSONISH, max_size=3)),
    ]
    if platform == "mobile":
        extra = [
            st.builds(A.LongPress, xs, ys, st.floats(0, 10)),
            st.builds(A.OpenApp, NONBLANK),
            st.just(A.PressHome()),
            st.just(A.PressBack()),
        ]
    else:
        extra = [
            st.builds(A.LeftDouble, xs, ys),
            st.builds(A.RightSingle, xs, ys),
            st.builds(A.Hover, xs, ys),
            st.builds(A.Hotkey, st.lists(st.sampled_from(KEYS), min_size=1, max_size=3).map(tuple)),
            st.builds(A.Press, st.sampled_from(KEYS)),
            st.builds(A.KeyDown, st.sampled_from(KEYS)),
            st.builds(A.KeyUp, st.sampled_from(KEYS)),
        ]
    return st.one_of(*common, *extra)


# Screens where each space is at least as fine as the screen, so the round trip must be exact.
EXACT = [
    ((1280, 720), "smart_resize"),
    ((1920, 1080), "smart_resize"),
    ((1080, 2400), "smart_resize"),
    ((1280, 720), "absolute"),
    ((3840, 2160), "absolute"),
    ((1000, 800), "relative"),
    ((640, 480), "relative"),
]


@st.composite
def cases(draw, platform):
    screen, coords = draw(st.sampled_from(EXACT))
    acts = draw(st.lists(actions_for(screen, platform), min_size=1, max_size=4))
    return screen, coords, acts


@pytest.mark.parametrize("platform", ["desktop", "mobile"])
@pytest.mark.parametrize("style", ["box", "point"])
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_format_then_parse_gives_the_same_actions_and_thought(platform, style, data):
    screen, coords, acts = data.draw(cases(platform))
    thought = data.draw(THOUGHT)
    assume(":" not in thought)
    text = format_response(thought=thought, actions=acts, screen=screen, coords=coords, style=style)
    parsed = parse_response(text, screen=screen, coords=coords, platform=platform)
    assert parsed.actions == tuple(acts)
    assert parsed.thought == thought.strip()
    assert parsed.action_texts == tuple(
        format_action(a, screen=screen, coords=coords, style=style) for a in acts
    )


@settings(max_examples=150, deadline=None)
@given(
    st.sampled_from([(3840, 2160), (5120, 2880), (2560, 1600)]),
    st.integers(0, 10**9),
    st.integers(0, 10**9),
)
def test_coarse_spaces_round_trip_within_the_bound(screen, rx, ry):
    width, height = screen
    click = A.Click(rx % width, ry % height)
    for coords in ("relative", "smart_resize"):
        ext_w, ext_h = model_size(screen=screen, space=coords)
        (back,) = parse_response(
            format_response(thought="t", actions=[click], screen=screen, coords=coords),
            screen=screen,
            coords=coords,
        ).actions
        assert abs(back.x - click.x) <= -(-width // (2 * ext_w))
        assert abs(back.y - click.y) <= -(-height // (2 * ext_h))


# --- JSON form ---------------------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(data=st.data())
def test_json_form_round_trips(data):
    screen, coords, acts = data.draw(cases("desktop"))
    parsed = ParsedResponse(
        thought=data.draw(TEXT), reflection="", action_summary="", actions=tuple(acts), action_texts=()
    )
    text = json.dumps(response_to_json(parsed, screen=screen, coords=coords))
    back = parse_json_response(text, screen=screen, coords=coords)
    assert back.actions == parsed.actions and back.thought == parsed.thought


def test_json_golden():
    text = json.dumps(
        {
            "thought": "点击搜索框",
            "actions": [
                {"type": "click", "x": 644, "y": 364},
                {"type": "type", "content": "cats\n"},
                {"type": "hotkey", "keys": ["ctrl", "a"]},
                {"type": "drag", "x1": 10, "y1": 20, "x2": 500, "y2": 600},
            ],
        }
    )
    parsed = parse_json_response(text, screen=HD)
    assert parsed.thought == "点击搜索框"
    assert parsed.actions == (
        A.Click(640, 360),
        A.Type("cats\n"),
        A.Hotkey(("ctrl", "a")),
        A.Drag(10, 20, 497, 593),
    )
    assert json.loads(parsed.action_texts[0]) == {"type": "click", "x": 644, "y": 364}


def test_response_to_json_defaults_to_screen_pixels():
    parsed = parse_response("Thought: t\nAction: click(start_box='(644,364)')", screen=HD)
    assert response_to_json(parsed) == {
        "coords": "absolute",
        "thought": "t",
        "reflection": "",
        "action_summary": "",
        "actions": [{"type": "click", "x": 640, "y": 360}],
    }
    with pytest.raises(ValueError, match="needs screen"):
        response_to_json(parsed, coords="relative")


JSON_MALFORMED = [
    ("", "not valid JSON"),
    ("[]", "must be a JSON object"),
    ('{"thought": "x"}', "non-empty list"),
    ('{"actions": []}', "non-empty list"),
    ('{"actions": [1]}', "must be an object"),
    ('{"actions": [{"type": "fly"}]}', "unknown action type 'fly'"),
    ('{"actions": [{"type": "click", "x": 1}]}', "both x and y"),
    ('{"actions": [{"type": "click", "x": "1", "y": 2}]}', "x must be a number"),
    ('{"actions": [{"type": "click", "x": 1e999, "y": 2}]}', "finite"),
    ('{"actions": [{"type": "click", "x": 99999, "y": 2}]}', "outside"),
    ('{"actions": [{"type": "click", "x": 1, "y": 2, "z": 3}]}', "unknown field"),
    ('{"actions": [{"type": "hotkey", "keys": "ctrl c"}]}', "keys must be a list"),
    ('{"actions": [{"type": "wait", "seconds": "soon"}]}', "seconds must be a finite number"),
    ('{"actions": [{"type": "mcp_call", "server": "a", "tool": "b", "arguments": []}]}', "arguments must be"),
    ('{"actions": [{"type": "type"}]}', "content"),
    ('{"actions": [{"type": "press_home"}]}', "not available on desktop"),
    ('{"actions": [{"type": "wait"}], "extra": 1}', "unknown key(s) 'extra'"),
    ('{"actions": [{"type": "wait"}], "coords": "absolute"}', "says coords 'absolute'"),
    ('{"actions": [{"type": "wait"}], "thought": 3}', "thought must be a string"),
    ("[" * 5000 + "]" * 5000, "not valid JSON"),
    (
        '{"actions": [{"type": "type", "content": ' + "[" * 40 + "]" * 40 + "}]}",
        "nests deeper than 32 levels",
    ),
    ('{"actions": [{"type": "wait"}], "thought": "' + "x" * MAX_RESPONSE_CHARS + '"}', "too long"),
]


@pytest.mark.parametrize(("text", "needle"), JSON_MALFORMED, ids=[m[1] for m in JSON_MALFORMED])
def test_json_malformed(text, needle):
    with pytest.raises(ActionParseError) as info:
        parse_json_response(text, screen=HD)
    assert needle in info.value.reason


@pytest.mark.parametrize("depth", [33, 200, 900, 990, 5000])
@pytest.mark.parametrize("field", ["type", "content", "x", "seconds", "keys", "arguments"])
def test_deeply_nested_json_is_refused_cleanly(depth, field):
    nested = "[" * depth + "]" * depth
    text = '{"actions": [{"type": "type", "content": "a", "' + field + '": ' + nested + "}]}"
    with pytest.raises(ActionParseError) as info:
        parse_json_response(text, screen=HD)
    assert "deeper than 32" in info.value.reason or "not valid JSON" in info.value.reason


def test_an_edited_action_may_leave_out_action_and_keep_a_thought() -> None:
    from agent_core.actions.grammar import parse_edited_action

    bare = parse_edited_action(" click(start_box='(640,360)') ", screen=(1280, 720))
    assert bare.actions == (A.Click(640, 360),)  # absolute screen pixels
    full = parse_edited_action("Thought: the OK button\nAction: click(start_box='(5,6)')", screen=(1280, 720))
    assert full.thought == "the OK button" and full.actions == (A.Click(5, 6),)
    with pytest.raises(ActionParseError):
        parse_edited_action("clik(start_box='(5,6)')", screen=(1280, 720))
