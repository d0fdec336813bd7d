"""OSWorld's task files, read and imported many at a time: each file once, under one domain.

A file's domain (the `<domain>` of OSWorld's `evaluation_examples/examples/<domain>/<id>.json`) is part
of its task id, because OSWorld reuses an id across domains for different tasks (chrome/06fe7178… is
not thunderbird/06fe7178…). The domain is, first found: the folder the file sits in, when that names a
domain; the domain the caller gives (the upload form's choice); the domain the file's own `snapshot`
names; else none (`osworld/<id>`, the suite osworld-other). Two files that are the same document are
one task whatever domain each got: the second is refused as a duplicate of the first (the catalog, which
knows what was imported before, maps a file it already holds under another domain onto that task:
webapp.catalog.services.osworld_import).

A file is read as UTF-8 JSON with agent_core.tasks.documents' limits (no NUL, no NaN, 32 levels at
most), so what cannot be stored is refused naming the file and the field.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agent_core.tasks.documents import DocumentError, loads_document
from agent_core.tasks.osworld import import_osworld_task
from agent_core.tasks.osworld_tables import DOMAINS
from agent_core.tasks.spec import TaskSpec, TaskSpecError

__all__ = [
    "TaskFile",
    "file_domain",
    "import_osworld_files",
    "import_task_files",
    "read_task_file",
    "read_task_files",
]

# A snapshot that names a domain in another spelling (OSWorld's vs_code tasks say "vscode").
SNAPSHOT_DOMAINS = {**{d: d for d in DOMAINS}, "vscode": "vs_code", "multiapps": "multi_apps"}


@dataclass(frozen=True)
class TaskFile:
    """One OSWorld task file, read: what messages call it, its document and the folder it sat in."""

    name: str
    doc: Any
    folder: str = ""


def read_task_file(path: str | Path) -> Any:
    """The document of an OSWorld task file; DocumentError naming the field (or `document`) otherwise."""
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise DocumentError("document", f"cannot be read: {exc.strerror or exc}") from None
    return loads_document(data)


def file_domain(doc: Any, *, folder: str = "", given: str = "") -> str:
    """The OSWorld domain of a task file: its folder's, else `given`, else its snapshot's; "" for none."""
    if folder in DOMAINS:
        return folder
    if given:
        return given
    snapshot = doc.get("snapshot") if isinstance(doc, Mapping) else None
    return SNAPSHOT_DOMAINS.get(snapshot, "") if isinstance(snapshot, str) else ""


def import_task_files(
    files: Iterable[TaskFile], *, domain: str = "", id_prefix: str = "osworld"
) -> tuple[list[tuple[str, TaskSpec]], list[tuple[str, str]]]:
    """Import read task files: ([(file name, spec)], [(file name, reason)] for each one refused). A file's
    id is `<id_prefix>/<domain>/<id>` (see `file_domain`; `domain` is the caller's choice)."""
    imported: list[tuple[str, TaskSpec]] = []
    refused: list[tuple[str, str]] = []
    by_id: dict[str, str] = {}
    by_doc: dict[str, tuple[str, str]] = {}
    for file in files:
        where = file_domain(file.doc, folder=file.folder, given=domain)
        try:
            spec = import_osworld_task(file.doc, id_prefix=f"{id_prefix}/{where}" if where else id_prefix)
        except TaskSpecError as exc:
            refused.append((file.name, str(exc)))
            continue
        same = json.dumps(file.doc, sort_keys=True)
        if same in by_doc:
            first, first_id = by_doc[same]
            refused.append((file.name, f"the same task file as {first} (imported once, as {first_id})"))
            continue
        if spec.id in by_id:
            refused.append((file.name, f"duplicate task id {spec.id} (also {by_id[spec.id]})"))
            continue
        by_id[spec.id] = file.name
        by_doc[same] = (file.name, spec.id)
        imported.append((file.name, spec))
    return imported, refused


def read_task_files(paths: Iterable[str | Path]) -> tuple[list[TaskFile], list[tuple[str, str]]]:
    """Read OSWorld task files: (those read, (path, reason) for each that cannot be). A file in OSWorld's
    Windows folder is marked a Windows task (which the importer refuses), whatever it says of itself."""
    files: list[TaskFile] = []
    refused: list[tuple[str, str]] = []
    for path in paths:
        p = Path(path)
        try:
            doc = read_task_file(p)
        except DocumentError as exc:
            refused.append((str(p), f"cannot read OSWorld task JSON: {exc}"))
            continue
        if "Windows" in p.parts and isinstance(doc, Mapping):
            doc = {**doc, "related_apps": [*doc.get("related_apps", []), "windows"]}
        files.append(TaskFile(name=str(p), doc=doc, folder=p.parent.name))
    return files, refused


def import_osworld_files(
    paths: Iterable[str | Path], *, id_prefix: str = "osworld", domain: str = ""
) -> tuple[list[TaskSpec], list[tuple[str, str]]]:
    """Import OSWorld task files: (the imported specs, (path, reason) of each file skipped, in the order
    given). A file in a folder named after an OSWorld domain (`DOMAINS`) gets `<id_prefix>/<domain>/<id>`."""
    listed = [str(Path(path)) for path in paths]
    files, unread = read_task_files(listed)
    imported, refused = import_task_files(files, domain=domain, id_prefix=id_prefix)
    order = {name: i for i, name in enumerate(listed)}
    return [spec for _, spec in imported], sorted(unread + refused, key=lambda r: order[r[0]])
