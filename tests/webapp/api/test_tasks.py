"""Tasks: listing with filters, reading, creating and editing, and the 400s for bad input."""

from __future__ import annotations

import pytest

from tests.webapp.api.helpers import send, task_body
from webapp.catalog.models import Task

pytestmark = pytest.mark.django_db


@pytest.fixture
def researcher(world, token_client_for):
    return token_client_for("researcher")


def slugs(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [t["slug"] for t in response.json()["items"]]


# --- reading --------------------------------------------------------------------------------------


def test_task_list_returns_count_and_items_by_slug(researcher):
    body = send(researcher, "GET", "/tasks").json()
    assert body["count"] == 2
    assert [t["slug"] for t in body["items"]] == ["desktop/open-terminal", "miniwob/click-button"]


def test_task_list_filters_by_text_platform_suite_and_published(researcher, world):
    Task.objects.filter(pk=world.other_task.pk).update(is_published=True)
    assert slugs(send(researcher, "GET", "/tasks?q=terminal")) == ["desktop/open-terminal"]
    assert slugs(send(researcher, "GET", "/tasks?platform=browser")) == ["miniwob/click-button"]
    assert slugs(send(researcher, "GET", "/tasks?suite=miniwob")) == ["miniwob/click-button"]
    assert slugs(send(researcher, "GET", "/tasks?published=true")) == ["desktop/open-terminal"]
    assert slugs(send(researcher, "GET", "/tasks?published=false")) == ["miniwob/click-button"]
    assert slugs(send(researcher, "GET", "/tasks?suite=no-such-suite")) == []


def test_task_detail_shows_the_task_with_its_suites(researcher, world):
    response = send(researcher, "GET", f"/tasks/{world.task.pk}")
    assert response.status_code == 200
    task = response.json()
    assert task["slug"] == "miniwob/click-button"
    assert task["suites"] == ["miniwob"]
    assert task["platform"] == "browser"
    assert task["is_published"] is False
    assert task["success_rate"] is None


def test_unknown_task_gets_404_naming_it(researcher):
    response = send(researcher, "GET", "/tasks/999999")
    assert response.status_code == 404
    assert response.json() == {"detail": "no task with id 999999"}


# --- creating -------------------------------------------------------------------------------------


def test_researcher_creates_an_unpublished_task_in_its_suites(researcher, personas):
    response = send(researcher, "POST", "/tasks", task_body())
    assert response.status_code == 201, response.content
    created = response.json()
    assert created["slug"] == "miniwob/enter-text"
    assert created["suites"] == ["miniwob"]
    assert created["is_published"] is False
    task = Task.objects.get(pk=created["id"])
    assert task.created_by == personas.researcher
    assert task.spec == task_body()["spec"]
    assert (task.max_steps, task.max_seconds) == (10, 120)


def test_created_task_takes_default_limits_when_left_out(researcher):
    body = task_body()
    del body["max_steps"], body["max_seconds"], body["spec"], body["suites"]
    created = send(researcher, "POST", "/tasks", body).json()
    assert (created["max_steps"], created["max_seconds"], created["spec"], created["suites"]) == (
        15,
        300,
        {},
        [],
    )


def assert_400(response, *fields: str) -> str:
    """The response is a 400 whose errors name exactly `fields`; returns the detail."""
    assert response.status_code == 400, response.content
    body = response.json()
    assert body["detail"].startswith("invalid request: ")
    assert sorted({e["field"] for e in body["errors"]}) == sorted(fields)
    return body["detail"]


def assert_no_task_written() -> None:
    assert Task.objects.count() == 2  # the world's two tasks


def test_unknown_suite_gets_400_and_no_task_is_written(researcher):
    detail = assert_400(send(researcher, "POST", "/tasks", task_body(suites=["miniwob", "nope"])), "suites")
    assert "unknown suite(s): nope" in detail
    assert_no_task_written()


def test_duplicate_slug_gets_400_not_500(researcher):
    detail = assert_400(send(researcher, "POST", "/tasks", task_body(slug="miniwob/click-button")), "slug")
    assert "already exists" in detail
    assert_no_task_written()


def test_slug_in_the_wrong_shape_gets_400_explaining_the_shape(researcher):
    # One error, the slug's (its spec's id cannot agree with a slug of the wrong shape: not said twice).
    body = task_body(slug="Bad Slug!", spec=task_body()["spec"])
    detail = assert_400(send(researcher, "POST", "/tasks", body), "slug")
    assert "lowercase" in detail
    assert_no_task_written()


def test_missing_fields_are_each_named(researcher):
    body = task_body()
    del body["title"], body["platform"]
    detail = assert_400(send(researcher, "POST", "/tasks", body), "title", "platform")
    assert "title: Field required" in detail
    assert_no_task_written()


def test_wrong_types_are_each_named(researcher):
    detail = assert_400(
        send(researcher, "POST", "/tasks", task_body(max_steps="many", title=5, spec=[1, 2])),
        "max_steps",
        "title",
        "spec",
    )
    assert "max_steps: Input should be a valid integer" in detail
    assert_no_task_written()


def test_unknown_platform_gets_400_listing_the_valid_ones(researcher):
    detail = assert_400(send(researcher, "POST", "/tasks", task_body(platform="windows")), "platform")
    assert "'desktop', 'browser' or 'android'" in detail
    assert_no_task_written()


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("max_steps", 0, "greater than or equal to 1"),
        ("max_steps", 1001, "less than or equal to 1000"),
        ("max_seconds", 0, "greater than or equal to 1"),
        ("max_seconds", 86401, "less than or equal to 86400"),
    ],
)
def test_out_of_range_limits_get_400(researcher, field, value, message):
    detail = assert_400(send(researcher, "POST", "/tasks", task_body(**{field: value})), field)
    assert message in detail
    assert_no_task_written()


def test_unknown_field_gets_400_rather_than_being_ignored(researcher):
    detail = assert_400(send(researcher, "POST", "/tasks", task_body(is_published=True)), "is_published")
    assert "Extra inputs are not permitted" in detail
    assert_no_task_written()


@pytest.mark.parametrize("raw", ['{"slug": "x", ', "not json at all", "\x00\xff"])
def test_malformed_json_body_gets_400(researcher, raw):
    response = send(researcher, "POST", "/tasks", raw)
    assert response.status_code == 400
    assert response.json() == {"detail": "Cannot parse request body"}
    assert_no_task_written()


def test_json_body_that_is_not_an_object_gets_400(researcher):
    response = send(researcher, "POST", "/tasks", "[1, 2, 3]")
    assert response.status_code == 400
    assert response.json()["detail"].startswith("invalid request: ")
    assert_no_task_written()


def test_empty_body_gets_400(researcher):
    response = researcher.post("/api/v1/tasks", content_type="application/json")
    assert response.status_code == 400
    assert "Field required" in response.json()["detail"]
    assert_no_task_written()


# --- editing --------------------------------------------------------------------------------------


def test_patch_changes_only_the_fields_sent(researcher, world):
    spec = {**task_body()["spec"], "id": "miniwob/click-button", "version": 2}
    changes = {"title": "Press OK", "max_steps": 30, "spec": spec}
    response = send(researcher, "PATCH", f"/tasks/{world.task.pk}", changes)
    assert response.status_code == 200, response.content
    assert response.json()["title"] == "Press OK"
    world.task.refresh_from_db()
    assert (world.task.title, world.task.max_steps, world.task.spec) == ("Press OK", 30, spec)
    assert world.task.instruction == "Click the OK button."
    assert world.task.max_seconds == 300


def test_changing_a_published_tasks_spec_unpublishes_it(researcher, world):
    Task.objects.filter(pk=world.task.pk).update(is_published=True)
    assert send(researcher, "PATCH", f"/tasks/{world.task.pk}", {"title": "Renamed"}).json()["is_published"]
    spec = {**task_body()["spec"], "id": world.task.slug}
    response = send(researcher, "PATCH", f"/tasks/{world.task.pk}", {"spec": spec})
    assert response.status_code == 200 and response.json()["is_published"] is False
    world.task.refresh_from_db()
    assert world.task.is_published is False


def test_empty_patch_changes_nothing(researcher, world):
    response = send(researcher, "PATCH", f"/tasks/{world.task.pk}", {})
    assert response.status_code == 200
    assert response.json()["title"] == "Click the button"


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({"max_steps": 0}, "max_steps", "greater than or equal to 1"),
        ({"max_seconds": "soon"}, "max_seconds", "valid integer"),
        ({"title": None}, "title", "may not be null"),
        ({"title": ""}, "title", "at least 1 character"),
        ({"slug": "renamed"}, "slug", "Extra inputs are not permitted"),
        ({"spec": "not an object"}, "spec", "valid dictionary"),
    ],
)
def test_bad_patch_gets_400_and_changes_nothing(researcher, world, body, field, message):
    detail = assert_400(send(researcher, "PATCH", f"/tasks/{world.task.pk}", body), field)
    assert message in detail
    world.task.refresh_from_db()
    assert (world.task.slug, world.task.title, world.task.max_steps) == (
        "miniwob/click-button",
        "Click the button",
        15,
    )


def test_patch_of_unknown_task_gets_404(researcher):
    response = send(researcher, "PATCH", "/tasks/999999", {"title": "x"})
    assert response.status_code == 404


def test_slug_taken_between_validation_and_insert_gets_400_not_integrity_error(researcher, monkeypatch):
    """Two scripts racing for one slug: the loser's full_clean passed, its INSERT hits the constraint."""
    monkeypatch.setattr(Task, "validate_unique", lambda self, exclude=None: None)
    detail = assert_400(send(researcher, "POST", "/tasks", task_body(slug="miniwob/click-button")), "slug")
    assert "a task with slug 'miniwob/click-button' already exists" in detail
    assert_no_task_written()
    # The request's transaction is still usable after the failed insert.
    assert send(researcher, "POST", "/tasks", task_body()).status_code == 201


# --- the task document is checked when it is stored, not at rollout --------------------------------


def _spec(**changes):
    return {**task_body()["spec"], **changes}


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        (task_body(spec=_spec(setup=[{"op": "teleport"}])), "spec", "setup[0].op: 'teleport' is not one of"),
        (task_body(spec=_spec(checker={"checks": []})), "spec", "a feasible task needs at least one check"),
        (task_body(env_profile="gpu-farm"), "env_profile", "no sandbox host serves profile 'gpu-farm'"),
        (
            task_body(env_profile="gpu-farm", spec=_spec(profile="gpu-farm")),
            ("env_profile", "spec"),
            "profile 'gpu-farm' is served by no sandbox host",
        ),
        (
            task_body(env_profile="desktop", spec=_spec(platform="desktop", profile="desktop")),
            "platform",
            "spec's platform is 'desktop'",
        ),
        (task_body(instruction="x" * 20_001), "instruction", "at most 20000 characters"),
    ],
)
def test_a_task_that_could_never_run_is_refused_at_creation_naming_the_field(
    researcher, body, field, message
):
    fields = field if isinstance(field, tuple) else (field,)
    detail = assert_400(send(researcher, "POST", "/tasks", body), *fields)
    assert message in detail
    assert not Task.objects.filter(slug=body["slug"]).exists()


def test_a_spec_over_the_size_limit_is_refused_and_a_patch_too(researcher, world):
    huge = _spec(setup=[{"op": "put_file", "path": "a.txt", "content": "x" * (1024 * 1024)}])
    assert "at most 1048576 are accepted" in assert_400(
        send(researcher, "POST", "/tasks", task_body(spec=huge)), "spec"
    )
    bad = {"spec": _spec(setup=[{"op": "exec"}])}
    assert "missing command" in assert_400(send(researcher, "PATCH", f"/tasks/{world.task.pk}", bad), "spec")
    world.task.refresh_from_db()
    assert world.task.spec == {}


def test_a_profile_a_registered_host_serves_is_accepted(researcher):
    from webapp.sandboxes.models import SandboxHost

    SandboxHost.objects.create(name="office-host", api_url="http://127.0.0.1:9", capacity={"office": {}})
    body = task_body(
        platform="desktop", env_profile="office", spec=_spec(platform="desktop", profile="office")
    )
    response = send(researcher, "POST", "/tasks", body)
    assert response.status_code == 201, response.content
