"""Oracles of the Linux desktop suite's browser and hybrid (GUI + shell) tasks, by task id.

The conventions are those of `agent_core.suites.desktop_oracles`: Chromium's pages are driven by
keyboard only (AT-SPI queries now and then crash this Chromium), what a person would read off the
screen comes from the task's parameters, and each oracle ends by waiting for its effect to land.
"""

from __future__ import annotations

import hashlib

from agent_core import actions as A
from agent_core.suites.desktop_gui import (
    Actions,
    OracleFailed,
    browser_page,
    click_heading,
    editor,
    focus,
    open_url,
    param,
    save_editor,
    shell,
    wait_file,
    wait_window,
)
from agent_core.tasks.oracles import OracleContext, register_oracle, said

CATALOG = ["Bookshelf", "Desk Lamp", "Floor Rug", "Office Chair", "Standing Desk", "Wall Clock"]
"""The shop's catalog page lists these links, in this order (desktop/browser-add-to-cart.yaml)."""
THEMES = ["Light", "Dark", "Sepia", "High contrast"]
REPORTS = ["agenda", "inventory", "quarterly", "roster"]


# --- browser ---------------------------------------------------------------------------------------


@register_oracle("desktop/browser/fill-form")
def fill_form(ctx: OracleContext) -> Actions:
    name, qty = param(ctx, "name"), param(ctx, "qty")
    yield click_heading(
        ctx,
        browser_page(ctx, "Order form"),
        f"The order form needs {name}, quantity {qty} and express delivery.",
    )
    # Tab order: name, quantity, express delivery, submit.
    yield said(
        ctx,
        f"Tab goes to the name field, where I type {name}; Tab again to the quantity, {qty}; Tab once more "
        "to the express delivery box.",
        A.Type(content=f"\t{name}\t{qty}\t"),
    )
    yield said(ctx, "The express delivery box has the focus; Space ticks it.", A.Press(key="space"))
    yield said(ctx, "Tab moves to the Submit button.", A.Press(key="tab"))
    yield said(ctx, "Submit has the focus; Enter sends the order.", A.Press(key="enter"))
    wait_file(ctx, "Downloads/order.json")


@register_oracle("desktop/browser/add-to-cart")
def add_to_cart(ctx: OracleContext) -> Actions:
    product = param(ctx, "product")
    n = CATALOG.index(product) + 1
    yield click_heading(ctx, browser_page(ctx, "Catalog"), f"{product} must go into the cart.")
    yield said(
        ctx,
        f"{product} is link number {n} of the catalog; I press Tab {n} times to reach it.",
        A.Type(content="\t" * n),
    )
    yield said(ctx, f"The link {product} has the focus; Enter follows it.", A.Press(key="enter"))
    yield click_heading(ctx, browser_page(ctx, f"{product} - Chromium"), f"This is the page of {product}.")
    yield said(ctx, 'Tab reaches the page\'s only control, the "Add to cart" button.', A.Press(key="tab"))
    yield said(ctx, f'"Add to cart" has the focus; Enter adds {product} to the cart.', A.Press(key="enter"))
    browser_page(ctx, f"Cart (1): {product}")


@register_oracle("desktop/browser/preferences")
def preferences(ctx: OracleContext) -> Actions:
    theme, size = param(ctx, "theme"), param(ctx, "size")
    yield click_heading(
        ctx,
        browser_page(ctx, "Preferences"),
        f"The preferences must become the {theme} theme and font size {size}.",
    )
    yield said(
        ctx,
        "Tab reaches the theme list; with it closed, arrow keys step through its options.",
        A.Press(key="tab"),
    )
    for i in range(THEMES.index(theme)):
        yield said(ctx, f'Down moves the theme from "{THEMES[i]}" to "{THEMES[i + 1]}".', A.Press(key="down"))
    yield said(ctx, f"The theme is {theme}; Tab moves to the font size.", A.Press(key="tab"))
    yield said(ctx, "Ctrl+A selects the old font size.", A.Hotkey(keys=("ctrl", "a")))
    yield said(
        ctx, f"I type {size} over it, then Tab to Save and Enter to save.", A.Type(content=f"{size}\t\n")
    )
    browser_page(ctx, "Saved:")


@register_oracle("desktop/browser/read-table")
def read_table(ctx: OracleContext) -> Actions:
    win = browser_page(ctx, "Weather outlook")
    temp = param(ctx, "temp")
    yield said(
        ctx,
        "The weather table is further down the page; I scroll down to read it.",
        A.Scroll(x=int(win["width"]) // 2, y=int(win["height"]) // 2, direction="down", amount=5),
    )
    yield said(
        ctx,
        f"The table gives the temperature asked for: {temp}. That is my answer.",
        A.Finished(content=str(temp)),
    )


@register_oracle("desktop/browser/new-tab")
def new_tab(ctx: OracleContext) -> Actions:
    page, code = param(ctx, "page"), param(ctx, "code")
    n = REPORTS.index(page) + 1
    yield click_heading(ctx, browser_page(ctx, "Start page"), f"The {page} report must open in a new tab.")
    yield said(
        ctx,
        f"The {page} link is number {n} on the page; I press Tab {n} times to reach it.",
        A.Type(content="\t" * n),
    )
    yield said(
        ctx, f"The {page} link has the focus; Ctrl+Enter opens it in a new tab, behind this one.",
        A.Hotkey(keys=("ctrl", "enter")),
    )  # fmt: skip
    # Then Ctrl+Tab to it, once it is there (the window title says when the switch happened). On a
    # loaded machine the tab can take more than 12 s to come: up to 6 tries of 5 s.
    for attempt in range(6):
        again = "The new tab was not there yet; " if attempt else ""
        yield said(
            ctx,
            f"{again}Ctrl+Tab switches to the next tab, the {page} report.",
            A.Hotkey(keys=("ctrl", "tab")),
        )
        try:
            browser_page(ctx, f"{code} {page} (start page open)", 5.0)
            return
        except OracleFailed:
            continue
    raise OracleFailed("the link's tab never came")


@register_oracle("desktop/browser/offline-news")
def offline_news(ctx: OracleContext) -> Actions:
    site = str(param(ctx, "site"))
    host = site.split("//", 1)[-1].split("/", 1)[0]
    browser_page(ctx, "Start page")
    yield from open_url(ctx, site, host)  # Chromium's error page, titled with the host
    yield said(
        ctx,
        f"Chromium shows an error page: {host} cannot be reached because the desktop has no network. "
        "The task is infeasible.",
        A.Finished(content=f"infeasible: {host} cannot be reached, the desktop has no network"),
    )


# --- hybrid ----------------------------------------------------------------------------------------


@register_oracle("desktop/hybrid/receipt-total")
def receipt_total(ctx: OracleContext) -> Actions:
    prices = [int(param(ctx, k)) for k in ("a", "b", "c", "d")]
    total = sum(prices)
    sum_of = " + ".join(map(str, prices))
    yield from shell(
        ctx,
        f"echo $(({sum_of}))",
        f"The receipt's prices are {', '.join(map(str, prices))}; the shell adds them up.",
    )
    yield from editor(ctx, "receipt.txt", f"The terminal prints {total}; the receipt needs that total.")
    yield said(ctx, "Ctrl+End moves the cursor to the end of the receipt.", A.Hotkey(keys=("ctrl", "end")))
    yield said(ctx, f"I type the total line, TOTAL: {total}.", A.Type(content=f"TOTAL: {total}\n"))
    yield from save_editor(ctx, "receipt.txt")
    wait_file(ctx, "receipt.txt")


@register_oracle("desktop/hybrid/code-hash")
def code_hash(ctx: OracleContext) -> Actions:
    code = str(param(ctx, "code"))
    browser_page(ctx, "Verification")
    why = f"The page wants the first 8 hex digits of the SHA-256 of the code {code}; sha256sum computes it."
    yield from shell(ctx, f"printf %s {code} | sha256sum | cut -c1-8", why)
    digest = hashlib.sha256(code.encode()).hexdigest()[:8]  # what the terminal printed
    page = browser_page(ctx, "Verification")
    yield from focus(ctx, page, f"The terminal prints {digest}; I go back to the verification page.")
    yield click_heading(ctx, browser_page(ctx, "Verification"))
    yield said(
        ctx,
        f"Tab reaches the page's field; I type {digest} and press Enter to submit.",
        A.Type(content=f"\t{digest}\n"),
    )
    browser_page(ctx, f"Submitted: {digest}")


@register_oracle("desktop/hybrid/count-into-report")
def count_into_report(ctx: OracleContext) -> Actions:
    n = str(param(ctx, "n"))
    yield from shell(
        ctx, "ls ~/photos/*.jpg | wc -l", "The report needs the number of .jpg photos in ~/photos."
    )
    yield from editor(ctx, "report.txt", f"The terminal prints {n}; the report's count must say so.")
    yield said(ctx, "Ctrl+Home moves the cursor to the top of the report.", A.Hotkey(keys=("ctrl", "home")))
    yield said(ctx, "The count is on the second line; I press Down.", A.Press(key="down"))
    yield said(ctx, "End moves after the placeholder at the end of that line.", A.Press(key="end"))
    for i in range(3):
        yield said(
            ctx, f"Backspace erases the placeholder's characters ({i + 1} of 3).", A.Press(key="backspace")
        )
    yield said(ctx, f"I type the count, {n}.", A.Type(content=n))
    yield from save_editor(ctx, "report.txt")


@register_oracle("desktop/hybrid/folders-from-list")
def folders_from_list(ctx: OracleContext) -> Actions:
    names = list(param(ctx, "names"))
    why = (
        f"The list names the folders {', '.join(names)}: mkdir makes them in ~/projects, PCManFM shows them."
    )
    yield from shell(ctx, "cd ~/projects && mkdir " + " ".join(names) + " && cd && pcmanfm ~/projects &", why)
    wait_window(ctx, "pcmanfm", "projects")


@register_oracle("desktop/hybrid/lines-to-form")
def lines_to_form(ctx: OracleContext) -> Actions:
    file, n = param(ctx, "file"), param(ctx, "n")
    browser_page(ctx, "Data check")
    why = (
        f"The form asks how many data rows ~/data/{file}.csv has: its lines after the header, counted by wc."
    )
    yield from shell(ctx, f"tail -n +2 ~/data/{file}.csv | wc -l", why)
    page = browser_page(ctx, "Data check")
    yield from focus(ctx, page, f"The terminal prints {n}; I go back to the form.")
    yield click_heading(ctx, browser_page(ctx, "Data check"))
    yield said(
        ctx,
        f"Tab reaches the form's field; I type {n} and press Enter to send it.",
        A.Type(content=f"\t{n}\n"),
    )
    browser_page(ctx, f"Answer: {n}")
