"""`manage.py tasks_import_osworld`: OSWorld task files into suites osworld-<domain>, every refusal listed."""

from __future__ import annotations

import html
import io
import json
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from tests.agent_core.test_osworld_import import CALC_TASK, INFEASIBLE, OS_TERMINAL
from webapp.catalog.models import Task, TaskSuite

pytestmark = pytest.mark.django_db


def write(folder: Path, doc: dict, name: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name or doc['id']}.json"
    path.write_text(json.dumps(doc))
    return path


def test_a_folder_is_imported_into_suites_per_domain_and_refusals_are_listed(tmp_path: Path) -> None:
    examples = tmp_path / "examples"
    write(examples / "os", OS_TERMINAL)
    write(examples / "libreoffice_calc", CALC_TASK)
    write(examples / "os", INFEASIBLE)
    vscode = {**OS_TERMINAL, "id": "vs1", "config": [{"type": "launch", "parameters": {"command": ["code"]}}]}
    write(examples / "vs_code", vscode)
    out = io.StringIO()
    call_command("tasks_import_osworld", str(examples), stdout=out)
    text = out.getvalue()
    assert "imported 3 of 4 task files; refused 1:" in text
    assert "VS Code is not packaged for Debian" in text
    assert set(TaskSuite.objects.values_list("slug", flat=True)) >= {"osworld-os", "osworld-libreoffice_calc"}
    calc = Task.objects.get(slug="osworld/libreoffice_calc/0bf05a7d-b28b-44d2-955a-50b41e24012a")
    # Unpublished until a proof scores 1 (and doing nothing 0); the task file is kept as given.
    assert not calc.is_published
    assert calc.env_profile == "office"
    assert calc.spec["origin"]["osworld"] == CALC_TASK
    assert list(calc.suites.values_list("slug", flat=True)) == ["osworld-libreoffice_calc"]

    # Again: nothing new, nothing changed.
    out = io.StringIO()
    call_command("tasks_import_osworld", str(examples), stdout=out)
    assert "suite osworld-os: 0 new, 0 changed" in out.getvalue()


def test_a_missing_path_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CommandError, match="no such file or folder"):
        call_command("tasks_import_osworld", str(tmp_path / "nope"))
    with pytest.raises(CommandError, match="no .json task files"):
        call_command("tasks_import_osworld", str(tmp_path))


def test_admins_import_from_the_tasks_page_and_others_cannot(client_for) -> None:
    from django.core.files.uploadedfile import SimpleUploadedFile
    from django.urls import reverse

    url = reverse("catalog:osworld_upload")
    vscode = {**OS_TERMINAL, "id": "vs2", "config": [{"type": "launch", "parameters": {"command": ["code"]}}]}

    def files() -> list[SimpleUploadedFile]:
        return [
            SimpleUploadedFile("calc.json", json.dumps(CALC_TASK).encode(), "application/json"),
            SimpleUploadedFile("vs.json", json.dumps(vscode).encode(), "application/json"),
        ]

    admin = client_for("admin")
    page = admin.get(reverse("catalog:task_list"))
    assert b'data-testid="osworld-import"' in page.content
    answer = admin.post(url, {"files": files(), "domain": "libreoffice_calc"}, follow=True)
    text = html.unescape(answer.content.decode())
    assert "Imported 1 of 2 OSWorld task files (1 new, 0 changed)." in text
    assert "vs.json: OSWorld task vs2: config[0] (launch): VS Code is not packaged" in text
    task = Task.objects.get(slug="osworld/libreoffice_calc/0bf05a7d-b28b-44d2-955a-50b41e24012a")
    assert "osworld-libreoffice_calc" in task.suites.values_list("slug", flat=True)
    # Refused at the door, naming the field: nothing imported (tests/webapp/catalog: every such input).
    assert admin.post(url, {"domain": "libreoffice_calc"}).status_code == 400
    bad = admin.post(url, {"files": files(), "domain": "excel"})
    assert bad.status_code == 400 and "domain: 'excel'" in html.unescape(bad.content.decode())
    broken = [*files(), SimpleUploadedFile("broken.json", b"{not json", "application/json")]
    bad = admin.post(url, {"files": broken})
    assert bad.status_code == 400
    assert "broken.json: document: is not JSON" in html.unescape(bad.content.decode())
    # Researchers may add tasks but not suites: no import; annotators neither.
    for persona in ("researcher", "annotator"):
        client = client_for(persona)
        assert b'data-testid="osworld-import"' not in client.get(reverse("catalog:task_list")).content
        assert client.post(url, {"files": files()}).status_code == 403
