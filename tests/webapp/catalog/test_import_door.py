# ruff: noqa: E501 (inputs and the messages they get read best one case a line)
"""Every path that stores a task refuses at the door what it cannot store: a 400 naming the file and field,
never a 500, no NUL in any row; one task per OSWorld file whatever its domain; the slug is the spec's id."""

from __future__ import annotations

import copy
import html
import io
import json
from pathlib import Path
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from tests.agent_core.test_osworld_import import CALC_TASK, OS_TERMINAL
from tests.webapp.api.helpers import bearer_client, send, task_body
from webapp.catalog.models import Task, TaskSuite

pytestmark = pytest.mark.django_db

URL = "/tasks/import-osworld/"
DEEP = b"[" * 100_000 + b"]" * 100_000


def upload(client: Client, files: list[tuple[str, Any]], domain: str = "") -> Any:
    """POST the OSWorld upload form with `files` ((name, a document or raw bytes)), as a browser does."""
    sent = [
        SimpleUploadedFile(
            name, doc if isinstance(doc, bytes) else json.dumps(doc).encode(), "application/json"
        )
        for name, doc in files
    ]
    return client.post(reverse("catalog:osworld_upload"), {"files": sent, "domain": domain})


def text_of(response: Any) -> str:
    return html.unescape(response.content.decode())


def assert_no_nul_stored() -> None:
    """No text column of any task or suite holds a NUL, nor any string of a task's spec."""
    for task in Task.objects.all():
        for name in ("slug", "title", "instruction", "platform", "env_profile", "family"):
            assert "\x00" not in getattr(task, name), (task.slug, name)
        assert "\\u0000" not in json.dumps(task.spec) and "\\u0000" not in json.dumps(task.verification)
    for suite in TaskSuite.objects.all():
        assert "\x00" not in suite.slug + suite.name + suite.description


@pytest.fixture
def admin(client_for: Any) -> Client:
    client = client_for("admin")
    client.raise_request_exception = False  # a 500 is an answer to assert on here, not a test error
    return client


def nul_in_config() -> dict[str, Any]:
    doc = copy.deepcopy(OS_TERMINAL)
    doc["config"][0]["parameters"]["command"][2] = "/home/user/\x00Documents"
    return doc


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (
            {**OS_TERMINAL, "instruction": "Copy \x00 every file"},
            "instruction: may not contain NUL characters",
        ),
        ({**OS_TERMINAL, "source": "x\x00"}, "source: may not contain NUL characters"),
        (nul_in_config(), "config[0].parameters.command[2]: may not contain NUL characters"),
        ({**OS_TERMINAL, "k\x00": 1}, "'k\\x00': the key may not contain NUL characters"),
        (b'{"id": "x", "config": ' + DEEP + b"}", "document: nests more than 32 levels deep"),
        (
            b'{"id": "x", "evaluator": {"options": {"n": NaN}}}',
            "document: is not JSON: NaN is not a JSON number",
        ),
        (b'{"id": "x", "instruction": "\xff"}', "document: is not UTF-8 text"),
    ],
    ids=["nul-instruction", "nul-source", "nul-nested", "nul-key", "deep", "nan", "not-utf8"],
)
def test_a_file_that_cannot_be_stored_is_a_400_naming_it_and_its_field_and_nothing_is_imported(
    admin: Client, content: Any, field: str
) -> None:
    response = upload(admin, [("good.json", CALC_TASK), ("bad.json", content)])
    assert response.status_code == 400, response.content[:300]
    assert f"files: 1 of 2 cannot be read, so none was imported: bad.json: {field}" in text_of(response)
    assert not Task.objects.exists()  # the good file is not half-imported beside it
    assert_no_nul_stored()


def test_more_files_than_the_door_takes_is_a_400_naming_the_limit(admin: Client, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_NUMBER_FILES = 5  # the same door as at 500, with a cheaper request
    response = upload(admin, [(f"f{i}.json", OS_TERMINAL) for i in range(6)])
    assert response.status_code == 400
    assert "files: at most 5 may be sent at once" in text_of(response)
    assert not Task.objects.exists()
    assert upload(admin, [(f"f{i}.json", OS_TERMINAL) for i in range(5)]).status_code == 302  # at the limit


def test_the_default_limit_takes_osworlds_largest_domain_at_once(settings: Any) -> None:
    assert settings.DATA_UPLOAD_MAX_NUMBER_FILES == 500


def test_one_file_is_one_task_under_its_own_domain_whatever_domain_the_upload_guesses(
    admin: Client, tmp_path: Path
) -> None:
    for guess in ("", "libreoffice_calc", "chrome"):
        assert upload(admin, [("t.json", OS_TERMINAL)], domain=guess).status_code == 302
    slug = f"osworld/os/{OS_TERMINAL['id']}"  # the snapshot's domain, from the first upload (no guess)
    assert list(Task.objects.values_list("slug", flat=True)) == [slug]
    assert list(Task.objects.get().suites.values_list("slug", flat=True)) == ["osworld-os"]
    page = text_of(admin.get(reverse("catalog:task_list")))
    assert f"t.json is {slug}" in page  # said on the page after the last upload
    # OSWorld's own layout (examples/<domain>/) finds the same task, from any folder.
    (tmp_path / "multi_apps").mkdir()
    (tmp_path / "multi_apps" / "t.json").write_text(json.dumps(OS_TERMINAL))
    out = io.StringIO()
    call_command("tasks_import_osworld", str(tmp_path), stdout=out)
    assert f"imported before as {slug}" in out.getvalue()
    assert Task.objects.count() == 1
    # A file OSWorld gave the same id to in another domain is another task.
    other = {**OS_TERMINAL, "snapshot": "chrome", "instruction": "Reopen the tab I closed last."}
    assert upload(admin, [("o.json", other)]).status_code == 302
    assert sorted(Task.objects.values_list("slug", flat=True)) == [
        f"osworld/chrome/{OS_TERMINAL['id']}",
        slug,
    ]


def test_a_reimport_stores_nothing_a_first_import_would_refuse(admin: Client, tmp_path: Path) -> None:
    folder = tmp_path / "os"
    folder.mkdir()
    path = folder / "t.json"
    path.write_text(json.dumps(OS_TERMINAL))
    call_command("tasks_import_osworld", str(path), stdout=io.StringIO())
    task = Task.objects.get()
    for changed, why in (
        ({**OS_TERMINAL, "instruction": "Copy\x00 them"}, "instruction: may not contain NUL characters"),
        # Not the NUL check: the row's own (a re-import used to write with update(), past Task.clean).
        (
            {**OS_TERMINAL, "instruction": "x" * 20_001},
            "cannot be stored: instruction: instruction may be at most",
        ),
    ):
        path.write_text(json.dumps(changed))
        out = io.StringIO()
        call_command("tasks_import_osworld", str(path), stdout=out)
        assert "imported 0 of 1 task files; refused 1" in out.getvalue()
        assert why in out.getvalue()
        assert Task.objects.get().instruction == task.instruction
    assert_no_nul_stored()
    # The upload's re-import of the same file refuses at the door.
    response = upload(admin, [("t.json", {**OS_TERMINAL, "instruction": "Copy\x00"})], domain="os")
    assert response.status_code == 400 and "t.json: instruction: may not contain NUL" in text_of(response)
    assert_no_nul_stored()


# --- the task API ------------------------------------------------------------------------------------


@pytest.fixture
def researcher(personas: Any) -> Client:
    from webapp.catalog.services import suite_get_or_create

    suite_get_or_create(slug="miniwob", name="MiniWoB++")
    client = bearer_client(personas.researcher)
    client.raise_request_exception = False
    return client


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        # 100,000 deep was a RecursionError in the door itself when the body also held a NUL: a 500.
        (
            '{"slug": "a/b\\u0000", "spec": ' + "[" * 100_000 + "]" * 100_000 + "}",
            "body",
            "nests more than 64",
        ),
        ('{"slug": "a/b", "spec": ' + "[" * 100_000 + "]" * 100_000 + "}", "body", "nests more than 64"),
        (
            json.dumps({**task_body(), "spec": {"deep": json.loads("[" * 70 + "]" * 70)}}),
            "spec",
            "nests more",
        ),
        # NaN in a spec was stored where the column takes it, else a 500 (SQLite's JSON_VALID, jsonb).
        (
            json.dumps(task_body(spec={**task_body()["spec"], "origin": {"n": 0.5}})).replace("0.5", "NaN"),
            "spec.origin.n",
            "finite number",
        ),
    ],
    ids=["deep-with-nul", "deep", "deep-spec", "nan"],
)
def test_the_api_refuses_deep_or_not_finite_json_naming_the_field(
    researcher: Client, body: str, field: str, message: str
) -> None:
    response = send(researcher, "POST", "/tasks", body)
    assert response.status_code == 400, response.content[:300]
    errors = response.json()["errors"]
    assert errors[0]["field"] == field and message in errors[0]["message"]
    assert not Task.objects.exists()


def test_a_spec_deeper_than_a_task_may_nest_is_a_400_on_create_and_update(researcher: Client) -> None:
    deep = {**task_body()["spec"], "origin": {"x": json.loads("[" * 40 + "]" * 40)}}
    response = send(researcher, "POST", "/tasks", task_body(spec=deep))
    assert (
        response.status_code == 400 and "origin: nests more than 32 levels deep" in response.json()["detail"]
    )
    task = send(researcher, "POST", "/tasks", task_body()).json()
    response = send(researcher, "PATCH", f"/tasks/{task['id']}", {"spec": deep})
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "spec"


def test_slug_and_spec_id_must_agree_on_create_and_update(researcher: Client) -> None:
    body = {**task_body(), "slug": "miniwob/other"}  # the spec still says miniwob/enter-text
    response = send(researcher, "POST", "/tasks", body)
    assert response.status_code == 400
    assert response.json()["errors"] == [
        {
            "field": "spec",
            "message": "the spec's id 'miniwob/enter-text' and the slug 'miniwob/other' must agree",
        }
    ]
    assert not Task.objects.exists()
    created = send(researcher, "POST", "/tasks", task_body())
    assert created.status_code == 201
    other = {**task_body()["spec"], "id": "miniwob/other", "title": "Renamed"}
    response = send(researcher, "PATCH", f"/tasks/{created.json()['id']}", {"spec": other})
    assert response.status_code == 400 and response.json()["errors"][0]["field"] == "spec"
    assert Task.objects.get().spec["id"] == "miniwob/enter-text"


def test_an_uploaded_task_downloading_from_loopback_is_refused_with_its_reason(admin: Client) -> None:
    # The check is agent_core.tasks.public_urls' (the importer calls it); here, through the upload.
    doc = copy.deepcopy(CALC_TASK)
    doc["config"][0]["parameters"]["files"][0]["url"] = "http://127.0.0.1:8000/admin/"
    assert upload(admin, [("calc.json", doc)], domain="libreoffice_calc").status_code == 302
    page = text_of(admin.get(reverse("catalog:task_list")))
    assert "Imported 0 of 1 OSWorld task files" in page
    assert (
        "calc.json: OSWorld task 0bf05a7d-b28b-44d2-955a-50b41e24012a: config[0] (download) files[0]" in page
    )
    assert "127.0.0.1 is a loopback address" in page
    assert not Task.objects.exists()
