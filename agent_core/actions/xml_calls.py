"""The XML function calls of newer UI-TARS / Seed models (the `xml_calls` format).

Grammar of a response (at most MAX_RESPONSE_CHARS characters)::

    response  := (prose | wrapper-tag | function)*          with at least one function
    function  := FUNC-OPEN parameter* "</function>"          (whitespace between the parameters)
    FUNC-OPEN := "<function=" NAME ">"  |  "<function name=" QUOTED ">"
    parameter := PARAM-OPEN VALUE "</parameter>"
    PARAM-OPEN:= "<parameter=" NAME ">"  |  "<parameter name=" QUOTED [" string=" QUOTED] ">"
    wrapper-tag := "<tool_call>" | "</tool_call>" | "<seed:tool_call>" | "</seed:tool_call>"

NAME is ``[A-Za-z_][A-Za-z0-9_]*``; QUOTED is such a name in single or double quotes. Both the
``<function=click>`` form (UI-TARS-2, Seed, Qwen3-Coder) and the ``<function name="click">`` form
(Doubao Seed, with its ``string="true"`` attribute) are read. A ``</parameter>`` the model left out
is taken to be just before the next ``<parameter`` or the ``</function>``; a ``</function>`` left
out is an error (the answer was cut off: its last value may be too). VALUE is taken literally —
no escapes, no XML entities — except that a value written on lines of its own (``>\\nVALUE\\n<``)
loses those two newlines; so ``<parameter=content>hi\\n</parameter>`` types "hi" and submits.

The function names and parameters are the UI-TARS text grammar's (`grammar.SIGNATURES`): click,
left_double, right_single, middle_single, hover, drag, scroll, hotkey, press, keydown, keyup, type,
wait, finished, call_user, and on phones long_press, open_app, press_home, press_back. Each function
becomes the call ``name(key='value', …)`` of that grammar and is built by it, so both forms give the
same actions
(``point`` values such as ``<point>x y</point>`` or ``(x,y)`` are in the policy's `coords` space).
The prose around the functions gives the thought (see `prose`); think tags are dropped.
"""

from __future__ import annotations

import re

from agent_core.actions import model as A

# The grammar's own builder, so the XML and text forms can never map a call differently.
from agent_core.actions.grammar import (
    ActionParseError,
    ParsedResponse,
    build_action,
    check_options,
    check_size,
    error_where,
)
from agent_core.actions.lexer import Call, Value
from agent_core.actions.prose import split_prose

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAMED = r"(?:=(?P<eq>[^\s<>]*)|\s+name\s*=\s*(?P<q>[\"'])(?P<named>[^\"'<>]*)(?P=q){extra})\s*>"
_FUNC_OPEN = re.compile(r"<function" + _NAMED.format(extra=""))
_PARAM_OPEN = re.compile(r"<parameter" + _NAMED.format(extra=r"(?:\s+string\s*=\s*([\"'])(?:true|false)\4)?"))
_PARAM_START = re.compile(r"<parameter[\s=]")
_FUNC_CLOSE = "</function>"
_PARAM_CLOSE = "</parameter>"
_WRAPPER = re.compile(r"</?(?:seed:)?tool_call>")
_STRAY = re.compile(r"</?(?:function|parameter)\b")


def _name(m: re.Match[str], what: str, text: str) -> str:
    name = m.group("eq") if m.group("eq") is not None else m.group("named")
    if not _NAME.fullmatch(name):
        raise ActionParseError(
            f"{what} name {name[:40]!r} is not a name", where=error_where(text, m.start()), position=m.start()
        )
    return name


def _value(raw: str) -> str:
    if raw.startswith("\n") and raw.endswith("\n") and len(raw) > 1:
        return raw[1:-1]
    return raw


def _params(text: str, start: int, end: int, function: str) -> tuple[tuple[str, Value], ...]:
    """The parameters of a function whose body is text[start:end]."""
    args: list[tuple[str, Value]] = []
    i = start
    while True:
        while i < end and text[i].isspace():
            i += 1
        if i >= end:
            return tuple(args)
        m = _PARAM_OPEN.match(text, i, end)
        if m is None:
            raise ActionParseError(
                f"unexpected {text[i : min(end, i + 30)]!r} in {function}(); expected <parameter=…>",
                where=error_where(text, i),
                position=i,
            )
        key = _name(m, "parameter", text)
        if any(key == k for k, _ in args):
            raise ActionParseError(
                f"parameter {key!r} given twice in {function}()", where=error_where(text, i), position=i
            )
        close = text.find(_PARAM_CLOSE, m.end(), end)
        following = _PARAM_START.search(text, m.end(), end)
        if close >= 0 and (following is None or close < following.start()):
            stop, i = close, close + len(_PARAM_CLOSE)
        else:  # no </parameter>: the value runs to the next parameter or the end of the function
            stop = following.start() if following is not None else end
            i = stop
        args.append((key, Value(_value(text[m.end() : stop]), True, m.start())))


def _functions(text: str) -> tuple[list[Call], str]:
    """The function calls of a response and the prose around them."""
    calls: list[Call] = []
    prose: list[str] = []
    pos = 0
    while (m := _FUNC_OPEN.search(text, pos)) is not None:
        prose.append(text[pos : m.start()])
        name = _name(m, "function", text)
        close = text.find(_FUNC_CLOSE, m.end())
        if close < 0:
            raise ActionParseError(
                f"<function={name}> is never closed (no {_FUNC_CLOSE}; was the answer cut off?)",
                where=error_where(text, m.start()),
                position=m.start(),
            )
        calls.append(Call(name, _params(text, m.end(), close, name), m.start(), close + len(_FUNC_CLOSE)))
        pos = close + len(_FUNC_CLOSE)
    prose.append(text[pos:])
    rest = _WRAPPER.sub("", "".join(prose))
    stray = _STRAY.search(rest)
    if stray is not None:
        raise ActionParseError(f"a stray or malformed tag near {rest[stray.start() : stray.start() + 40]!r}")
    if not calls:
        raise ActionParseError("no <function=…> call in the response")
    return calls, rest


def parse_xml_calls(
    text: str, *, screen: tuple[int, int], coords: str = "smart_resize", platform: str = "desktop"
) -> ParsedResponse:
    """Parse a response of XML function calls into screen-pixel actions; raises ActionParseError."""
    check_options(screen, coords, platform)
    calls, prose = _functions(check_size(text))
    actions: tuple[A.Action, ...] = tuple(build_action(c, text, screen, coords, platform) for c in calls)
    thought, summary = split_prose(prose)
    return ParsedResponse(
        thought=thought,
        reflection="",
        action_summary=summary,
        actions=actions,
        action_texts=tuple(text[c.start : c.end] for c in calls),
    )
