"""The project's own tasks in OSWorld's format, with their input and reference files and scripted
solutions: what runs OSWorld's machinery end to end where OSWorld's hosts cannot be reached (tests, an
offline lab). They import like any OSWorld task file (`manage.py tasks_import_osworld`); their files
come from the sandbox host's mirror (`SANDBOX_FETCH_MIRROR`).

    python -m agent_core.suites.osworld_samples tasks DIR     # DIR/<domain>/<id>.json
    python -m agent_core.suites.osworld_samples mirror DIR    # the files their URLs name, in a mirror
"""

from __future__ import annotations

import argparse
import io
import json
import zipfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

from agent_core.actions import model as A
from agent_core.suites.desktop_gui import focus, wait_window
from agent_core.tasks.mirror import url_key
from agent_core.tasks.oracles import OracleContext, register_oracle, said

BASE = "https://osworld-samples.invalid/files"
"""Where the samples' files would live: a host that does not exist, so only the mirror serves them."""


def ooxml(parts: dict[str, str]) -> bytes:
    """An Office Open XML file (.xlsx, .docx, .pptx): its parts, by name, zipped."""
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for name, text in parts.items():
            z.writestr(name, text)
    return buf.getvalue()


def xlsx(rows: Sequence[Sequence[Any]], sheet: str = "Sheet1") -> bytes:
    """A minimal .xlsx (numbers and inline strings) that LibreOffice and openpyxl both read."""

    def cell(ref: str, value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, int | float) and not isinstance(value, bool):
            return f'<c r="{ref}"><v>{value}</v></c>'
        return f'<c r="{ref}" t="inlineStr"><is><t>{escape(str(value))}</t></is></c>'

    body = "".join(
        f'<row r="{r}">' + "".join(cell(f"{chr(65 + c)}{r}", v) for c, v in enumerate(row)) + "</row>"
        for r, row in enumerate(rows, start=1)
    )
    ns = 'xmlns="http://schemas.openxmlformats.org/spreadsheetml/2006/main"'
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    package = "application/vnd.openxmlformats"
    sml = f"{package}-officedocument.spreadsheetml"
    parts = {
        "[Content_Types].xml": (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            f'<Default Extension="rels" ContentType="{package}-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            f'<Override PartName="/xl/workbook.xml" ContentType="{sml}.sheet.main+xml"/>'
            f'<Override PartName="/xl/worksheets/sheet1.xml" ContentType="{sml}.worksheet+xml"/></Types>'
        ),
        "_rels/.rels": (
            '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/'
            f'package/2006/relationships"><Relationship Id="rId1" Type="{rel}/officeDocument" '
            'Target="xl/workbook.xml"/></Relationships>'
        ),
        "xl/workbook.xml": (
            f'<?xml version="1.0" encoding="UTF-8"?><workbook {ns} xmlns:r="{rel}"><sheets><sheet '
            f'name="{escape(sheet)}" sheetId="1" r:id="rId1"/></sheets></workbook>'
        ),
        "xl/_rels/workbook.xml.rels": (
            '<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="http://schemas.openxmlformats.org/'
            f'package/2006/relationships"><Relationship Id="rId1" Type="{rel}/worksheet" '
            'Target="worksheets/sheet1.xml"/></Relationships>'
        ),
        "xl/worksheets/sheet1.xml": (
            f'<?xml version="1.0" encoding="UTF-8"?><worksheet {ns}><sheetData>{body}</sheetData></worksheet>'
        ),
    }
    return ooxml(parts)


# --- the tasks ------------------------------------------------------------------------------------

CALC_SUM_ID = "sample-calc-row-sums"
CALC_ITEMS = [("pens", 12, 30), ("paper", 7, 5), ("ink", 40, 2)]
CALC_ROWS: list[list[Any]] = [["item", "q1", "q2", "total"], *([*item, None] for item in CALC_ITEMS)]
FILES: dict[str, Callable[[], bytes]] = {
    f"{BASE}/calc/quarters.xlsx": lambda: xlsx(CALC_ROWS),
    f"{BASE}/calc/quarters_gold.xlsx": lambda: xlsx(
        [CALC_ROWS[0], *([name, q1, q2, q1 + q2] for name, q1, q2 in CALC_ITEMS)]
    ),
}


def step(kind: str, **parameters: Any) -> dict[str, Any]:
    return {"type": kind, "parameters": parameters}


# OSWorld's office tasks save the open document with ctrl+s before they are scored.
SAVE = [
    step("sleep", seconds=0.5),
    step("execute", command=["python", "-c", "import pyautogui; pyautogui.hotkey('ctrl', 's');"]),
    step("sleep", seconds=1.5),
]
TASKS: dict[str, dict[str, Any]] = {
    "libreoffice_calc": {
        "id": CALC_SUM_ID,
        "snapshot": "libreoffice_calc",
        "instruction": "In ~/quarters.xlsx, fill the total column with the sum of q1 and q2 for each item.",
        "source": "the platform's own sample (OSWorld's format)",
        "config": [
            step(
                "download", files=[{"url": f"{BASE}/calc/quarters.xlsx", "path": "/home/user/quarters.xlsx"}]
            ),
            step("open", path="/home/user/quarters.xlsx"),
        ],
        "trajectory": "trajectories/",
        "related_apps": ["libreoffice_calc"],
        "evaluator": {
            "postconfig": [
                step("activate_window", window_name="quarters.xlsx - LibreOffice Calc", strict=True),
                *SAVE,
            ],
            "func": "compare_table",
            "result": {"type": "vm_file", "path": "/home/user/quarters.xlsx", "dest": "quarters.xlsx"},
            "expected": {
                "type": "cloud_file",
                "path": f"{BASE}/calc/quarters_gold.xlsx",
                "dest": "quarters_gold.xlsx",
            },
            "options": {"rules": [{"type": "sheet_data", "sheet_idx0": 0, "sheet_idx1": "EI0"}]},
        },
    },
}


def task_id(domain: str, doc: dict[str, Any]) -> str:
    """The id the importer gives a sample (`osworld/<domain>/<id>`)."""
    return f"osworld/{domain}/{doc['id'].lower()}"


@register_oracle(task_id("libreoffice_calc", TASKS["libreoffice_calc"]))
def calc_row_sums(ctx: OracleContext) -> Iterator[A.Action]:
    """Type a sum formula into each row's total cell, starting from the first one (D2)."""
    calc = wait_window(ctx, "libreoffice", "quarters.xlsx")
    yield from focus(ctx, calc, "quarters.xlsx needs its totals.")
    yield said(ctx, "Calc shows quarters.xlsx; I click into the sheet so that what I type goes to its cells.",
               A.Click(x=int(calc["x"]) + int(calc["width"]) // 2,
                       y=int(calc["y"]) + int(calc["height"]) * 3 // 5))  # fmt: skip
    yield said(
        ctx, "I go to the top-left cell A1 to find my way from there.", A.Hotkey(keys=("ctrl", "home"))
    )
    for key, why in (("right", "B1"), ("right", "C1"), ("right", "D1, the total header"), ("down", "D2")):
        yield said(ctx, f"I move one cell {key} to {why}.", A.Press(key=key))
    for row in range(2, len(CALC_ROWS) + 1):
        yield said(
            ctx,
            f"The total of row {row} is q1 plus q2: I type =B{row}+C{row} and Enter, which moves down a row.",
            A.Type(content=f"=B{row}+C{row}\n"),
        )
    yield said(ctx, "Every total is filled in.", A.Finished(content=""))


def write_tasks(folder: Path) -> list[Path]:
    """The sample task files, as OSWorld lays them out: folder/<domain>/<id>.json."""
    paths = []
    for domain, doc in TASKS.items():
        path = folder / domain / f"{doc['id']}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1))
        paths.append(path)
    return paths


def write_mirror(folder: Path) -> list[Path]:
    """The samples' files in a mirror folder (agent_core.tasks.mirror's layout)."""
    (folder / "by-url").mkdir(parents=True, exist_ok=True)
    paths = []
    for url, make in FILES.items():
        path = folder / "by-url" / url_key(url)
        path.write_bytes(make())
        paths.append(path)
    return paths


# Each application's sample lives in a module of its own; importing it adds its task, files and oracle.
from agent_core.suites.osworld_samples import (  # noqa: E402
    chrome,
    gimp,
    libreoffice_impress,
    libreoffice_writer,
    multi_apps,
    os_terminal,
    thunderbird,
    vlc,
)

APPS = (chrome, gimp, libreoffice_impress, libreoffice_writer, multi_apps, os_terminal, thunderbird, vlc)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m agent_core.suites.osworld_samples", description=__doc__.splitlines()[0]
    )
    p.add_argument("what", choices=("tasks", "mirror"))
    p.add_argument("folder", type=Path)
    args = p.parse_args(argv)
    for path in (write_tasks if args.what == "tasks" else write_mirror)(args.folder):
        print(path)


if __name__ == "__main__":
    main()
