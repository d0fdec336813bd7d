"""The multi-app sample: a price list open in the text editor and an order sheet open in Calc; the task
carries the prices from one application into the other. Scored as OSWorld's calc tasks are: the
postconfig saves the sheet with ctrl+s, compare_table checks it against a reference from the mirror."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from agent_core.actions import model as A
from agent_core.suites.desktop_gui import focus, wait_window
from agent_core.suites.osworld_samples import BASE, FILES, SAVE, TASKS, step, task_id, xlsx
from agent_core.tasks.oracles import OracleContext, register_oracle, said

PRICES = {"stapler": 7.5, "folder": 1.25, "marker": 2}
ORDERS = [("folder", 40), ("marker", 12), ("stapler", 3)]
HEADER = ["item", "quantity", "unit price"]
ROWS: list[list[Any]] = [HEADER, *([item, qty, None] for item, qty in ORDERS)]
FILES[f"{BASE}/multi/prices.txt"] = lambda: "".join(f"{k}: {v}\n" for k, v in PRICES.items()).encode()
FILES[f"{BASE}/multi/orders.xlsx"] = lambda: xlsx(ROWS)
FILES[f"{BASE}/multi/orders_gold.xlsx"] = lambda: xlsx(
    [HEADER, *([item, qty, PRICES[item]] for item, qty in ORDERS)]
)

TASKS["multi_apps"] = {
    "id": "sample-multi-prices-into-sheet",
    "snapshot": "libreoffice_calc",
    "instruction": "Fill the unit price column of ~/Desktop/orders.xlsx with each item's price from "
    "~/Desktop/prices.txt (open in the text editor).",
    "source": "the platform's own sample (OSWorld's format)",
    "config": [
        step(
            "download",
            files=[
                {"url": f"{BASE}/multi/prices.txt", "path": "/home/user/Desktop/prices.txt"},
                {"url": f"{BASE}/multi/orders.xlsx", "path": "/home/user/Desktop/orders.xlsx"},
            ],
        ),
        step("open", path="/home/user/Desktop/prices.txt"),
        step("open", path="/home/user/Desktop/orders.xlsx"),
    ],
    "trajectory": "trajectories/",
    "related_apps": ["libreoffice_calc", "gedit", "os"],
    "evaluator": {
        "postconfig": [
            step("activate_window", window_name="orders.xlsx - LibreOffice Calc", strict=True),
            *SAVE,
        ],
        "func": "compare_table",
        "result": {"type": "vm_file", "path": "/home/user/Desktop/orders.xlsx", "dest": "orders.xlsx"},
        "expected": {
            "type": "cloud_file",
            "path": f"{BASE}/multi/orders_gold.xlsx",
            "dest": "orders_gold.xlsx",
        },
        "options": {"rules": [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]},
    },
}


@register_oracle(task_id("multi_apps", TASKS["multi_apps"]))
def prices_into_sheet(ctx: OracleContext) -> Iterator[A.Action]:
    """Read the prices in the editor's window, then type each order's price into the sheet's column C."""
    editor = wait_window(ctx, "mousepad", "prices.txt")
    yield from focus(ctx, editor, "The prices are in prices.txt; I bring its window up to read them.")
    listed = ", ".join(f"{k} {v}" for k, v in PRICES.items())
    yield said(ctx, f"prices.txt lists {listed}. Now the sheet.", A.Wait(seconds=0.5))
    calc = wait_window(ctx, "libreoffice", "orders.xlsx")
    yield from focus(ctx, calc, "orders.xlsx needs the prices in its unit price column.")
    yield said(ctx, "Calc shows orders.xlsx; I click into the sheet so that what I type goes to its cells.",
               A.Click(x=int(calc["x"]) + int(calc["width"]) // 2,
                       y=int(calc["y"]) + int(calc["height"]) * 3 // 5))  # fmt: skip
    yield said(ctx, "I go to cell A1 to find my way from there.", A.Hotkey(keys=("ctrl", "home")))
    for key, why in (("right", "B1"), ("right", "C1, the unit price header"), ("down", "C2")):
        yield said(ctx, f"I move one cell {key} to {why}.", A.Press(key=key))
    for row, (item, _qty) in enumerate(ORDERS, start=2):
        yield said(ctx, f"Row {row} orders {item}, which prices.txt prices at {PRICES[item]}: I type it and "
                   "Enter, which moves down a row.", A.Type(content=f"{PRICES[item]}\n"))  # fmt: skip
    yield said(ctx, "Every order has its unit price.", A.Finished(content=""))
