"""Oracles of the MiniWoB++ suite: widgets that open, expand or animate, tables, lists and forms.

The helpers and conventions are those of `miniwob_oracles` (screen-coordinate actions from the
privileged DOM; a `wait` where the page has to animate, since page time is paused otherwise).
"""

from __future__ import annotations

import re
from html.parser import HTMLParser

from agent_core import actions as A
from agent_core.suites.miniwob_oracles import (
    PREFIX,
    SETTLE_S,
    Actions,
    Element,
    OracleFailed,
    animates,
    click,
    elements,
    episode_done,
    match,
    one,
    pick,
    quoted,
    submit,
    type_into,
    utterance,
)
from agent_core.tasks.oracles import OracleContext, register_oracle, said


def _row_of(e: Element, candidates: list[Element], *, tolerance: float = 12.0) -> list[Element]:
    """The candidates on the same row as `e` (their centres within `tolerance` pixels vertically)."""
    return [c for c in candidates if abs(float(c["cy"]) - float(e["cy"])) <= tolerance]


# --- lists and selects ------------------------------------------------------------------------------


@register_oracle(PREFIX + "choose-list")
def choose_list(ctx: OracleContext) -> Actions:
    target = match(r"Select (.*) from the list", ctx).group(1)
    the_list = one(elements(ctx, "#area select"), "list")
    yield said(ctx, "The options are in a drop-down list; I click it to open it.", click(the_list))
    # The list is open: typing the option's text moves to it, Enter picks it.
    yield said(ctx, f'The list is open; typing "{target}" jumps to that option.', A.Type(content=target))
    yield said(ctx, f'"{target}" is highlighted; I press Enter to choose it.', A.Press(key="enter"))
    yield submit(ctx, done=f'"{target}" is chosen')


# --- things that expand -----------------------------------------------------------------------------


def _settle(ctx: OracleContext, what: str) -> A.Wait:
    return said(ctx, f"{what} is still animating; I wait for it to finish.", A.Wait(seconds=SETTLE_S))


@register_oracle(PREFIX + "click-collapsible", PREFIX + "click-collapsible-nodelay")
def click_collapsible(ctx: OracleContext) -> Actions:
    header = one(elements(ctx, "#area h3"), "section header")
    yield said(ctx, "The section is collapsed; I click its header to expand it.", click(header))
    if animates(ctx):
        yield _settle(ctx, "The section")  # the accordion animates open
    yield submit(ctx, done="The section is open")


@register_oracle(PREFIX + "click-collapsible-2", PREFIX + "click-collapsible-2-nodelay")
def click_collapsible_2(ctx: OracleContext) -> Actions:
    target = quoted(ctx)
    headers = len(pick(elements(ctx, "#area h3"), tag="h3"))
    for i in range(headers):
        links = pick(elements(ctx, "#area span"), cls="alink", text=target)
        if links:
            yield said(ctx, f'The open section shows the link "{target}"; I click it.', click(links[0]))
            return
        header = pick(elements(ctx, "#area h3"), tag="h3")[i]
        name = str(header.get("text", "")).strip()
        yield said(
            ctx,
            f'No open section shows "{target}" yet; I expand the section "{name}" to look in it.',
            click(header),
        )
        if animates(ctx):
            yield _settle(ctx, f'The section "{name}"')
    links = pick(elements(ctx, "#area span"), cls="alink", text=target)
    if not links:
        raise OracleFailed(f"no section holds the link {target!r}")
    yield said(ctx, f'The section I opened shows the link "{target}"; I click it.', click(links[0]))


@register_oracle(
    PREFIX + "click-tab-2",
    PREFIX + "click-tab-2-easy",
    PREFIX + "click-tab-2-medium",
    PREFIX + "click-tab-2-hard",
)
def click_tab_2(ctx: OracleContext) -> Actions:
    target = quoted(ctx)
    tabs = len(pick(elements(ctx, "#area a"), cls="ui-tabs-anchor"))
    for i in range(1, tabs + 1):  # the first tab is open at the start
        links = pick(elements(ctx, "#area .ui-tabs-panel span"), cls="alink", text=target)
        if links:
            yield said(ctx, f'This tab shows the link "{target}"; I click it.', click(links[0]))
            return
        if i < tabs:
            tab = pick(elements(ctx, "#area a"), cls="ui-tabs-anchor")[i]
            name = str(tab.get("text", "")).strip()
            yield said(ctx, f'The open tab has no link "{target}"; I switch to the tab "{name}".', click(tab))
            if episode_done(ctx):  # click-tab-2-medium: switching tabs is the answer when tab 1 lacks it
                return
    raise OracleFailed(f"no tab holds the link {target!r}")


@register_oracle(PREFIX + "navigate-tree")
def navigate_tree(ctx: OracleContext) -> Actions:
    target = quoted(ctx)
    for _ in range(10):
        els = elements(ctx, "#tree *")
        named = pick(els, tag="span", text=target)
        if named:
            yield said(ctx, f'The tree shows "{target}"; I click it.', click(named[0]))
            return
        closed = pick(els, tag="div", cls="expandable-hitarea")
        if not closed:
            raise OracleFailed(f"no folder left to open and no {target!r}")
        yield said(
            ctx,
            f'"{target}" is not visible yet; I open the first closed folder by clicking its arrow.',
            click(closed[0]),
        )  # the tree toggles without animation
    raise OracleFailed(f"{target!r} not found in the tree")


@register_oracle(PREFIX + "use-autocomplete", PREFIX + "use-autocomplete-nodelay")
def use_autocomplete(ctx: OracleContext) -> Actions:
    m = match(r'starts with "(.*?)"(?: and ends with "(.*?)")?', ctx)
    start, end = m.group(1), m.group(2) or ""
    field = one(elements(ctx, "#area input"), "tags field", id="tags")
    why = "Typing its start makes the field suggest words."
    yield from type_into(ctx, field, start, why=why)
    # Autocomplete looks the prefix up on a timer (0 ms in -nodelay): page time must run for it.
    yield said(ctx, "I wait a moment for the suggestions to appear.", A.Wait(seconds=SETTLE_S))
    items = [
        e
        for e in elements(ctx, ".ui-autocomplete *")
        if e.get("text") and str(e["text"]).startswith(start) and str(e["text"]).endswith(end)
    ]
    if not items:
        raise OracleFailed(f"no suggestion starts with {start!r} and ends with {end!r}")
    word = str(items[0].get("text", "")).strip()
    ends = f' and ends with "{end}"' if end else ""
    yield said(ctx, f'The suggestion "{word}" starts with "{start}"{ends}; I click it.', click(items[0]))
    yield submit(ctx, done=f'The field holds "{word}"')


@register_oracle(PREFIX + "use-spinner")
def use_spinner(ctx: OracleContext) -> Actions:
    n = int(match(r"Select (-?\d+) with the spinner", ctx).group(1))
    arrow = "ui-spinner-up" if n > 0 else "ui-spinner-down"
    way = "up" if n > 0 else "down"
    for i in range(abs(n)):
        button = one(elements(ctx, "#area a"), "spinner arrow", cls=arrow)
        left = abs(n) - i
        yield said(
            ctx,
            f"The spinner shows {n - left if n > 0 else n + left}; {left} more {way} to reach {n}.",
            click(button),
        )
    yield submit(ctx, done=f"The spinner shows {n}")


# --- reading the page -------------------------------------------------------------------------------


@register_oracle(PREFIX + "read-table")
def read_table(ctx: OracleContext) -> Actions:
    label = match(r"Enter the value of (.*) into the text field", ctx).group(1)
    cells = elements(ctx, "#area td")
    key = one(cells, "table row", text=label)
    value = [c for c in _row_of(key, cells, tolerance=3) if c is not key]
    if not value:
        raise OracleFailed(f"no value beside {label!r}")
    text = str(value[0].get("text", ""))
    why = f'In the table, the row "{label}" holds "{text}".'
    yield from type_into(ctx, one(elements(ctx, "#area input"), "text field", id="tt"), text, why=why)
    yield submit(ctx, done=f'The field holds "{text}"')


@register_oracle(PREFIX + "find-word")
def find_word(ctx: OracleContext) -> Actions:
    n = int(match(r"Find the (\d+)(?:st|nd|rd|th) word", ctx).group(1))
    words = str(one(elements(ctx, "#area p"), "paragraph", tag="p").get("text", "")).split()
    if n > len(words):
        raise OracleFailed(f"the paragraph has {len(words)} words, not {n}")
    word = re.sub(r"[^a-zA-Z]", "", words[n - 1])
    why = f'Counting the paragraph\'s words, number {n} is "{word}".'
    field = one(elements(ctx, "#area input"), "answer field", id="answer-input")
    yield from type_into(ctx, field, word, "the answer field", why=why)
    yield submit(ctx, done=f'The answer "{word}" is typed in')


@register_oracle(PREFIX + "text-transform")
def text_transform(ctx: OracleContext) -> Actions:
    text = "".join(str(e.get("text", "")) for e in elements(ctx, "#captcha span"))
    why = f'The distorted letters read "{text}".'
    yield from type_into(ctx, one(elements(ctx, "#area input"), "text field", id="tt"), text, why=why)
    yield submit(ctx, done=f'The field holds "{text}"')


@register_oracle(PREFIX + "odd-or-even")
def odd_or_even(ctx: OracleContext) -> Actions:
    numbers = pick(elements(ctx, "#numbers *"), cls="display-number")
    for number in numbers:
        value = int(str(number.get("text", "")).strip())
        kind = "even" if value % 2 == 0 else "odd"
        buttons = _row_of(number, pick(elements(ctx, "#numbers button"), cls=kind), tolerance=10)
        if not buttons:
            raise OracleFailed(f"no {kind} button beside {value}")
        yield said(ctx, f'{value} is {kind}, so I click "{kind}" on its row.', click(buttons[0]))
    yield submit(ctx, done="Every number is marked odd or even")


@register_oracle(PREFIX + "enter-time")
def enter_time(ctx: OracleContext) -> Actions:
    hour, minute, half = match(r"(\d+):(\d\d) ?([AP]M)", ctx).groups()
    field = one(elements(ctx, "#area input"), "time field", type="time")
    # The hour segment is at the field's left edge; typing fills hour, minutes and AM/PM in turn.
    yield said(
        ctx,
        "The time field starts with the hour; I click its left edge to begin there.",
        A.Click(x=round(float(field["left"]) + 10), y=round(float(field["cy"]))),
    )
    typed = f"{int(hour):02d}{minute}{half[0]}"
    yield said(
        ctx,
        f"I type {typed}: hour {int(hour):02d}, minutes {minute}, then {half[0]} for {half}.",
        A.Type(content=typed),
    )
    yield submit(ctx, done=f"The field shows {hour}:{minute} {half}")


class _ColorBoxes(HTMLParser):
    """The background colours of the page's `.color` elements, in document order."""

    def __init__(self) -> None:
        super().__init__()
        self.colors: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if "color" in str(a.get("class") or "").split():
            m = re.search(r"background-color:\s*([^;]+)", str(a.get("style") or ""))
            self.colors.append(m.group(1).strip() if m else "")


@register_oracle(PREFIX + "click-color")
def click_color(ctx: OracleContext) -> Actions:
    page = ctx.env.call("dom", selector="#wrap .color", max_elements=50, html=True)
    boxes = [dict(e) for e in page.get("elements", [])]
    parser = _ColorBoxes()
    parser.feed(str(page.get("html", "")))
    colors = parser.colors
    if len(colors) != len(boxes):
        raise OracleFailed(f"{len(boxes)} colour boxes but {len(colors)} colours in the page source")
    named = re.search(r"Click on the (\w+) colored box", utterance(ctx))
    swatch = [c for b, c in zip(boxes, colors, strict=True) if b.get("id") == "query-color"]
    if named:
        target = named.group(1)
    elif swatch:  # the colour is shown as a swatch in the query
        target = swatch[0]
    else:
        raise OracleFailed("neither a colour name nor a swatch in the query")
    for box, color in zip(boxes, colors, strict=True):
        if color == target and box.get("id") != "query-color":
            seen = f"the colour {target}" if named else f"the swatch's colour, {target}"
            yield said(ctx, f"This box has {seen}; I click it.", click(box))
            return
    raise OracleFailed(f"no box coloured {target!r}")
