"""Oracles of the MiniWoB++ suite (the single-page click and typing tasks; more in miniwob_oracles_widgets).

Each oracle reads the page through the privileged `dom` call (visible elements with their screen
centres) and the task's utterance, and answers with screen-coordinate actions only: it never runs
JavaScript on the page. Episodes run on paused virtual time, so where the page animates (accordions,
autocomplete's delay) an oracle waits, which advances page time.

Only oracles verified to reach reward 1 across many seeds in a real browser sandbox are registered
(the slow MiniWoB suite test in tests/ replays them).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from agent_core import actions as A
from agent_core.policies.base import PolicyError
from agent_core.tasks.oracles import OracleContext, register_oracle, said

Element = dict[str, Any]
Actions = Iterator[A.Action]
PREFIX = "miniwob/"
SETTLE_S = 1.0
"""Page time to let an animation finish (jQuery UI's default duration is 400 ms)."""


class OracleFailed(PolicyError):
    """The page does not look the way the oracle expects (an element it needs is missing)."""


# --- reading the page -------------------------------------------------------------------------------


def elements(ctx: OracleContext, selector: str = "#wrap *") -> list[Element]:
    """The visible elements matching `selector`, in document order (privileged `dom` call)."""
    result = ctx.env.call("dom", selector=selector, max_elements=3000)
    return [dict(e) for e in result.get("elements", [])]


def utterance(ctx: OracleContext) -> str:
    """The task's utterance as the episode started it."""
    start = ctx.setup.get("start")
    if isinstance(start, dict) and start.get("utterance"):
        return str(start["utterance"])
    return ctx.instruction


def animates(ctx: OracleContext) -> bool:
    """Whether the task's widgets animate (the -nodelay variants do not): then the oracle waits.

    A page timer of 0 ms still needs page time to run: a -nodelay task that defers work to a timer
    needs a wait all the same (use-autocomplete-nodelay)."""
    start = ctx.setup.get("start")
    return not (isinstance(start, dict) and str(start.get("task", "")).endswith("-nodelay"))


def episode_done(ctx: OracleContext) -> bool:
    """Whether the episode has ended (the page's verdict is in), as of the latest observation."""
    return bool(ctx.observation is not None and ctx.observation.info.get("done"))


def quoted(ctx: OracleContext, index: int = 0) -> str:
    """The `index`-th "quoted" string of the utterance."""
    found = re.findall(r'"(.*?)"', utterance(ctx))
    if len(found) <= index:
        raise OracleFailed(f"no quoted string #{index} in {utterance(ctx)!r}")
    return str(found[index])


def match(pattern: str, ctx: OracleContext) -> re.Match[str]:
    """The utterance matched against `pattern` (OracleFailed if it does not match)."""
    m = re.search(pattern, utterance(ctx))
    if m is None:
        raise OracleFailed(f"{pattern!r} does not match {utterance(ctx)!r}")
    return m


def has_class(e: Element, name: str) -> bool:
    """Whether element `e` has CSS class `name`."""
    return name in str(e.get("class", "")).split()


def pick(
    els: Sequence[Element],
    *,
    tag: str | None = None,
    text: str | None = None,
    cls: str | None = None,
    id: str | None = None,  # noqa: A002 - mirrors the element's field
    type: str | None = None,  # noqa: A002
    where: Callable[[Element], bool] | None = None,
) -> list[Element]:
    """The elements matching every given criterion (text compared after stripping)."""
    out = []
    for e in els:
        if tag is not None and e.get("tag") != tag:
            continue
        if text is not None and str(e.get("text", "")).strip() != text.strip():
            continue
        if cls is not None and not has_class(e, cls):
            continue
        if id is not None and e.get("id") != id:
            continue
        if type is not None and e.get("type") != type:
            continue
        if where is not None and not where(e):
            continue
        out.append(e)
    return out


def one(els: Sequence[Element], what: str = "element", **criteria: Any) -> Element:
    """The first element matching `criteria`; OracleFailed when there is none."""
    found = pick(els, **criteria)
    if not found:
        raise OracleFailed(f"no {what} matching {criteria} on the page")
    return found[0]


def click(e: Element, *, dx: float = 0.0) -> A.Click:
    """A click at the centre of element `e` (shifted right by `dx` pixels)."""
    return A.Click(x=max(0, round(float(e["cx"]) + dx)), y=max(0, round(float(e["cy"]))))


def _inside(x: float, y: float, e: Element) -> bool:
    left, top = float(e["left"]), float(e["top"])
    return left <= x <= left + float(e["width"]) and top <= y <= top + float(e["height"])


def click_uncovered(target: Element, above: Sequence[Element]) -> A.Click:
    """A click on the point of `target` nearest its centre that no element of `above` (drawn over it)
    hides; OracleFailed when they hide all of it."""
    left, top, w, h = (float(target[k]) for k in ("left", "top", "width", "height"))
    points = [(left + w * i / 10, top + h * j / 6) for i in range(1, 10) for j in range(1, 6)]
    points.sort(key=lambda p: (p[0] - left - w / 2) ** 2 + (p[1] - top - h / 2) ** 2)
    for x, y in points:
        if not any(_inside(x, y, e) for e in above):
            return A.Click(x=max(0, round(x)), y=max(0, round(y)))
    raise OracleFailed(f"the element {target.get('text')!r} is hidden under others")


def submit(ctx: OracleContext, label: str = "Submit", *, done: str = "The answer is in place") -> A.Click:
    """A click on the page's button labelled `label` (case-insensitive), saying why (`done`)."""
    els = elements(ctx)
    button = one(els, "button", tag="button", where=lambda e: _lower(e) == label.lower())
    return said(ctx, f'{done}, so I click the "{label}" button to send it.', click(button))


def _lower(e: Element) -> str:
    return str(e.get("text", "")).strip().lower()


def type_into(
    ctx: OracleContext, e: Element, text: str, field: str = "the text field", why: str = ""
) -> Actions:
    """Click a text field, then type `text`, saying so (`why`: the reason for that text)."""
    reason = f"{why} " if why else ""
    yield said(
        ctx, f'{reason}I need "{text}" in {field}, so I first click it to put the cursor there.', click(e)
    )
    yield said(ctx, f'The cursor is in {field}; I type "{text}".', A.Type(content=text))


# --- buttons, links, tabs ---------------------------------------------------------------------------


@register_oracle(PREFIX + "click-button", PREFIX + "unicode-test")
def click_button(ctx: OracleContext) -> Actions:
    target = quoted(ctx)
    button = one(elements(ctx, "#area button"), "button", text=target)
    yield said(ctx, f'The task names the button "{target}"; I see it, so I click it.', click(button))


def click_button_on_top(ctx: OracleContext, text: str) -> A.Click:
    """A click on the button labelled `text` where no later (drawn above) button covers it."""
    buttons = pick(elements(ctx, "#area button"), tag="button")
    target = one(buttons, "button", text=text)
    return click_uncovered(target, buttons[buttons.index(target) + 1 :])


@register_oracle(PREFIX + "click-button-sequence")
def click_button_sequence(ctx: OracleContext) -> Actions:
    # The buttons sit at random places and may overlap: click where the other does not cover.
    first = click_button_on_top(ctx, "ONE")
    yield said(ctx, 'Button "ONE" comes first; I click a part of it no other button covers.', first)
    second = click_button_on_top(ctx, "TWO")
    yield said(ctx, 'I have clicked "ONE"; now I click button "TWO" where nothing covers it.', second)


@register_oracle(PREFIX + "click-test")
def click_test(ctx: OracleContext) -> Actions:
    button = one(elements(ctx, "#area button"), "button", tag="button")
    label = str(button.get("text", "")).strip()
    yield said(ctx, f'The only button on the page reads "{label}", so I click it.', click(button))


@register_oracle(PREFIX + "click-test-2", PREFIX + "click-test-transfer")
def click_test_2(ctx: OracleContext) -> Actions:
    name = match(r"Click button (\w+)", ctx).group(1)
    yield said(
        ctx,
        f'Of the buttons shown, the one labelled "{name}" is the one asked for; I click it.',
        click_button_on_top(ctx, name),
    )


@register_oracle(PREFIX + "click-link")
def click_link(ctx: OracleContext) -> Actions:
    target = quoted(ctx)
    link = one(elements(ctx, "#area span"), "link", cls="alink", text=target)
    yield said(ctx, f'The text has a link "{target}"; I click it.', click(link))


@register_oracle(PREFIX + "click-tab")
def click_tab(ctx: OracleContext) -> Actions:
    n = match(r"Tab #(\d+)", ctx).group(1)
    tab = one(elements(ctx, "#area a"), "tab", text=f"Tab #{n}")
    yield said(ctx, f"The tab strip shows tab #{n}; I click its title.", click(tab))


@register_oracle(PREFIX + "click-dialog")
def click_dialog(ctx: OracleContext) -> Actions:
    close = one(elements(ctx, ".ui-dialog button"), "close button", cls="ui-dialog-titlebar-close")
    yield said(
        ctx,
        'The dialog has a close button, the "x" at the right of its title bar, so I click it.',
        click(close),
    )


@register_oracle(PREFIX + "click-dialog-2")
def click_dialog_2(ctx: OracleContext) -> Actions:
    target = quoted(ctx)
    els = elements(ctx, ".ui-dialog button")
    if target.lower() == "x":
        close = one(els, "close button", cls="ui-dialog-titlebar-close")
        yield said(
            ctx,
            'The "x" is the close button at the top right of the dialog; I click it.',
            click(close),
        )
    else:
        button = one(els, "dialog button", text=target)
        yield said(ctx, f'The dialog has a "{target}" button at its bottom; I click it.', click(button))


@register_oracle(PREFIX + "click-widget")
def click_widget(ctx: OracleContext) -> Actions:
    kind = quoted(ctx)
    tags = {"button": ("button", None), "textarea": ("textarea", None)}
    tag, type_ = tags.get(kind, ("input", "text" if kind == "text" else kind))
    widget = one(elements(ctx, "#area .widget *"), f"{kind} widget", tag=tag, type=type_)
    yield said(
        ctx,
        f"The task wants the {kind} widget; among the widgets it is this {tag}, so I click it.",
        click(widget),
    )


@register_oracle(PREFIX + "identify-shape")
def identify_shape(ctx: OracleContext) -> Actions:
    figure = [e for e in elements(ctx, "#area_svg *") if e.get("tag") != "svg"]
    if not figure:
        raise OracleFailed("no figure in the svg")
    shape = figure[0]
    if shape["tag"] == "text":
        text = str(shape.get("text", "")).strip()
        answer = "Number" if text.isdigit() else "Letter"
        seen = f'the character "{text}", which is a {answer.lower()}'
    else:
        answer = {"circle": "Circle", "rect": "Rectangle", "polygon": "Triangle"}.get(shape["tag"], "")
        seen = f"a {answer.lower()}"
    button = one(elements(ctx, "#area-buttons button"), "answer", text=answer)
    yield said(ctx, f'The figure shows {seen}, so I click the "{answer}" button.', click(button))


@register_oracle(PREFIX + "grid-coordinate")
def grid_coordinate(ctx: OracleContext) -> Actions:
    m = match(r"\((-?\d+),\s*(-?\d+)\)", ctx)
    point = one(elements(ctx, "#area circle"), "grid point", id=f"({m.group(1)},{m.group(2)})")
    yield said(
        ctx,
        f"Counting from the grid's origin, ({m.group(1)},{m.group(2)}) is here; I click it.",
        click(point),
    )


# --- check boxes and options ------------------------------------------------------------------------


@register_oracle(
    PREFIX + "click-checkboxes", PREFIX + "click-checkboxes-large", PREFIX + "click-checkboxes-transfer"
)
def click_checkboxes(ctx: OracleContext) -> Actions:
    m = match(r"Select (.*) and click Submit", ctx)
    targets = [] if m.group(1) == "nothing" else [t.strip() for t in m.group(1).split(",")]
    for target in targets:
        label = one(elements(ctx, "#area label"), "checkbox label", text=target)
        box = click(_box_of(label, elements(ctx, "#area input")))
        yield said(ctx, f'I tick the box beside "{target}".', box)
    done = "I have ticked every box the task names" if targets else "The task wants no box ticked"
    yield submit(ctx, done=done)


def _box_of(label: Element, boxes: Sequence[Element]) -> Element:
    """The input just left of `label` on its row (labels wrap their inputs, the box comes first)."""
    row = [b for b in boxes if abs(float(b["cy"]) - float(label["cy"])) < 8 and b["cx"] < label["cx"]]
    if not row:
        raise OracleFailed(f"no box beside the label {label.get('text')!r}")
    return max(row, key=lambda b: float(b["cx"]))


@register_oracle(PREFIX + "click-option")
def click_option(ctx: OracleContext) -> Actions:
    target = match(r"Select (.*) and click Submit", ctx).group(1)
    label = one(elements(ctx, "#boxes label"), "option label", text=target)
    option = click(_box_of(label, elements(ctx, "#boxes input")))
    yield said(ctx, f'I pick the option "{target}" by clicking the round button beside it.', option)
    yield submit(ctx, done=f'"{target}" is selected')


# --- text fields ------------------------------------------------------------------------------------


@register_oracle(PREFIX + "enter-text", PREFIX + "enter-text-dynamic")
def enter_text(ctx: OracleContext) -> Actions:
    text = quoted(ctx)
    field = one(elements(ctx, "#area input"), "text field")
    yield from type_into(ctx, field, text, why="")
    yield submit(ctx, done=f'The field holds "{text}"')


@register_oracle(PREFIX + "enter-text-2")
def enter_text_2(ctx: OracleContext) -> Actions:
    m = match(r'Type "(.*)" in all (lower|upper) case', ctx)
    text = m.group(1).lower() if m.group(2) == "lower" else m.group(1).upper()
    why = f'The task wants {m.group(2)} case, so "{m.group(1)}" becomes "{text}".'
    yield from type_into(ctx, one(elements(ctx, "#area input"), "text field"), text, why=why)
    yield submit(ctx, done=f'The field holds "{text}"')


@register_oracle(PREFIX + "enter-password")
def enter_password(ctx: OracleContext) -> Actions:
    password = quoted(ctx)
    names = {"password": "the password field", "verify": "the field that verifies the password"}
    for field_id in ("password", "verify"):
        field = one(elements(ctx, "#area input"), field_id, id=field_id)
        yield from type_into(ctx, field, password, names[field_id], why="")
    yield submit(ctx, done="Both fields hold the password")


@register_oracle(PREFIX + "login-user")
def login_user(ctx: OracleContext) -> Actions:
    user, password = quoted(ctx, 0), quoted(ctx, 1)
    field = one(elements(ctx, "#area input"), "username", id="username")
    yield from type_into(ctx, field, user, "the username field", why="")
    field = one(elements(ctx, "#area input"), "password", id="password")
    yield from type_into(
        ctx, field, password, "the password field", why="That is the password the task gives."
    )
    yield submit(ctx, "Login", done="The username and password are filled in")


@register_oracle(PREFIX + "focus-text")
def focus_text(ctx: OracleContext) -> Actions:
    field = one(elements(ctx, "#area input"), "text field")
    yield said(ctx, "The text field must get the focus; clicking it gives it the focus.", click(field))


@register_oracle(PREFIX + "focus-text-2")
def focus_text_2(ctx: OracleContext) -> Actions:
    n = int(match(r"(\d+)(?:st|nd|rd|th)", ctx).group(1))
    field = one(elements(ctx, "#area input"), f"text field {n}", id=f"tt{n}")
    yield said(ctx, f"Counting from the top, field number {n} is this one; I click it.", click(field))


@register_oracle(PREFIX + "enter-date")
def enter_date(ctx: OracleContext) -> Actions:
    month, day, year = match(r"(\d\d)/(\d\d)/(\d{4})", ctx).groups()
    field = one(elements(ctx, "#area input"), "date field", type="date")
    # The month segment is at the field's left edge; typing fills month, day and year in turn.
    yield said(
        ctx,
        "The date field starts with the month; I click its left edge to begin there.",
        A.Click(x=round(float(field["left"]) + 10), y=round(float(field["cy"]))),
    )
    yield said(
        ctx,
        f"I type {month}{day}{year}: month {month}, day {day}, year {year}, each filling its part in turn.",
        A.Type(content=month + day + year),
    )
    yield submit(ctx, done=f"The field shows {month}/{day}/{year}")


@register_oracle(PREFIX + "simple-arithmetic")
def simple_arithmetic(ctx: OracleContext) -> Actions:
    problem = one(elements(ctx, "#area div"), "problem", id="math-problem")
    m = re.fullmatch(r"\s*(-?\d+)\s*([-+x*])\s*(-?\d+)\s*=\s*", str(problem.get("text", "")))
    if m is None:
        raise OracleFailed(f"cannot read the problem {problem.get('text')!r}")
    a, op, b = int(m.group(1)), m.group(2), int(m.group(3))
    answer = a + b if op == "+" else a - b if op == "-" else a * b
    why = f"The problem reads {a} {op} {b}, which is {answer}."
    yield from type_into(
        ctx,
        one(elements(ctx, "#area input"), "answer", id="math-answer"),
        str(answer),
        "the answer field",
        why,
    )
    yield submit(ctx, done=f"The answer {answer} is typed in")


@register_oracle(PREFIX + "simple-algebra")
def simple_algebra(ctx: OracleContext) -> Actions:
    problem = one(elements(ctx, "#area div"), "problem", id="math-problem")
    text = str(problem.get("text", "")).replace(" ", "")
    m = re.fullmatch(r"(-?\d+|x)([-+])(-?\d+|x)=(-?\d+)", text)
    if m is None:
        raise OracleFailed(f"cannot read the equation {problem.get('text')!r}")
    left, op, right, total = m.group(1), m.group(2), m.group(3), int(m.group(4))
    if left == "x":  # x + b = c, x - b = c
        x = total - int(right) if op == "+" else total + int(right)
    else:  # a + x = c, a - x = c
        x = total - int(left) if op == "+" else int(left) - total
    why = f"The equation {left} {op} {right} = {total} gives x = {x}."
    yield from type_into(
        ctx, one(elements(ctx, "#area input"), "answer", id="math-answer"), str(x), "the answer field", why
    )
    yield submit(ctx, done=f"x = {x} is typed in")
