"""The libreoffice_writer sample: add a closing paragraph to a .docx in LibreOffice Writer, scored by
OSWorld's compare_docx_files (the document's paragraphs' text) against a reference .docx."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from xml.sax.saxutils import escape

from agent_core.actions import model as A
from agent_core.suites.osworld_samples import BASE, FILES, SAVE, TASKS, ooxml, step, task_id
from agent_core.tasks.oracles import OracleContext, register_oracle, said


def docx(paragraphs: Sequence[str]) -> bytes:
    """A minimal .docx, one plain paragraph a string, that LibreOffice and python-docx both read."""
    w = "http://schemas.openxmlformats.org/wordprocessingml/2006/main"
    package = "application/vnd.openxmlformats"
    rels = "http://schemas.openxmlformats.org/package/2006/relationships"
    body = "".join(
        f'<w:p><w:r><w:t xml:space="preserve">{escape(text)}</w:t></w:r></w:p>' for text in paragraphs
    )
    parts = {
        "[Content_Types].xml": (
            '<?xml version="1.0" encoding="UTF-8"?>'
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            f'<Default Extension="rels" ContentType="{package}-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            '<Override PartName="/word/document.xml" '
            f'ContentType="{package}-officedocument.wordprocessingml.document.main+xml"/></Types>'
        ),
        "_rels/.rels": (
            f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{rels}"><Relationship Id="rId1" '
            'Type="http://schemas.openxmlformats.org/officeDocument/2006/relationships/officeDocument" '
            'Target="word/document.xml"/></Relationships>'
        ),
        "word/document.xml": (
            f'<?xml version="1.0" encoding="UTF-8"?><w:document xmlns:w="{w}"><w:body>{body}'
            '<w:sectPr><w:pgSz w:w="11906" w:h="16838"/></w:sectPr></w:body></w:document>'
        ),
    }
    return ooxml(parts)


WRITER_ID = "sample-writer-closing-line"
WRITER_PATH = "/home/user/minutes.docx"
WRITER_TEXT = [
    "Team Meeting Minutes",
    "Present: Ana, Bo, Chen and Dara.",
    "The budget for the spring fair was approved.",
    "Bo will book the hall before the end of the month.",
]
WRITER_CLOSING = "Next meeting: Friday at 10 am."
FILES[f"{BASE}/writer/minutes.docx"] = lambda: docx(WRITER_TEXT)
FILES[f"{BASE}/writer/minutes_gold.docx"] = lambda: docx([*WRITER_TEXT, WRITER_CLOSING])

TASKS["libreoffice_writer"] = {
    "id": WRITER_ID,
    "snapshot": "libreoffice_writer",
    "instruction": (
        "Add a new last paragraph to the minutes in ~/minutes.docx that says exactly: " + WRITER_CLOSING
    ),
    "source": "the platform's own sample (OSWorld's format)",
    "config": [
        step("download", files=[{"url": f"{BASE}/writer/minutes.docx", "path": WRITER_PATH}]),
        step("open", path=WRITER_PATH),
    ],
    "trajectory": "trajectories/",
    "related_apps": ["libreoffice_writer"],
    "evaluator": {
        "postconfig": [
            step("activate_window", window_name="minutes.docx - LibreOffice Writer", strict=True),
            *SAVE,
        ],
        "func": "compare_docx_files",
        "result": {"type": "vm_file", "path": WRITER_PATH, "dest": "minutes.docx"},
        "expected": {
            "type": "cloud_file",
            "path": f"{BASE}/writer/minutes_gold.docx",
            "dest": "minutes_gold.docx",
        },
        "options": {},
    },
}


@register_oracle(task_id("libreoffice_writer", TASKS["libreoffice_writer"]))
def writer_closing_line(ctx: OracleContext) -> Iterator[A.Action]:
    """Go to the end of the document, start a new paragraph there and type the closing line."""
    obs = ctx.observation
    width, height = (obs.width, obs.height) if obs is not None else (1920, 1080)
    yield said(
        ctx,
        "Writer shows minutes.docx; I click on its page so that the keys I press go to the document.",
        A.Click(x=width // 2, y=height * 2 // 5),
    )
    yield said(
        ctx,
        "The closing line goes after the last paragraph: ctrl+End puts the cursor at the document's end.",
        A.Hotkey(keys=("ctrl", "end")),
    )
    yield said(
        ctx,
        "The cursor is after '...end of the month.'; Enter starts a new, empty paragraph below it.",
        A.Press(key="enter"),
    )
    yield said(
        ctx,
        f"In the new paragraph I type the line asked for: {WRITER_CLOSING}",
        A.Type(content=WRITER_CLOSING),
    )
    yield said(ctx, "The minutes now end with the new paragraph.", A.Finished(content=""))
