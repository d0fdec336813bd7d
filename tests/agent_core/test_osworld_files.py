"""OSWorld task files many at once: each under one domain, each once, and what cannot be stored refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent_core.tasks.documents import MAX_DEPTH
from agent_core.tasks.osworld import OSWorldImportError, import_osworld_task
from agent_core.tasks.osworld_files import TaskFile, file_domain, import_osworld_files, import_task_files
from tests.agent_core.test_osworld_import import INFEASIBLE, OS_TERMINAL
from tests.agent_core.test_task_documents import nested


@pytest.mark.parametrize(
    ("folder", "given", "snapshot", "domain"),
    [
        ("os", "chrome", "gimp", "os"),  # OSWorld's own layout says it
        ("uploads", "chrome", "gimp", "chrome"),  # else the uploader's choice
        ("uploads", "", "gimp", "gimp"),  # else the file's snapshot
        ("", "", "vscode", "vs_code"),  # in OSWorld's other spelling
        ("", "", "base_setup", ""),  # none: osworld/<id>
    ],
)
def test_a_files_domain_is_its_folders_else_the_one_given_else_its_snapshots(
    folder: str, given: str, snapshot: str, domain: str
) -> None:
    assert file_domain({"snapshot": snapshot}, folder=folder, given=given) == domain


def test_one_file_given_two_domains_is_one_task_and_a_reused_id_with_another_task_is_two() -> None:
    other = {**OS_TERMINAL, "snapshot": "chrome", "instruction": "Another task OSWorld gave the same id."}
    files = [
        TaskFile("a.json", OS_TERMINAL, folder="os"),
        TaskFile("copy-of-a.json", OS_TERMINAL, folder="multi_apps"),
        TaskFile("b.json", other, folder="chrome"),
    ]
    imported, refused = import_task_files(files)
    first = f"osworld/os/{OS_TERMINAL['id']}"
    assert [(name, spec.id) for name, spec in imported] == [
        ("a.json", first),
        ("b.json", f"osworld/chrome/{OS_TERMINAL['id']}"),
    ]
    assert refused == [("copy-of-a.json", f"the same task file as a.json (imported once, as {first})")]


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({**OS_TERMINAL, "instruction": "C\x00"}, f"{OS_TERMINAL['id']}: instruction: may not contain NUL"),
        ({**OS_TERMINAL, "id": "x\x00"}, "OSWorld task: id: may not contain NUL"),
        ({**INFEASIBLE, "source": nested(MAX_DEPTH)}, "source: nests more than 32 levels deep"),
    ],
)
def test_a_document_that_cannot_be_stored_is_refused_naming_the_field(doc: dict, message: str) -> None:
    with pytest.raises(OSWorldImportError, match=message):
        import_osworld_task(doc)


def test_files_that_cannot_be_read_are_refused_naming_the_file_and_field(tmp_path: Path) -> None:
    (tmp_path / "os").mkdir()
    good = tmp_path / "os" / "good.json"
    good.write_text(json.dumps(OS_TERMINAL))
    nul = tmp_path / "os" / "nul.json"
    sleep = {"type": "sleep", "parameters": {"seconds": "\x00"}}
    nul.write_text(json.dumps({**INFEASIBLE, "config": [sleep]}))
    deep = tmp_path / "os" / "deep.json"
    deep.write_bytes(b'{"id": "x", "config": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    imported, refused = import_osworld_files([good, nul, deep])
    assert [s.id for s in imported] == [f"osworld/os/{OS_TERMINAL['id']}"]
    unreadable = "cannot read OSWorld task JSON"
    assert refused == [
        (str(nul), f"{unreadable}: config[0].parameters.seconds: may not contain NUL characters"),
        (str(deep), f"{unreadable}: document: nests more than 32 levels deep"),
    ]
