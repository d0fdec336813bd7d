"""The libreoffice_impress sample: correct a slide's title in LibreOffice Impress, scored by OSWorld's
compare_pptx_files (slides, shapes, text and its formatting) against a reference .pptx."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from xml.sax.saxutils import escape

from agent_core.actions import model as A
from agent_core.suites.osworld_samples import BASE, FILES, SAVE, TASKS, ooxml, step, task_id
from agent_core.tasks.oracles import OracleContext, register_oracle, said

_P = "http://schemas.openxmlformats.org/presentationml/2006/main"
_A = "http://schemas.openxmlformats.org/drawingml/2006/main"
_R = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_NS = f'xmlns:a="{_A}" xmlns:r="{_R}" xmlns:p="{_P}"'
_PKG = "http://schemas.openxmlformats.org/package/2006/relationships"
_PML = "application/vnd.openxmlformats-officedocument.presentationml"
# 16:9 slides. LibreOffice writes lengths back in 1/100 mm (360 EMU), at most one off: well within
# compare_pptx_files' 0.5 % tolerance.
_SLIDE = (12192000, 6858000)
# LibreOffice shows Arial as Liberation Sans but writes it back as Arial (and Liberation Sans as Arial too).
_FONT = "Arial"
# (placeholder type, name, x, y, cx, cy, point size, bold): a slide's title and its body text.
_SHAPES = (
    ("title", "Title 1", 720000, 360000, 10752120, 1260000, 40, True),
    ("body", "Content 2", 720000, 1800000, 10752120, 4320000, 24, False),
)


def _rels(*targets: tuple[str, str]) -> str:
    items = "".join(
        f'<Relationship Id="rId{i}" Type="{_R}/{kind}" Target="{target}"/>'
        for i, (kind, target) in enumerate(targets, start=1)
    )
    return f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{_PKG}">{items}</Relationships>'


def _shape(shape_id: int, spec: tuple[str, str, int, int, int, int, int, bool], lines: Sequence[str]) -> str:
    kind, name, x, y, cx, cy, size, bold = spec
    index = "" if kind == "title" else ' idx="1"'
    run = f'<a:rPr lang="en-US" sz="{size * 100}" b="{int(bold)}">'
    run += f'<a:solidFill><a:srgbClr val="1F3864"/></a:solidFill><a:latin typeface="{_FONT}"/></a:rPr>'
    paragraphs = "".join(
        f'<a:p><a:pPr indent="0"><a:buNone/></a:pPr><a:r>{run}<a:t>{escape(line)}</a:t></a:r></a:p>'
        for line in lines
    )
    return (
        f'<p:sp><p:nvSpPr><p:cNvPr id="{shape_id}" name="{name}"/><p:cNvSpPr><a:spLocks noGrp="1"/>'
        f'</p:cNvSpPr><p:nvPr><p:ph type="{kind}"{index}/></p:nvPr></p:nvSpPr>'
        f'<p:spPr><a:xfrm><a:off x="{x}" y="{y}"/><a:ext cx="{cx}" cy="{cy}"/></a:xfrm></p:spPr>'
        f"<p:txBody><a:bodyPr/><a:lstStyle/>{paragraphs}</p:txBody></p:sp>"
    )


def _tree(shapes: str) -> str:
    return (
        '<p:cSld><p:spTree><p:nvGrpSpPr><p:cNvPr id="1" name=""/><p:cNvGrpSpPr/><p:nvPr/></p:nvGrpSpPr>'
        '<p:grpSpPr><a:xfrm><a:off x="0" y="0"/><a:ext cx="0" cy="0"/><a:chOff x="0" y="0"/>'
        f'<a:chExt cx="0" cy="0"/></a:xfrm></p:grpSpPr>{shapes}</p:spTree></p:cSld>'
    )


def _theme() -> str:
    colors = (
        ("dk1", "000000"), ("lt1", "FFFFFF"), ("dk2", "1F3864"), ("lt2", "E7E6E6"), ("accent1", "4472C4"),
        ("accent2", "ED7D31"), ("accent3", "A5A5A5"), ("accent4", "FFC000"), ("accent5", "5B9BD5"),
        ("accent6", "70AD47"), ("hlink", "0563C1"), ("folHlink", "954F72"),
    )  # fmt: skip
    scheme = "".join(f'<a:{n}><a:srgbClr val="{v}"/></a:{n}>' for n, v in colors)
    fonts = f'<a:latin typeface="{_FONT}"/><a:ea typeface=""/><a:cs typeface=""/>'
    fill = '<a:solidFill><a:schemeClr val="phClr"/></a:solidFill>'
    line = f'<a:ln w="6350">{fill}</a:ln>'
    return (
        f'<?xml version="1.0" encoding="UTF-8"?><a:theme xmlns:a="{_A}" name="Sample"><a:themeElements>'
        f'<a:clrScheme name="Sample">{scheme}</a:clrScheme><a:fontScheme name="Sample">'
        f"<a:majorFont>{fonts}</a:majorFont><a:minorFont>{fonts}</a:minorFont></a:fontScheme>"
        f'<a:fmtScheme name="Sample"><a:fillStyleLst>{fill * 3}</a:fillStyleLst>'
        f"<a:lnStyleLst>{line * 3}</a:lnStyleLst><a:effectStyleLst>"
        f"{'<a:effectStyle><a:effectLst/></a:effectStyle>' * 3}</a:effectStyleLst>"
        f"<a:bgFillStyleLst>{fill * 3}</a:bgFillStyleLst></a:fmtScheme></a:themeElements></a:theme>"
    )


def pptx(slides: Sequence[Sequence[Sequence[str]]]) -> bytes:
    """A minimal .pptx, each slide a title and a body (each a list of lines), that LibreOffice and
    python-pptx both read; every run's font, size, weight and colour is explicit, as LibreOffice
    writes them back."""
    n = len(slides)
    overrides = [
        ("/ppt/presentation.xml", f"{_PML}.presentation.main+xml"),
        ("/ppt/slideMasters/slideMaster1.xml", f"{_PML}.slideMaster+xml"),
        ("/ppt/slideLayouts/slideLayout1.xml", f"{_PML}.slideLayout+xml"),
        ("/ppt/theme/theme1.xml", "application/vnd.openxmlformats-officedocument.theme+xml"),
        *((f"/ppt/slides/slide{i}.xml", f"{_PML}.slide+xml") for i in range(1, n + 1)),
    ]
    cmap = (
        '<p:clrMap bg1="lt1" tx1="dk1" bg2="lt2" tx2="dk2" accent1="accent1" accent2="accent2" '
        'accent3="accent3" accent4="accent4" accent5="accent5" accent6="accent6" hlink="hlink" '
        'folHlink="folHlink"/>'
    )
    xml = '<?xml version="1.0" encoding="UTF-8"?>'
    parts = {
        "[Content_Types].xml": (
            f'{xml}<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" '
            'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
            '<Default Extension="xml" ContentType="application/xml"/>'
            + "".join(f'<Override PartName="{p}" ContentType="{t}"/>' for p, t in overrides)
            + "</Types>"
        ),
        "_rels/.rels": _rels(("officeDocument", "ppt/presentation.xml")),
        "ppt/presentation.xml": (
            f'{xml}<p:presentation {_NS}><p:sldMasterIdLst><p:sldMasterId id="2147483648" r:id="rId1"/>'
            "</p:sldMasterIdLst><p:sldIdLst>"
            + "".join(f'<p:sldId id="{255 + i}" r:id="rId{i + 2}"/>' for i in range(1, n + 1))
            + f'</p:sldIdLst><p:sldSz cx="{_SLIDE[0]}" cy="{_SLIDE[1]}"/>'
            '<p:notesSz cx="6858000" cy="9144000"/></p:presentation>'
        ),
        "ppt/_rels/presentation.xml.rels": _rels(
            ("slideMaster", "slideMasters/slideMaster1.xml"),
            ("theme", "theme/theme1.xml"),
            *(("slide", f"slides/slide{i}.xml") for i in range(1, n + 1)),
        ),
        "ppt/slideMasters/slideMaster1.xml": (
            f"{xml}<p:sldMaster {_NS}>{_tree('')}{cmap}<p:sldLayoutIdLst>"
            '<p:sldLayoutId id="2147483649" r:id="rId1"/></p:sldLayoutIdLst></p:sldMaster>'
        ),
        "ppt/slideMasters/_rels/slideMaster1.xml.rels": _rels(
            ("slideLayout", "../slideLayouts/slideLayout1.xml"), ("theme", "../theme/theme1.xml")
        ),
        "ppt/slideLayouts/slideLayout1.xml": (
            f'{xml}<p:sldLayout {_NS} type="obj">{_tree("")}<p:clrMapOvr><a:masterClrMapping/>'
            "</p:clrMapOvr></p:sldLayout>"
        ),
        "ppt/slideLayouts/_rels/slideLayout1.xml.rels": _rels(
            ("slideMaster", "../slideMasters/slideMaster1.xml")
        ),
        "ppt/theme/theme1.xml": _theme(),
    }
    for i, (title, body) in enumerate(slides, start=1):
        shapes = _shape(2, _SHAPES[0], title) + _shape(3, _SHAPES[1], body)
        parts[f"ppt/slides/slide{i}.xml"] = (
            f"{xml}<p:sld {_NS}>{_tree(shapes)}<p:clrMapOvr><a:masterClrMapping/></p:clrMapOvr></p:sld>"
        )
        parts[f"ppt/slides/_rels/slide{i}.xml.rels"] = _rels(
            ("slideLayout", "../slideLayouts/slideLayout1.xml")
        )
    return ooxml(parts)


IMPRESS_ID = "sample-impress-fix-title"
IMPRESS_PATH = "/home/user/launch.pptx"
IMPRESS_TITLE = "Next Steps"
IMPRESS_SLIDES = [
    (["Product Launch"], ["Spring plan for the new bike lights"]),
    (["Nxet Setps"], ["Order the first batch", "Brief the shops", "Start the ads in April"]),
]
FILES[f"{BASE}/impress/launch.pptx"] = lambda: pptx(IMPRESS_SLIDES)
FILES[f"{BASE}/impress/launch_gold.pptx"] = lambda: pptx(
    [IMPRESS_SLIDES[0], ([IMPRESS_TITLE], IMPRESS_SLIDES[1][1])]
)

TASKS["libreoffice_impress"] = {
    "id": IMPRESS_ID,
    "snapshot": "libreoffice_impress",
    "instruction": f"The title of slide 2 in ~/launch.pptx is misspelt: change it to '{IMPRESS_TITLE}'.",
    "source": "the platform's own sample (OSWorld's format)",
    "config": [
        step("download", files=[{"url": f"{BASE}/impress/launch.pptx", "path": IMPRESS_PATH}]),
        step("open", path=IMPRESS_PATH),
    ],
    "trajectory": "trajectories/",
    "related_apps": ["libreoffice_impress"],
    "evaluator": {
        "postconfig": [
            step("activate_window", window_name="launch.pptx - LibreOffice Impress", strict=True),
            *SAVE,
        ],
        "func": "compare_pptx_files",
        "result": {"type": "vm_file", "path": IMPRESS_PATH, "dest": "launch.pptx"},
        "expected": {
            "type": "cloud_file",
            "path": f"{BASE}/impress/launch_gold.pptx",
            "dest": "launch_gold.pptx",
        },
        "options": {},
    },
}


@register_oracle(task_id("libreoffice_impress", TASKS["libreoffice_impress"]))
def impress_fix_title(ctx: OracleContext) -> Iterator[A.Action]:
    """Go to slide 2, select its title box with Tab, edit it and replace its text."""
    obs = ctx.observation
    width, height = (obs.width, obs.height) if obs is not None else (1920, 1080)
    yield said(
        ctx,
        "Impress shows slide 1 of launch.pptx. I click the grey area below the slide, where nothing is, "
        "so that the keys I press go to the slide view with no object selected.",
        A.Click(x=width * 45 // 100, y=height * 92 // 100),
    )
    yield said(
        ctx,
        "The misspelt title 'Nxet Setps' is on slide 2: Page Down goes to the next slide.",
        A.Press(key="pagedown"),
    )
    yield said(ctx, "Impress is drawing slide 2; I give it a moment.", A.Wait(seconds=1.5))
    yield said(ctx, "Slide 2 is shown; Tab selects its first object, the title box.", A.Press(key="tab"))
    yield said(
        ctx, "Impress marks the title box and updates its sidebar; I give it time.", A.Wait(seconds=2.0)
    )
    yield said(ctx, "The title box is selected; Enter starts editing its text.", A.Press(key="enter"))
    yield said(
        ctx,
        "Impress switches to editing the title's text a moment after the key; I wait for it, "
        "else the next keys would act on the slide's objects instead of the text.",
        A.Wait(seconds=3.0),
    )
    yield said(
        ctx,
        "I am editing the title; ctrl+a selects all of its text, so that what I type replaces it.",
        A.Hotkey(keys=("ctrl", "a")),
    )
    yield said(
        ctx,
        f"'Nxet Setps' is selected; I type the right title, {IMPRESS_TITLE}.",
        A.Type(content=IMPRESS_TITLE),
    )
    yield said(ctx, f"The title reads {IMPRESS_TITLE}; Escape ends editing the text.", A.Press(key="escape"))
    yield said(ctx, "Slide 2's title is corrected.", A.Finished(content=""))
