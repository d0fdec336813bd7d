"""The UI-TARS grammar: golden responses and malformed inputs (formatting and round trips:
test_grammar_format.py)."""

from __future__ import annotations

import pytest

from agent_core import actions as A
from agent_core.actions.grammar import (
    SCROLL_AMOUNT,
    WAIT_SECONDS,
    ActionParseError,
    parse_response,
    platform_actions,
)
from tests.agent_core.screens import BIG, FHD, HD, PHONE, UHD

# (screen, text, expected actions). Smart-resize model sizes: 1280x720 -> 1288x728, 1920x1080 ->
# 1932x1092, 3840x2160 -> 3836x2156, 5120x2880 -> 4760x2688, 1080x2400 -> 1092x2408; each expected
# pixel is round(v * W / W') clamped to W - 1, worked out by hand.
GOLDEN: list[tuple[tuple[int, int], str, list[A.Action]]] = [
    (HD, "Thought: I need to open the browser.\nAction: click(start_box='(644,364)')", [A.Click(640, 360)]),
    (
        HD,
        "Thought: Click the search box.\nAction: click(start_box='<|box_start|>(100,200)<|box_end|>')",
        [A.Click(99, 198)],
    ),
    (HD, "Thought: centre of a box\nAction: click(start_box='(100,200,300,400)')", [A.Click(199, 297)]),
    (
        HD,
        "Thought: bottom right corner\nAction: click(point='<point>1288 728</point>')",
        [A.Click(1279, 719)],
    ),
    (HD, "Thought: top left\nAction: left_double(point='<point>0 0</point>')", [A.LeftDouble(0, 0)]),
    (HD, "Thought: x\nAction: right_single(start_box='[400, 300, 420, 320]')", [A.RightSingle(407, 307)]),
    (HD, "Thought: x\nAction: hover(start_box='(720, 450)')", [A.Hover(716, 445)]),
    (HD, "Thought: x\nAction: drag(start_box='(10,20)', end_box='(500,600)')", [A.Drag(10, 20, 497, 593)]),
    (
        HD,
        "Thought: x\nAction: drag(start_point='<point>10 20</point>', end_point='<point>500 600</point>')",
        [A.Drag(10, 20, 497, 593)],
    ),
    (HD, "Thought: copy\nAction: hotkey(key='ctrl c')", [A.Hotkey(("ctrl", "c"))]),
    (HD, "Thought: reopen tab\nAction: hotkey(key='ctrl+shift+t')", [A.Hotkey(("ctrl", "shift", "t"))]),
    (HD, "Thought: zoom in\nAction: hotkey(key='ctrl++')", [A.Hotkey(("ctrl", "+"))]),
    (HD, "Thought: zoom in\nAction: hotkey(key='ctrl +')", [A.Hotkey(("ctrl", "+"))]),
    (HD, "Thought: submit\nAction: press(key='enter')", [A.Press("enter")]),
    (
        HD,
        "Thought: hold shift\nAction: keydown(key='shift')\n\n"
        "click(start_box='(644,364)')\n\nkeyup(key='shift')",
        [A.KeyDown("shift"), A.Click(640, 360), A.KeyUp("shift")],
    ),
    (HD, "Thought: search\nAction: type(content='hello world\\n')", [A.Type("hello world\n")]),
    (
        HD,
        "Thought: quotes\nAction: type(content='He said \\\"hi\\\" and it\\'s done')",
        [A.Type('He said "hi" and it\'s done')],
    ),
    (HD, "Thought: a path\nAction: type(content='C:\\\\Users\\\\me')", [A.Type("C:\\Users\\me")]),
    (HD, 'Thought: double quotes\nAction: type(content="it\'s fine")', [A.Type("it's fine")]),
    # An unescaped quote inside the text: it does not end the string, since no ')' or ', key=' follows.
    (HD, "Thought: sloppy\nAction: type(content='it's fine')", [A.Type("it's fine")]),
    (HD, "Thought: x\nAction: type(content='')", [A.Type("")]),
    (HD, "Thought: x\nAction: type(content='tab\\there')", [A.Type("tab\there")]),
    (
        HD,
        "Thought: x\nAction: scroll(start_box='(644,364)', direction='down')",
        [A.Scroll(640, 360, "down", SCROLL_AMOUNT)],
    ),
    (
        HD,
        "Thought: x\nAction: scroll(point='<point>100 200</point>', direction='up', amount='3')",
        [A.Scroll(99, 198, "up", 3)],
    ),
    (HD, "Thought: x\nAction: scroll(direction='left', amount=2)", [A.Scroll(640, 360, "left", 2)]),
    (HD, "Thought: the page is loading\nAction: wait()", [A.Wait(WAIT_SECONDS)]),
    (HD, "Thought: x\nAction: wait(seconds='2.5')", [A.Wait(2.5)]),
    (HD, "Thought: done\nAction: finished(content='The answer is 42.')", [A.Finished("The answer is 42.")]),
    (HD, "Thought: done\nAction: finished()", [A.Finished("")]),
    (
        HD,
        "Thought: There is no such file.\nAction: finished(content='infeasible: the file does not exist')",
        [A.Finished("infeasible: the file does not exist")],
    ),
    (HD, "Thought: I need a password.\nAction: call_user()", [A.CallUser()]),
    (
        HD,
        "Thought: I will search.\nAction: click(start_box='(644,364)')\n\ntype(content='weather\\n')",
        [A.Click(640, 360), A.Type("weather\n")],
    ),
    (
        HD,
        "Thought: two lines\nAction: click(start_box='(644,364)')\nAction: press(key='enter')",
        [A.Click(640, 360), A.Press("enter")],
    ),
    (
        HD,
        "Reflection: The last click missed the button.\nAction_Summary: Click the OK button.\n"
        "Action: click(start_box='(644,364)')",
        [A.Click(640, 360)],
    ),
    (
        HD,
        "Thought: 我需要在搜索框中输入“天气”，然后按回车。\nAction: type(content='天气\\n')",
        [A.Type("天气\n")],
    ),
    (
        HD,
        "Thought: 点击“确定”按钮。\nAction: click(start_box='<|box_start|>(966,546)<|box_end|>')",
        [A.Click(960, 540)],
    ),
    (
        HD,
        "Thought: First I look at the menu.\nThen I pick File.\n\nFinally I click Save.\n"
        "Action: click(start_box='(10, 20)')",
        [A.Click(10, 20)],
    ),
    (HD, "Thought: spaces\nAction:   click( start_box = '( 644 , 364 )' )  ", [A.Click(640, 360)]),
    (HD, "Thought: floats\nAction: click(start_box='(644.0,364.4)')", [A.Click(640, 360)]),
    (HD, "Thought: bbox\nAction: click(start_box='<bbox>100 200 300 400</bbox>')", [A.Click(199, 297)]),
    (HD, "```\nThought: fenced\nAction: click(start_box='(644,364)')\n```", [A.Click(640, 360)]),
    (HD, "Action: click(start_box='(644,364)')", [A.Click(640, 360)]),
    (HD, "Thought: run it\nAction: terminal(command='ls -la /tmp')", [A.Terminal("ls -la /tmp")]),
    (
        HD,
        "Thought: x\nAction: terminal(command='sleep 40 && echo \\'ok\\'', timeout='60')",
        [A.Terminal("sleep 40 && echo 'ok'", 60.0)],
    ),
    (HD, "Thought: x\nAction: file_read(path='/work/notes.txt')", [A.FileRead("/work/notes.txt")]),
    (
        HD,
        "Thought: x\nAction: file_write(path='/work/a.py', content='print(\\'hi\\')\\n')",
        [A.FileWrite("/work/a.py", "print('hi')\n")],
    ),
    (
        HD,
        "Thought: x\nAction: mcp_call(server='fs', tool='read', "
        'arguments=\'{"path": "/tmp/x", "n": 3}\')',
        [A.McpCall("fs", "read", {"path": "/tmp/x", "n": 3})],
    ),
    (HD, "Thought: x\nAction: mcp_call(server='clock', tool='now')", [A.McpCall("clock", "now", {})]),
    # Larger screens: the model space is finer (1920x1080) or slightly / much coarser (4K, 5K).
    (FHD, "Thought: centre\nAction: click(start_box='(966,546)')", [A.Click(960, 540)]),
    (FHD, "Thought: corner\nAction: click(start_box='(1932,1092)')", [A.Click(1919, 1079)]),
    (
        FHD,
        "Thought: x\nAction: drag(start_box='(100,100)', end_box='(1000,1000)')",
        [A.Drag(99, 99, 994, 989)],
    ),
    (UHD, "Thought: centre\nAction: click(start_box='(1918,1078)')", [A.Click(1920, 1080)]),
    (UHD, "Thought: x\nAction: click(point='<point>3000 2000</point>')", [A.Click(3003, 2004)]),
    (
        UHD,
        "Thought: x\nAction: scroll(start_box='(100,100)', direction='down')",
        [A.Scroll(100, 100, "down", 5)],
    ),
    (BIG, "Thought: centre\nAction: click(start_box='(2380,1344)')", [A.Click(2560, 1440)]),
    (BIG, "Thought: x\nAction: left_double(start_box='(1000,1000)')", [A.LeftDouble(1076, 1071)]),
]

MOBILE_GOLDEN: list[tuple[str, list[A.Action]]] = [
    (
        "Thought: open settings\nAction: open_app(app_name='com.android.settings')",
        [A.OpenApp("com.android.settings")],
    ),
    ("Thought: x\nAction: click(start_box='(546,1204)')", [A.Click(540, 1200)]),
    (
        "Thought: x\nAction: long_press(start_box='<|box_start|>(546,1204)<|box_end|>')",
        [A.LongPress(540, 1200)],
    ),
    (
        "Thought: x\nAction: long_press(point='<point>546 1204</point>', time='2')",
        [A.LongPress(540, 1200, 2.0)],
    ),
    ("Thought: x\nAction: press_home()", [A.PressHome()]),
    ("Thought: x\nAction: press_back()", [A.PressBack()]),
    ("Thought: x\nAction: type(content='hello\\n')", [A.Type("hello\n")]),
    (
        "Thought: x\nAction: scroll(start_box='(546,1204)', direction='up')",
        [A.Scroll(540, 1200, "up", SCROLL_AMOUNT)],
    ),
    (
        "Thought: swipe\nAction: drag(start_box='(546,1204)', end_box='(546,100)')",
        [A.Drag(540, 1200, 540, 100)],
    ),
    ("Thought: 完成\nAction: finished(content='完成')", [A.Finished("完成")]),
]


@pytest.mark.parametrize(("screen", "text", "expected"), GOLDEN, ids=[t[1][-48:] for t in GOLDEN])
def test_golden_responses(screen, text, expected):
    parsed = parse_response(text, screen=screen, coords="smart_resize", platform="desktop")
    assert list(parsed.actions) == expected
    assert len(parsed.action_texts) == len(parsed.actions)
    for action_text in parsed.action_texts:
        assert action_text in text


@pytest.mark.parametrize(("text", "expected"), MOBILE_GOLDEN, ids=[t[0][-40:] for t in MOBILE_GOLDEN])
def test_golden_mobile_responses(text, expected):
    assert list(parse_response(text, screen=PHONE, platform="mobile").actions) == expected


@pytest.mark.parametrize(
    ("coords", "text", "expected"),
    [
        ("relative", "Thought: x\nAction: click(start_box='(500,500)')", A.Click(960, 540)),
        ("relative", "Thought: x\nAction: click(start_box='(123,456)')", A.Click(236, 492)),
        ("relative", "Thought: x\nAction: click(start_box='[0, 0, 1000, 1000]')", A.Click(960, 540)),
        ("relative", "Thought: x\nAction: click(start_box='(1000,1000)')", A.Click(1919, 1079)),
        ("absolute", "Thought: x\nAction: click(start_box='(300,400)')", A.Click(300, 400)),
        ("absolute", "Thought: x\nAction: click(point='<point>1919 1079</point>')", A.Click(1919, 1079)),
    ],
)
def test_other_coordinate_spaces(coords, text, expected):
    assert parse_response(text, screen=FHD, coords=coords).actions == (expected,)


def test_sections_are_kept():
    parsed = parse_response(
        "Reflection: The dialog did not open.\nIt needs a double click.\n"
        "Action_Summary: Double-click the icon.\nThought: The icon is at the top left.\n"
        "Action: left_double(start_box='(10,20)')",
        screen=HD,
    )
    assert parsed.reflection == "The dialog did not open.\nIt needs a double click."
    assert parsed.action_summary == "Double-click the icon."
    assert parsed.thought == "The icon is at the top left."
    assert parsed.action_texts == ("left_double(start_box='(10,20)')",)


def test_chinese_multiline_thought_is_kept_verbatim():
    thought = "我看到了桌面。\n\n下一步：打开“文件”菜单，然后点击“保存”。"
    parsed = parse_response(f"Thought: {thought}\nAction: wait()", screen=HD)
    assert parsed.thought == thought


def test_text_without_thought_header_is_the_thought():
    assert parse_response("I will wait.\nAction: wait()", screen=HD).thought == "I will wait."


def test_inline_action_marker_is_found_when_no_line_starts_with_it():
    parsed = parse_response("Thought: waiting is best. Action: wait()", screen=HD)
    assert parsed.actions == (A.Wait(WAIT_SECONDS),) and parsed.thought == "waiting is best."


def test_action_texts_are_as_written():
    text = "Thought: x\nAction: click(start_box='<|box_start|>(1,2)<|box_end|>')\n\n  hotkey(key='ctrl+c')"
    assert parse_response(text, screen=HD).action_texts == (
        "click(start_box='<|box_start|>(1,2)<|box_end|>')",
        "hotkey(key='ctrl+c')",
    )


# --- malformed input ---------------------------------------------------------------------------

MALFORMED: list[tuple[str, str]] = [
    ("", "no 'Action:'"),
    ("Thought: I am thinking but never act.", "no 'Action:'"),
    ("Thought: x\nAction:", "followed by no action"),
    ("Thought: x\nAction:   \n\n", "followed by no action"),
    ("Thought: x\nAction: clack(start_box='(1,2)')", "unknown action 'clack'"),
    ("Thought: x\nAction: click(start_box='(1,2)'", "never closed"),
    ("Thought: x\nAction: click(start_box='(1,2)')\n\ntype(content='abc)", "unterminated string"),
    ('Thought: x\nAction: type(content="abc)', "unterminated string"),
    ("Thought: x\nAction: click", "expected '('"),
    ("Thought: x\nAction: click()", "needs a point"),
    ("Thought: x\nAction: drag(start_box='(1,2)')", "needs a point: end_box= or end_point="),
    ("Thought: x\nAction: type()", "needs content="),
    ("Thought: x\nAction: hotkey()", "needs key="),
    ("Thought: x\nAction: scroll(start_box='(1,2)')", "needs direction="),
    ("Thought: x\nAction: scroll(start_box='(1,2)', direction='sideways')", "direction must be one of"),
    ("Thought: x\nAction: scroll(start_box='(1,2)', direction='up', amount='0')", "amount must be >= 1"),
    ("Thought: x\nAction: scroll(start_box='(1,2)', direction='up', amount='2.5')", "whole number"),
    ("Thought: x\nAction: click(start_box='(a,2)')", "coordinate 'a' in start_box must be a number"),
    ("Thought: x\nAction: click(start_box='(1,)')", "coordinate '' in start_box must be a number"),
    ("Thought: x\nAction: click(start_box='(1,2,3)')", "needs 2 numbers (x,y) or 4"),
    ("Thought: x\nAction: click(start_box='(1)')", "needs 2 numbers"),
    ("Thought: x\nAction: click(start_box='()')", "holds no coordinates"),
    ("Thought: x\nAction: click(start_box='((1,2))')", "must be a number"),
    ("Thought: x\nAction: click(start_box='(1,2]')", "unbalanced brackets"),
    ("Thought: x\nAction: click(start_box='(-5,2)')", "outside [0, 1288]"),
    (
        "Thought: x\nAction: click(start_box='(1289,2)')",
        "x=1289 is outside [0, 1288] of the smart_resize space",
    ),
    ("Thought: x\nAction: click(start_box='(5,729)')", "y=729 is outside [0, 728]"),
    ("Thought: x\nAction: click(start_box='(1e999,2)')", "too large"),
    ("Thought: x\nAction: click(start_box='(" + "9" * 5000 + ",2)')", "must be a number"),
    ("Thought: x\nAction: click(start_box='(1,2)', point='<point>1 2</point>')", "give only one"),
    ("Thought: x\nAction: click(start_box='(1,2)', start_box='(3,4)')", "given twice"),
    ("Thought: x\nAction: click(target='(1,2)')", "unknown argument 'target' for click()"),
    ("Thought: x\nAction: wait(time='1')", "unknown argument 'time' for wait()"),
    ("Thought: x\nAction: call_user(reason='help')", "valid: none"),
    ("Thought: x\nAction: click('(1,2)')", "positional argument"),
    ("Thought: x\nAction: click(start_box='(1,2)') and then more", "expected '('"),
    # A missing comma: the quote after (1,2) cannot close the string, so the value swallows the rest.
    (
        "Thought: x\nAction: click(start_box='(1,2)' point='<point>1 2</point>')",
        "unbalanced brackets in start_box",
    ),
    ("Thought: x\nAction: click(start_box=(1,2) point='<point>1 2</point>')", "expected ',' or ')'"),
    ("Thought: x\nAction: click(start_box=)", "expected a value"),
    ("Thought: x\nAction: wait(seconds='61')", "wait.seconds must be a number in [0, 60]"),
    ("Thought: x\nAction: wait(seconds='-1')", "seconds must be >= 0"),
    ("Thought: x\nAction: wait(seconds='soon')", "seconds must be a number"),
    ("Thought: x\nAction: press(key='ctrl c')", "one key name"),
    ("Thought: x\nAction: press(key='')", "one key name"),
    ("Thought: x\nAction: hotkey(key='+c')", "key names"),
    ("Thought: x\nAction: hotkey(key='   ')", "key names"),
    ("Thought: x\nAction: mcp_call(server='a', tool='b', arguments='{not json}')", "must be a JSON object"),
    ("Thought: x\nAction: mcp_call(server='a', tool='b', arguments='[1, 2]')", "got list"),
    ("Thought: x\nAction: mcp_call(server='a', tool='b', arguments='" + "[" * 3000 + "')", "JSON object"),
    (
        "Thought: x\nAction: mcp_call(server='a', tool='b', arguments='{\"a\": "
        + "[" * 40
        + "]" * 40
        + "}')",
        "arguments nest deeper than 32 levels",
    ),
    ("Thought: x\nAction: terminal(command='   ')", "non-empty command="),
    ("Thought: x\nAction: press_home()", "not available on desktop"),
    ("Thought: x\nAction: long_press(start_box='(1,2)')", "only on mobile"),
    ("Thought: a\nThought: b\nAction: wait()", "appears twice"),
    ("Thought: x\nAction: " + "wait() " * 4000, "response too long"),
]


@pytest.mark.parametrize(("text", "needle"), MALFORMED, ids=[m[1] + "|" + m[0][-30:] for m in MALFORMED])
def test_malformed_input_names_the_problem(text, needle):
    with pytest.raises(ActionParseError) as info:
        parse_response(text, screen=HD)
    assert info.value.reason
    assert needle in info.value.reason
    assert needle in str(info.value)


def test_errors_say_where():
    with pytest.raises(ActionParseError) as info:
        parse_response("Thought: x\nAction: click(start_box='(1,2)')\n\nclick(start_box='(x,2)')", screen=HD)
    assert "line 4, column 1" in str(info.value)
    assert info.value.position is not None


@pytest.mark.parametrize(
    ("platform", "text", "needle"),
    [
        ("mobile", "Action: hotkey(key='ctrl c')", "hotkey() is not available on mobile"),
        ("mobile", "Action: right_single(start_box='(1,2)')", "not available on mobile"),
        ("mobile", "Action: keydown(key='shift')", "not available on mobile"),
        ("browser", "Action: open_app(app_name='x')", "open_app() is not available on browser"),
        ("desktop", "Action: press_back()", "not available on desktop"),
    ],
)
def test_platform_mismatch(platform, text, needle):
    with pytest.raises(ActionParseError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        parse_response(text, screen=PHONE, platform=platform)


def test_bad_options_are_programmer_errors_not_parse_errors():
    with pytest.raises(ValueError, match="valid: desktop, browser, mobile") as info:
        parse_response("Action: wait()", screen=HD, platform="watch")
    assert not isinstance(info.value, ActionParseError)
    with pytest.raises(ValueError, match="valid: smart_resize, relative, absolute"):
        parse_response("Action: wait()", screen=HD, coords="normalized")
    with pytest.raises(ValueError):
        parse_response("Action: wait()", screen=(0, 720))


def test_non_text_input_is_a_parse_error():
    with pytest.raises(ActionParseError, match="must be text"):
        parse_response(None, screen=HD)  # type: ignore[arg-type]


def test_platform_actions():
    assert "hotkey" in platform_actions("desktop") and "hotkey" not in platform_actions("mobile")
    assert "open_app" in platform_actions("mobile") and "open_app" not in platform_actions("browser")
    assert set(platform_actions("desktop")) | set(platform_actions("mobile")) == set(A.ACTION_TYPES)
