"""Oracles of the Linux desktop suite (agent_core/suites/desktop/*.yaml), by task id.

Each one solves its task through the GUI the way a person would: focus a window by its title bar
(Alt+Tab when it is covered), type commands into xterm, use Mousepad's shortcuts and dialogs, click,
type and drag in PCManFM, and Tab through Chromium's pages (keyboard only there: AT-SPI queries now
and then crash this Chromium). What a person would read off the screen (a number in a window, a
command's output) the oracle takes from the task's parameters; privileged reads (window geometry
and stacking, the accessibility tree of the GTK apps, files) only find where things are and wait
for effects to land, through the helpers in `agent_core.suites.desktop_gui`. Each oracle ends by
waiting for its effect (a file written, a title changed), so the checker never races the desktop.
The terminal, editor and file manager tasks' oracles are here; the browser and hybrid (GUI + shell)
ones, in `agent_core.suites.desktop_oracles_web`.
"""

from __future__ import annotations

from agent_core import actions as A
from agent_core.suites.desktop_gui import (
    Actions,
    OracleFailed,
    editor,
    file_manager,
    find_nodes,
    icons,
    param,
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

# --- terminal --------------------------------------------------------------------------------------


@register_oracle("desktop/terminal/make-note")
def make_note(ctx: OracleContext) -> Actions:
    folder, name, text = param(ctx, "folder"), param(ctx, "name"), param(ctx, "text")
    why = f'The note "{text}" goes into ~/{folder}/{name}.txt: mkdir -p makes the folder, echo the file.'
    yield from shell(ctx, f"mkdir -p ~/{folder} && echo '{text}' > ~/{folder}/{name}.txt", why)
    wait_file(ctx, f"{folder}/{name}.txt")


@register_oracle("desktop/terminal/count-lines")
def count_lines(ctx: OracleContext) -> Actions:
    file = param(ctx, "file")
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
    name = param(ctx, "name")
    why = f"The script ~/bin/{name}.sh is not executable yet: chmod +x makes it so, then I run it."
    yield from shell(ctx, f"chmod +x ~/bin/{name}.sh && ~/bin/{name}.sh", why)
    wait_file(ctx, f"out/{name}.log")


@register_oracle("desktop/terminal/install-package")
def install_package(ctx: OracleContext) -> Actions:
    pkg = param(ctx, "pkg")
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
    title, extra = f"{param(ctx, 'file')}.txt", param(ctx, "extra")
    yield from editor(ctx, title, f'The line "{extra}" must be added at the end of {title}.')
    yield said(ctx, "Ctrl+End moves the cursor to the end of the text.", A.Hotkey(keys=("ctrl", "end")))
    yield said(
        ctx, f'The cursor is at the end; I type "{extra}" and a new line.', A.Type(content=f"{extra}\n")
    )
    yield from save_editor(ctx, title)


@register_oracle("desktop/editor/replace-all")
def replace_all(ctx: OracleContext) -> Actions:
    old, new = param(ctx, "old"), param(ctx, "new")
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
    text, name = param(ctx, "text"), param(ctx, "name")
    yield from editor(ctx, "Untitled", f"A new file ~/{name}.txt must hold the text I type in Mousepad.")
    yield said(ctx, f'The empty document has the cursor; I type "{text}".', A.Type(content=text))
    yield from save_as(ctx, f"/home/user/{name}.txt")
    wait_file(ctx, f"{name}.txt")


@register_oracle("desktop/editor/delete-line")
def delete_line(ctx: OracleContext) -> Actions:
    pos = int(param(ctx, "pos"))
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
    title, port = f"{param(ctx, 'app')}.conf", str(param(ctx, "port"))
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
    a, b = f"{param(ctx, 'a')}.txt", f"{param(ctx, 'b')}.txt"
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
    parent, name = param(ctx, "parent"), param(ctx, "name")
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
    old, new = f"{param(ctx, 'old')}.txt", f"{param(ctx, 'new')}.txt"
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
    victim = param(ctx, "victim")
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
    file, folder = param(ctx, "file"), param(ctx, "folder")
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
    file = param(ctx, "file")
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
    n = param(ctx, "n")
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
    year = param(ctx, "year")
    yield from file_manager(ctx, "reports")
    icons(ctx, "reports")  # look at what is there: 2020 to 2023 only
    yield said(
        ctx,
        f"~/reports holds the reports of 2020 to 2023 only: there is no report-{year}.pdf to open, so the "
        "task is infeasible.",
        A.Finished(content=f"infeasible: ~/reports has no report-{year}.pdf"),
    )
