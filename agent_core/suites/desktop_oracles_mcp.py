"""Oracles of the desktop suite's MCP hybrid tasks (agent_core/suites/desktop/mcp-*.yaml), by task id.

Each task needs both halves: an MCP tool of the sandbox (records, files, shell) to learn or store
something, and the GUI (Mousepad, Chromium, PCManFM) to use it. The oracles call the tools as an agent
does, with `mcp_call` actions, and take what they need from the tool's result as the agent sees it
(the observation after the call carries it); the GUI part follows the conventions of
`agent_core.suites.desktop_oracles` (focus by title bar, keyboard-driven Chromium, waits for effects).
"""

from __future__ import annotations

import re
from collections.abc import Generator, Mapping
from typing import Any

from agent_core import actions as A
from agent_core.suites.desktop_gui import (
    Actions,
    OracleFailed,
    browser_page,
    click_heading,
    editor,
    file_manager,
    focus,
    icons,
    param,
    save_editor,
    wait_file,
    wait_window,
)
from agent_core.tasks.oracles import OracleContext, register_oracle, said

ToolCall = Generator[A.Action, None, Any]


def call_tool(ctx: OracleContext, server: str, tool: str, arguments: Mapping[str, Any], why: str) -> ToolCall:
    """Yield the `mcp_call` (with `why` as its thought) and return the tool's structured result, read
    from the observation that follows it (what the agent is shown)."""
    yield said(ctx, why, A.McpCall(server=server, tool=tool, arguments=dict(arguments)))
    obs = ctx.observation
    result = obs.info.get("result") if obs is not None else None
    if not isinstance(result, Mapping) or result.get("is_error"):
        raise OracleFailed(f"{server}.{tool} gave no result: {result!r}")
    structured = result.get("structured")
    if not isinstance(structured, Mapping):
        raise OracleFailed(f"{server}.{tool} gave no structured result: {result!r}")
    return structured


def replace_blank(ctx: OracleContext, line: int, value: str, blank: str = "___") -> Actions:
    """In the focused editor: go to line `line` (1-based), erase the blank at its end, type `value`."""
    yield said(ctx, "Ctrl+Home moves the cursor to the top of the document.", A.Hotkey(keys=("ctrl", "home")))
    for i in range(line - 1):
        yield said(
            ctx, f"The blank is on line {line}; I press Down ({i + 1} of {line - 1}).", A.Press(key="down")
        )
    yield said(ctx, "End moves after the blank at the end of that line.", A.Press(key="end"))
    for i in range(len(blank)):
        yield said(
            ctx,
            f"Backspace erases the blank's characters ({i + 1} of {len(blank)}).",
            A.Press(key="backspace"),
        )
    yield said(ctx, f"I type {value} where the blank was.", A.Type(content=value))


def submit_field(ctx: OracleContext, page_title: str, value: str, why: str) -> Actions:
    """Back to the Chromium page titled `page_title`, Tab to its (only) field, type `value` and Enter."""
    page = browser_page(ctx, page_title)
    yield from focus(ctx, page, why)
    yield click_heading(ctx, browser_page(ctx, page_title))
    yield said(
        ctx,
        f"Tab reaches the page's field; I type {value} and press Enter to send it.",
        A.Type(content=f"\t{value}\n"),
    )


# --- records ---------------------------------------------------------------------------------------


@register_oracle("desktop/hybrid/mcp-price-into-quote")
def price_into_quote(ctx: OracleContext) -> Actions:
    sku = str(param(ctx, "sku"))
    record = yield from call_tool(
        ctx, "records", "lookup", {"key": sku},
        f"The quote needs the unit price of {sku}; the records tool's lookup gives that item's record.",
    )  # fmt: skip
    price = str(record["value"]["unit_price"])
    yield from editor(
        ctx, "quote.txt", f"The record says {sku} costs {price}; the quote's blank must say so."
    )
    yield from replace_blank(ctx, 3, price)
    yield from save_editor(ctx, "quote.txt")
    wait_file(ctx, "quote.txt", lambda text: f"Unit price: {price}" in text)


@register_oracle("desktop/hybrid/mcp-contact-into-form")
def contact_into_form(ctx: OracleContext) -> Actions:
    person = str(param(ctx, "person"))
    browser_page(ctx, "Contact form")
    record = yield from call_tool(
        ctx, "records", "lookup", {"key": person},
        f"The form wants the email address of {person}; the records tool looks their record up.",
    )  # fmt: skip
    email = str(record["value"]["email"])
    yield from submit_field(ctx, "Contact form", email, f"The record gives {email}; I go back to the form.")
    browser_page(ctx, f"Sent to: {email}")


# --- files -----------------------------------------------------------------------------------------


@register_oracle("desktop/hybrid/mcp-ticket-into-form")
def ticket_into_form(ctx: OracleContext) -> Actions:
    browser_page(ctx, "Ticket confirmation")
    listing = yield from call_tool(
        ctx, "files", "list_dir", {"path": "inbox"},
        "The ticket is somewhere in ~/inbox; the files tool's list_dir shows what the folder holds.",
    )  # fmt: skip
    names = [str(e["name"]) for e in listing["entries"] if str(e["name"]).startswith("ticket-")]
    if len(names) != 1:
        raise OracleFailed(f"expected one ticket in ~/inbox, found {names}")
    ticket = yield from call_tool(
        ctx, "files", "read_file", {"path": f"inbox/{names[0]}"},
        f"The inbox holds {names[0]}; read_file shows the ticket and its confirmation code.",
    )  # fmt: skip
    found = re.search(r"Confirmation code: (\S+)", str(ticket["content"]))
    if found is None:
        raise OracleFailed(f"no confirmation code in {names[0]}")
    code = found.group(1)
    why = f"The ticket's confirmation code is {code}; I go back to the confirmation page."
    yield from submit_field(ctx, "Ticket confirmation", code, why)
    browser_page(ctx, f"Confirmed: {code}")


@register_oracle("desktop/hybrid/mcp-search-into-report")
def search_into_report(ctx: OracleContext) -> Actions:
    found = yield from call_tool(
        ctx, "files", "search", {"text": "ERROR", "path": "logs"},
        "One log in ~/logs has an ERROR line; the files tool's search finds it in all of them at once.",
    )  # fmt: skip
    codes = [(m["path"], c) for m in found["matches"] for c in re.findall(r"\bE\d+\b", str(m["text"]))]
    if len(codes) != 1:
        raise OracleFailed(f"expected one error code in ~/logs, found {codes}")
    path, code = codes[0]
    yield from editor(
        ctx, "incident.txt", f"{path} has the ERROR line with code {code}; the report needs it."
    )
    yield from replace_blank(ctx, 2, code)
    yield from save_editor(ctx, "incident.txt")
    wait_file(ctx, "incident.txt", lambda text: f"Error code: {code}" in text)


@register_oracle("desktop/hybrid/mcp-page-code-to-file")
def page_code_to_file(ctx: OracleContext) -> Actions:
    code = str(param(ctx, "code"))  # what the page shows once its button is pressed
    page = browser_page(ctx, "Access code")
    yield click_heading(ctx, page, 'The access code only shows after pressing "Show code".')
    yield said(
        ctx,
        'Tab moves to the "Show code" button, the page\'s first control; Enter presses it.',
        A.Type(content="\t\n"),
    )
    browser_page(ctx, "Code shown")
    yield from call_tool(
        ctx, "files", "write_file", {"path": "access.txt", "content": code},
        f"The page now shows the code {code}; the files tool's write_file saves it to ~/access.txt.",
    )  # fmt: skip
    wait_file(ctx, "access.txt", lambda text: text == code)


# --- shell -----------------------------------------------------------------------------------------


@register_oracle("desktop/hybrid/mcp-checksum-rename")
def checksum_rename(ctx: OracleContext) -> Actions:
    out = yield from call_tool(
        ctx, "shell", "run", {"command": "md5sum docs/upload.bin"},
        "The new name comes from the MD5 checksum of ~/docs/upload.bin; the shell tool runs md5sum on it.",
    )  # fmt: skip
    digest = str(out["stdout"]).split()[0][:8] if out.get("exit_code") == 0 else ""
    if not re.fullmatch(r"[0-9a-f]{8}", digest):
        raise OracleFailed(f"md5sum printed no checksum: {out!r}")
    new = f"{digest}.bin"
    yield from file_manager(ctx, "docs")
    yield icons(ctx, "docs")["upload.bin"].said(
        ctx, f"md5sum printed a checksum starting {digest}, so upload.bin becomes {new}; I click its icon."
    )
    yield said(ctx, "upload.bin is selected; F2 renames it.", A.Press(key="f2"))
    wait_window(ctx, "pcmanfm", "Rename File")
    yield said(
        ctx, "The Rename dialog is open; Ctrl+A selects the whole old name.", A.Hotkey(keys=("ctrl", "a"))
    )
    yield said(ctx, f'I type the new name "{new}" and press Enter.', A.Type(content=f"{new}\n"))
    wait_file(ctx, f"docs/{new}")
