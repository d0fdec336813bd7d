"""The XML function calls of newer UI-TARS / Seed models (the `xml_calls` format) as actions."""

from __future__ import annotations

import pytest

from agent_core import actions as A
from agent_core.actions.compat import parse_output
from agent_core.actions.grammar import SCROLL_AMOUNT, WAIT_SECONDS, ActionParseError, parse_response
from agent_core.actions.xml_calls import parse_xml_calls
from tests.agent_core.screens import FHD

# Two screen points, C (960, 540) and Q (480, 270), in each coordinate space of a 1920x1080 screen
# (smart-resized to 1932x1092: 966 * 1920 / 1932 = 960, 483 * 1920 / 1932 = 480, worked by hand).
POINTS = {
    "smart_resize": {"C": "966 546", "Q": "483 273"},
    "relative": {"C": "500 500", "Q": "250 250"},
    "absolute": {"C": "960 540", "Q": "480 270"},
}
C, Q = (960, 540), (480, 270)

# (function name, parameters with "C" / "Q" standing for points, expected actions); mobile ones last.
DESKTOP: list[tuple[str, dict[str, str], list[A.Action]]] = [
    ("click", {"point": "C"}, [A.Click(*C)]),
    ("left_double", {"point": "Q"}, [A.LeftDouble(*Q)]),
    ("right_single", {"point": "C"}, [A.RightSingle(*C)]),
    ("hover", {"point": "Q"}, [A.Hover(*Q)]),
    ("drag", {"start_point": "Q", "end_point": "C"}, [A.Drag(*Q, *C)]),
    ("scroll", {"point": "Q", "direction": "down"}, [A.Scroll(*Q, "down", SCROLL_AMOUNT)]),
    ("scroll", {"direction": "left", "amount": "3"}, [A.Scroll(*C, "left", 3)]),
    ("hotkey", {"key": "ctrl c"}, [A.Hotkey(("ctrl", "c"))]),
    ("press", {"key": "enter"}, [A.Press("enter")]),
    ("keydown", {"key": "shift"}, [A.KeyDown("shift")]),
    ("keyup", {"key": "shift"}, [A.KeyUp("shift")]),
    ("type", {"content": 'It\'s "quoted" C:\\new'}, [A.Type('It\'s "quoted" C:\\new')]),
    ("wait", {}, [A.Wait(WAIT_SECONDS)]),
    ("wait", {"seconds": "2"}, [A.Wait(2)]),
    ("finished", {}, [A.Finished("")]),
    ("finished", {"content": "infeasible: no such file"}, [A.Finished("infeasible: no such file")]),
    ("call_user", {}, [A.CallUser()]),
]
MOBILE: list[tuple[str, dict[str, str], list[A.Action]]] = [
    ("click", {"point": "C"}, [A.Click(*C)]),
    ("long_press", {"point": "Q"}, [A.LongPress(*Q)]),
    ("drag", {"start_point": "C", "end_point": "Q"}, [A.Drag(*C, *Q)]),
    ("scroll", {"point": "C", "direction": "up"}, [A.Scroll(*C, "up", SCROLL_AMOUNT)]),
    ("type", {"content": "天气"}, [A.Type("天气")]),
    ("open_app", {"app_name": "com.android.settings"}, [A.OpenApp("com.android.settings")]),
    ("press_home", {}, [A.PressHome()]),
    ("press_back", {}, [A.PressBack()]),
    ("finished", {"content": "done"}, [A.Finished("done")]),
]


def _value(v: str, coords: str) -> str:
    return f"<point>{POINTS[coords][v]}</point>" if v in ("C", "Q") else v


def _xml(name: str, params: dict[str, str], coords: str) -> str:
    inner = "".join(f"<parameter={k}>{_value(v, coords)}</parameter>" for k, v in params.items())
    return f"<seed:tool_call>\n<function={name}>{inner}</function>\n</seed:tool_call>"


def _text(name: str, params: dict[str, str], coords: str) -> str:
    args = ", ".join(f"{k}='{_value(v, coords)}'" for k, v in params.items())
    return f"Action: {name}({args})"


def _check(name, params, expected, coords, platform):
    xml = parse_output(
        _xml(name, params, coords), fmt="xml_calls", screen=FHD, coords=coords, platform=platform
    )
    assert list(xml.actions) == expected
    # The same call in the UI-TARS text form gives the same actions: one mapping, not two.
    text = _text(name, params, coords).replace("\\", "\\\\")
    assert parse_response(text, screen=FHD, coords=coords, platform=platform).actions == xml.actions


@pytest.mark.parametrize("coords", list(POINTS))
@pytest.mark.parametrize(("name", "params", "expected"), DESKTOP, ids=[f"{d[0]}{len(d[1])}" for d in DESKTOP])
def test_desktop_functions(name, params, expected, coords):
    _check(name, params, expected, coords, "desktop")


@pytest.mark.parametrize("coords", list(POINTS))
@pytest.mark.parametrize(("name", "params", "expected"), MOBILE, ids=[m[0] for m in MOBILE])
def test_mobile_functions(name, params, expected, coords):
    _check(name, params, expected, coords, "mobile")


SEED = (
    "<think>The search box is at the top; type the query and submit.</think>\n"
    "<seed:tool_call>\n<function=click>\n<parameter=point><point>500 100</point></parameter>\n</function>\n"
    "<function=type>\n<parameter=content>UI-TARS\n</parameter>\n</function>\n</seed:tool_call>"
)


def test_a_seed_response_with_thought_and_two_calls():
    parsed = parse_xml_calls(SEED, screen=FHD, coords="relative")
    assert parsed.actions == (A.Click(960, 108), A.Type("UI-TARS\n"))
    assert parsed.thought == "The search box is at the top; type the query and submit."
    assert parsed.action_texts == (
        "<function=click>\n<parameter=point><point>500 100</point></parameter>\n</function>",
        "<function=type>\n<parameter=content>UI-TARS\n</parameter>\n</function>",
    )


FORMS = [
    (
        "named, Doubao style",
        '<function name="click"><parameter name="point" string="true"><point>960 540'
        "</point></parameter></function>",
        A.Click(960, 540),
    ),
    (
        "single quotes",
        "<function name='click'><parameter name='point'>960 540</parameter></function>",
        A.Click(960, 540),
    ),
    (
        "tool_call wrapper, block layout",
        "<tool_call>\n<function=click>\n<parameter=point>\n960 540\n</parameter>\n</function>\n</tool_call>",
        A.Click(960, 540),
    ),
    (
        "bare, bracket point",
        "<function=click><parameter=point>(960,540)</parameter></function>",
        A.Click(960, 540),
    ),
    (
        "a box's centre",
        "<function=click><parameter=point>[950, 530, 970, 550]</parameter></function>",
        A.Click(960, 540),
    ),
    (
        "missing </parameter>",
        "<function=scroll><parameter=point><point>960 540</point><parameter=direction>down</function>",
        A.Scroll(960, 540, "down", SCROLL_AMOUNT),
    ),
    (
        "block value keeps inner newline",
        "<function=type><parameter=content>\nhi\n\n</parameter></function>",
        A.Type("hi\n"),
    ),
    (
        "inline value is literal",
        "<function=type><parameter=content>a\\nb &amp; c</parameter></function>",
        A.Type("a\\nb &amp; c"),
    ),
]


@pytest.mark.parametrize(("text", "expected"), [f[1:] for f in FORMS], ids=[f[0] for f in FORMS])
def test_the_forms_models_use(text, expected):
    assert parse_xml_calls(text, screen=FHD, coords="absolute").actions == (expected,)


def test_prose_sections():
    text = (
        "Thought: open the menu\nAction: Click File.\n"
        "<function=click><parameter=point>1 2</parameter></function>"
    )
    parsed = parse_xml_calls(text, screen=FHD, coords="absolute")
    assert (parsed.thought, parsed.action_summary) == ("open the menu", "Click File.")
    seed_think = "<seed:think>hmm</seed:think><function=wait></function>"
    assert parse_xml_calls(seed_think, screen=FHD).thought == "hmm"


MALFORMED = [
    ("I will click the OK button.", "no <function=…> call"),
    ("", "no <function=…> call"),
    ("<function=click><parameter=point>1 2</parameter>", "never closed"),
    ("<function=teleport></function>", "unknown action 'teleport'"),
    ("<function=1click></function>", "is not a name"),
    ("<function=click><parameter=1x>1 2</parameter></function>", "is not a name"),
    ("<function=click><parameter=pt>1 2</parameter></function>", "unknown argument 'pt' for click()"),
    ("<function=click></function>", "needs a point"),
    ("<function=click><parameter=point>one two</parameter></function>", "must be a number"),
    ("<function=click><parameter=point>1 2 3</parameter></function>", "needs 2 numbers"),
    ("<function=click><parameter=point></parameter></function>", "holds no coordinates"),
    ("<function=click><parameter=point>5000 1</parameter></function>", "outside"),
    ("<function=click><parameter=point>-1 1</parameter></function>", "outside"),
    (
        "<function=click><parameter=point>1 2</parameter><parameter=point>3 4</parameter></function>",
        "given twice",
    ),
    ("<function=click>point=1 2</function>", "unexpected 'point=1 2' in click()"),
    ("<function=scroll><parameter=direction>sideways</parameter></function>", "scroll direction must be"),
    ("<function=wait><parameter=seconds>100</parameter></function>", "wait.seconds must be"),
    ("<function=type></function>", "type() needs content="),
    ("<function=hotkey><parameter=key></parameter></function>", "hotkey() needs key names"),
    (
        "<function=type><parameter=content>x</parameter><parameter=point>1 2</parameter></function>",
        "unknown argument 'point' for type()",
    ),
    ("done</parameter>", "stray or malformed tag"),
    ("<function = click></function>", "stray or malformed tag"),
    ("<function=click><parameter=point>1 2</parameter></function></function>", "stray"),
    ("x" * 20_001, "too long"),
    ("<function=" * 1900, "stray or malformed tag"),
    ("<function=click>" + "<parameter=point>1 2" * 500 + "</function>", "given twice"),
]


@pytest.mark.parametrize(("text", "needle"), MALFORMED, ids=[m[1] for m in MALFORMED])
def test_malformed_calls_name_the_problem(text, needle):
    with pytest.raises(ActionParseError) as info:
        parse_output(text, fmt="xml_calls", screen=FHD, coords="absolute")
    assert info.value.reason
    assert needle in info.value.reason


def test_errors_say_where():
    with pytest.raises(ActionParseError, match="line 3, column 1"):
        parse_xml_calls("ok\n<function=wait></function>\n<function=zap></function>", screen=FHD)


@pytest.mark.parametrize(
    ("platform", "text", "needle"),
    [
        ("desktop", "<function=press_home></function>", "press_home() is not available on desktop"),
        (
            "mobile",
            "<function=hotkey><parameter=key>ctrl c</parameter></function>",
            "hotkey() is not available",
        ),
    ],
)
def test_actions_the_platform_lacks_are_refused(platform, text, needle):
    with pytest.raises(ActionParseError) as info:
        parse_xml_calls(text, screen=FHD, coords="absolute", platform=platform)
    assert needle in info.value.reason


def test_bad_options_are_programmer_errors():
    with pytest.raises(ValueError, match="unknown coordinate space"):
        parse_xml_calls("<function=wait></function>", screen=FHD, coords="pixels")
    with pytest.raises(ActionParseError, match="must be text"):
        parse_xml_calls(None, screen=FHD)  # type: ignore[arg-type]
