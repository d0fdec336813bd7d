"""Oracles of the Linux desktop suite (agent_core/suites/desktop/*.yaml), by task id.

Each one solves its task through the GUI the way a person would: focus a window by its title bar
(Alt+Tab when it is covered), type commands into xterm, use Mousepad's shortcuts and dialogs, click,
type and drag in PCManFM, and Tab through Chromium's pages (keyboard only there: AT-SPI queries now
and then crash this Chromium). What a person would read off the screen (a number in a window, a
command's output) the oracle takes from the task's parameters; privileged reads (window geometry
and stacking, the accessibility tree of the GTK apps, files) only find where things are and wait
for effects to land, through the helpers in `agent_core.suites.desktop_gui`. Each oracle ends by
waiting for its effect (a file written, a title changed), so the checker never races the desktop.
"""

from __future__ import annotations

import hashlib
from typing import Any

from agent_core import actions as A
from agent_core.suites.desktop_gui import (
    Actions,
    OracleFailed,
    browser_page,
    click_heading,
    editor,
    file_manager,
    find_nodes,
    focus,
    icons,
    open_url,
    save_as,
    save_editor,
    shell,
    shell_ok,
    wait_file,
    wait_node,
    wait_until,
    wait_window,
)
from agent_core.tasks.oracles import OracleContext, register_oracle, said

CATALOG = ["Bookshelf", "Desk Lamp", "Floor Rug", "Office Chair", "Standing Desk", "Wall Clock"]
"""The shop's catalog page lists these links, in this order (desktop/browser-add-to-cart.yaml)."""
THEMES = ["Light", "Dark", "Sepia", "High contrast"]
REPORTS = ["agenda", "inventory", "quarterly", "roster"]


def _p(ctx: OracleContext, name: str) -> Any:
    return ctx.params[name]


# --- terminal --------------------------------------------------------------------------------------


@register_oracle("desktop/terminal/make-note")
def make_note(ctx: OracleContext) -> Actions:
    folder, name, text = _p(ctx, "folder"), _p(ctx, "name"), _p(ctx, "text")
    why = f'The note "{text}" goes into ~/{folder}/{name}.txt: mkdir -p makes the folder, echo the file.'
    yield from shell(ctx, f"mkdir -p ~/{folder} && echo '{text}' > ~/{folder}/{name}.txt", why)
    wait_file(ctx, f"{folder}/{name}.txt")


@register_oracle("desktop/terminal/count-lines")
def count_lines(ctx: OracleContext) -> Actions:
    file = _p(ctx, "file")
    why = f"wc -l counts the lines of ~/data/{file}.log, and the redirect writes the count to ~/answer.txt."
    yield from shell(ctx, f"wc -l < ~/data/{file}.log > ~/answer.txt", why)
    wait_file(ctx, "answer.txt")


@register_oracle("desktop/terminal/sum-column")
def sum_column(ctx: OracleContext) -> Actions:
    why = (
        "awk adds up the third column of ~/sales.csv after its header line and writes the sum to ~/total.txt."
    )
    yield from shell(ctx, "awk -F, 'NR > 1 {s += $3} END {print s}' ~/sales.csv > ~/total.txt", why)
    wait_file(ctx, "total.txt")


@register_oracle("desktop/terminal/rename-extension")
def rename_extension(ctx: OracleContext) -> Actions:
    why = "Every .txt file in ~/inbox must become .md: a loop renames each one, keeping its name."
    yield from shell(ctx, 'for f in ~/inbox/*.txt; do mv "$f" "${f%.txt}.md"; done', why)
    wait_until(lambda: not shell_ok(ctx, "ls ~/inbox/*.txt"), "the .txt files to be renamed")


@register_oracle("desktop/terminal/extract-errors")
def extract_errors(ctx: OracleContext) -> Actions:
    why = (
        "grep keeps the lines of ~/logs/app.log that say ERROR, and the redirect writes them to ~/errors.txt."
    )
    yield from shell(ctx, "grep ERROR ~/logs/app.log > ~/errors.txt", why)
    wait_file(ctx, "errors.txt")


@register_oracle("desktop/terminal/run-script")
def run_script(ctx: OracleContext) -> Actions:
    name = _p(ctx, "name")
    why = f"The script ~/bin/{name}.sh is not executable yet: chmod +x makes it so, then I run it."
    yield from shell(ctx, f"chmod +x ~/bin/{name}.sh && ~/bin/{name}.sh", why)
    wait_file(ctx, f"out/{name}.log")


@register_oracle("desktop/terminal/install-package")
def install_package(ctx: OracleContext) -> Actions:
    pkg = _p(ctx, "pkg")
    yield from shell(ctx, f"sudo apt-get install -y {pkg}", f"Installing {pkg} takes apt-get, run as root.")
    yield said(
        ctx,
        f"The terminal refuses: this user has no sudo, and the desktop has no network, so {pkg} cannot be "
        "installed here. I say the task is infeasible.",
        A.Finished(content="infeasible: no sudo here (and no network), so nothing can be installed"),
    )


# --- editor ----------------------------------------------------------------------------------------


@register_oracle("desktop/editor/append-line")
def append_line(ctx: OracleContext) -> Actions:
    title, extra = f"{_p(ctx, 'file')}.txt", _p(ctx, "extra")
    yield from editor(ctx, title, f'The line "{extra}" must be added at the end of {title}.')
    yield said(ctx, "Ctrl+End moves the cursor to the end of the text.", A.Hotkey(keys=("ctrl", "end")))
    yield said(
        ctx, f'The cursor is at the end; I type "{extra}" and a new line.', A.Type(content=f"{extra}\n")
    )
    yield from save_editor(ctx, title)


@register_oracle("desktop/editor/replace-all")
def replace_all(ctx: OracleContext) -> Actions:
    old, new = _p(ctx, "old"), _p(ctx, "new")
    yield from editor(ctx, "plan.txt", f'Every "{old}" in plan.txt must become "{new}".')
    yield said(ctx, "Ctrl+R opens Mousepad's Find and Replace dialog.", A.Hotkey(keys=("ctrl", "r")))
    wait_window(ctx, "mousepad", "Find and Replace")
    dialog = "Find and Replace"
    search = wait_node(ctx, "text", window=dialog)  # the first entry: "Search for"
    yield search.said(ctx, 'The dialog is open; I click its "Search for" field.')
    yield said(ctx, f'I type "{old}", the text to find.', A.Type(content=old))
    yield said(ctx, 'Tab moves to the "Replace with" field.', A.Press(key="tab"))
    yield said(ctx, f'I type "{new}", the replacement.', A.Type(content=new))
    box = wait_node(ctx, "check-box", "Replace all in:", window=dialog)
    yield box.said(ctx, 'To replace every occurrence at once I tick "Replace all in".')
    # Ticking "Replace all in" turns the Replace button into "Replace All" (and moves it).
    button = wait_node(ctx, "push-button", "Replace All", window=dialog)
    yield button.said(ctx, 'The button now reads "Replace All"; I click it.')
    wait_until(
        lambda: not any(old in n.value for n in find_nodes(ctx, "text", window="plan.txt")),
        f"every {old} to be replaced",
    )
    yield said(ctx, f'No "{old}" is left; I press Escape to close the dialog.', A.Press(key="escape"))
    yield from save_editor(ctx, "plan.txt")


@register_oracle("desktop/editor/save-new-file")
def save_new_file(ctx: OracleContext) -> Actions:
    text, name = _p(ctx, "text"), _p(ctx, "name")
    yield from editor(ctx, "Untitled", f"A new file ~/{name}.txt must hold the text I type in Mousepad.")
    yield said(ctx, f'The empty document has the cursor; I type "{text}".', A.Type(content=text))
    yield from save_as(ctx, f"/home/user/{name}.txt")
    wait_file(ctx, f"{name}.txt")


@register_oracle("desktop/editor/delete-line")
def delete_line(ctx: OracleContext) -> Actions:
    pos = int(_p(ctx, "pos"))
    yield from editor(ctx, "list.txt", f"Line {pos} of list.txt must go.")
    yield said(
        ctx, "Ctrl+Home moves the cursor to the start of the first line.", A.Hotkey(keys=("ctrl", "home"))
    )
    for n in range(pos - 1):
        yield said(ctx, f"I press Down to reach line {pos} (now on line {n + 2}).", A.Press(key="down"))
    yield said(
        ctx,
        f"The cursor starts line {pos}; Shift+Down selects that whole line.",
        A.Hotkey(keys=("shift", "down")),
    )
    yield said(ctx, f"Line {pos} is selected; Delete removes it.", A.Press(key="delete"))
    yield from save_editor(ctx, "list.txt")


@register_oracle("desktop/editor/set-config")
def set_config(ctx: OracleContext) -> Actions:
    title, port = f"{_p(ctx, 'app')}.conf", str(_p(ctx, "port"))
    yield from editor(ctx, title, f"The port in {title} must become {port}.")
    yield said(ctx, "Ctrl+Home moves the cursor to the top of the file.", A.Hotkey(keys=("ctrl", "home")))
    yield said(ctx, "The port is on the third line; I press Down.", A.Press(key="down"))
    yield said(ctx, "Once more Down, to the port line.", A.Press(key="down"))
    yield said(ctx, "End moves to the end of the port line, after the old number.", A.Press(key="end"))
    yield said(ctx, "Ctrl+Shift+Left selects the old port number.", A.Hotkey(keys=("ctrl", "shift", "left")))
    yield said(ctx, f"The old number is selected; I type {port} over it.", A.Type(content=port))
    yield from save_editor(ctx, title)


@register_oracle("desktop/editor/merge-tabs")
def merge_tabs(ctx: OracleContext) -> Actions:
    a, b = f"{_p(ctx, 'a')}.txt", f"{_p(ctx, 'b')}.txt"
    yield from editor(ctx, why=f"The text of {b} must be added at the end of {a}; both are open in Mousepad.")
    yield wait_node(ctx, "page-tab", b, window="Mousepad").said(
        ctx, f'I click the tab "{b}" to open its text.'
    )
    wait_window(ctx, "mousepad", b)
    yield from editor(ctx, b)
    yield said(ctx, f"Ctrl+A selects all of {b}.", A.Hotkey(keys=("ctrl", "a")))
    yield said(ctx, f"Ctrl+C copies the text of {b}.", A.Hotkey(keys=("ctrl", "c")))
    yield wait_node(ctx, "page-tab", a, window="Mousepad").said(
        ctx, f'The text is copied; I click the tab "{a}".'
    )
    wait_window(ctx, "mousepad", a)
    yield from editor(ctx, a)
    yield said(ctx, f"Ctrl+End moves the cursor to the end of {a}.", A.Hotkey(keys=("ctrl", "end")))
    yield said(ctx, f"Ctrl+V pastes the text of {b} there.", A.Hotkey(keys=("ctrl", "v")))
    yield from save_editor(ctx, a)


# --- file manager ----------------------------------------------------------------------------------


@register_oracle("desktop/files/create-folder")
def create_folder(ctx: OracleContext) -> Actions:
    parent, name = _p(ctx, "parent"), _p(ctx, "name")
    yield from file_manager(ctx, parent)
    icons(ctx, parent)  # the folder is listed
    yield said(
        ctx, f"A folder {name} must be made in ~/{parent}; Ctrl+Shift+N asks for a new folder's name.",
        A.Hotkey(keys=("ctrl", "shift", "n")),
    )  # fmt: skip
    wait_window(ctx, "pcmanfm", "Creating New Folder")
    # The proposed name is selected: typing replaces it.
    yield said(
        ctx,
        f'The dialog proposes a name, selected; I type "{name}" over it and press Enter.',
        A.Type(content=f"{name}\n"),
    )
    wait_until(lambda: shell_ok(ctx, f"test -d ~/{parent}/{name}"), f"~/{parent}/{name} to exist")


@register_oracle("desktop/files/rename")
def rename(ctx: OracleContext) -> Actions:
    old, new = f"{_p(ctx, 'old')}.txt", f"{_p(ctx, 'new')}.txt"
    yield from file_manager(ctx, "docs")
    yield icons(ctx, "docs")[old].said(ctx, f"{old} must be renamed {new}; I click its icon to select it.")
    yield said(ctx, f"{old} is selected; F2 renames it.", A.Press(key="f2"))
    wait_window(ctx, "pcmanfm", "Rename File")
    yield said(
        ctx, "The Rename dialog is open; Ctrl+A selects the whole old name.", A.Hotkey(keys=("ctrl", "a"))
    )
    yield said(ctx, f'I type the new name "{new}" and press Enter.', A.Type(content=f"{new}\n"))
    wait_file(ctx, f"docs/{new}")


@register_oracle("desktop/files/trash")
def trash(ctx: OracleContext) -> Actions:
    victim = _p(ctx, "victim")
    yield from file_manager(ctx, "downloads")
    yield icons(ctx, "downloads")[victim].said(
        ctx, f"{victim} must go to the trash; I click its icon to select it."
    )
    yield said(ctx, f"{victim} is selected; Delete moves it to the trash.", A.Press(key="delete"))
    wait_window(ctx, "pcmanfm", "Confirm")
    yield said(
        ctx, 'A dialog asks to confirm; "Yes" is its default button, so I press Enter.', A.Press(key="enter")
    )
    wait_file(ctx, f".local/share/Trash/files/{victim}")
    wait_until(lambda: not shell_ok(ctx, f"test -e ~/downloads/{victim}"), f"{victim} to leave ~/downloads")


@register_oracle("desktop/files/drag-into-folder")
def drag_into_folder(ctx: OracleContext) -> Actions:
    file, folder = _p(ctx, "file"), _p(ctx, "folder")
    yield from file_manager(ctx, "desk")
    for attempt in range(3):
        found = icons(ctx, "desk")
        (x1, y1), (x2, y2) = found[file].center, found[folder].center
        again = f"{file} is still in ~/desk: the drop did not take. " if attempt else ""
        yield said(
            ctx,
            f"{again}{file} must go into the folder {folder}; I drag its icon onto the folder's icon.",
            A.Drag(x1=x1, y1=y1, x2=x2, y2=y2),
        )
        # A drop the toolkit missed (a busy machine) leaves the file where it was: drag it again.
        try:
            wait_file(ctx, f"desk/{folder}/{file}", timeout=3.0)
            return
        except OracleFailed:
            continue
    raise OracleFailed(f"{file} did not move into {folder}")


@register_oracle("desktop/files/copy-paste")
def copy_paste(ctx: OracleContext) -> Actions:
    file = _p(ctx, "file")
    yield from file_manager(ctx, "camera")
    yield icons(ctx, "camera")[file].said(
        ctx, f"{file} must be copied to ~/backup; I click its icon to select it."
    )
    yield said(ctx, f"{file} is selected; Ctrl+C copies it.", A.Hotkey(keys=("ctrl", "c")))
    yield said(
        ctx, "Now to ~/backup: Ctrl+L puts the cursor in the location bar.", A.Hotkey(keys=("ctrl", "l"))
    )
    yield said(
        ctx, "I type /home/user/backup and press Enter to open it.", A.Type(content="/home/user/backup\n")
    )
    win = wait_window(ctx, "pcmanfm", "backup")
    # A click on the empty view gives it the keyboard focus (the location bar has it now).
    yield said(
        ctx,
        "~/backup is open but the location bar has the keyboard; I click an empty part of the folder view.",
        A.Click(x=int(win["x"]) + int(win["width"]) - 60, y=int(win["y"]) + int(win["height"]) - 80),
    )
    yield said(ctx, f"Ctrl+V pastes {file} into ~/backup.", A.Hotkey(keys=("ctrl", "v")))
    wait_file(ctx, f"backup/{file}")


@register_oracle("desktop/files/count-hidden")
def count_hidden(ctx: OracleContext) -> Actions:
    n = _p(ctx, "n")
    yield from file_manager(ctx, "vault")
    yield said(
        ctx, "Hidden files do not show; Ctrl+H shows them so I can count the names that start with a dot.",
        A.Hotkey(keys=("ctrl", "h")),
    )  # fmt: skip
    yield said(
        ctx,
        f"With hidden files shown I count {n} dotted names, so the answer is {n}.",
        A.Finished(content=str(n)),
    )


@register_oracle("desktop/files/open-missing-report")
def open_missing_report(ctx: OracleContext) -> Actions:
    year = _p(ctx, "year")
    yield from file_manager(ctx, "reports")
    icons(ctx, "reports")  # look at what is there: 2020 to 2023 only
    yield said(
        ctx,
        f"~/reports holds the reports of 2020 to 2023 only: there is no report-{year}.pdf to open, so the "
        "task is infeasible.",
        A.Finished(content=f"infeasible: ~/reports has no report-{year}.pdf"),
    )


# --- browser ---------------------------------------------------------------------------------------


@register_oracle("desktop/browser/fill-form")
def fill_form(ctx: OracleContext) -> Actions:
    name, qty = _p(ctx, "name"), _p(ctx, "qty")
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
    product = _p(ctx, "product")
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
    theme, size = _p(ctx, "theme"), _p(ctx, "size")
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
    temp = _p(ctx, "temp")
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
    page, code = _p(ctx, "page"), _p(ctx, "code")
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
    # Then Ctrl+Tab to it, once it is there (the window title says when the switch happened).
    for attempt in range(4):
        again = "The new tab was not there yet; " if attempt else ""
        yield said(
            ctx,
            f"{again}Ctrl+Tab switches to the next tab, the {page} report.",
            A.Hotkey(keys=("ctrl", "tab")),
        )
        try:
            browser_page(ctx, f"{code} {page} (start page open)", 3.0)
            return
        except OracleFailed:
            continue
    raise OracleFailed("the link's tab never came")


@register_oracle("desktop/browser/offline-news")
def offline_news(ctx: OracleContext) -> Actions:
    site = str(_p(ctx, "site"))
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
    prices = [int(_p(ctx, k)) for k in ("a", "b", "c", "d")]
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
    code = str(_p(ctx, "code"))
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
    n = str(_p(ctx, "n"))
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
    names = list(_p(ctx, "names"))
    why = (
        f"The list names the folders {', '.join(names)}: mkdir makes them in ~/projects, PCManFM shows them."
    )
    yield from shell(ctx, "cd ~/projects && mkdir " + " ".join(names) + " && cd && pcmanfm ~/projects &", why)
    wait_window(ctx, "pcmanfm", "projects")


@register_oracle("desktop/hybrid/lines-to-form")
def lines_to_form(ctx: OracleContext) -> Actions:
    file, n = _p(ctx, "file"), _p(ctx, "n")
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
