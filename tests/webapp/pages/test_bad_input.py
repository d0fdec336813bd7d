"""Bad input at the door is a 4xx that says what was wrong, never a 500 with a traceback.

Integers in query strings and forms (past 64 bits, 5,000 digits, digits int() refuses), NUL characters
in any field, and bodies over the size limit (413), on pages and in the JSON API.
"""

from __future__ import annotations

import json

import pytest

from tests.conftest import Personas
from tests.webapp.pages.conftest import ClientFor, World
from tests.webapp.pages.html import text

pytestmark = pytest.mark.django_db

HUGE = str(2**70)
MANY_DIGITS = "9" * 5000


@pytest.mark.parametrize(
    ("query", "name"),
    [
        (f"task={HUGE}", "task"),
        (f"policy={MANY_DIGITS}", "policy"),
        ("task=%C2%B2", "task"),  # "²": str.isdigit() says yes, int() says no
        ("policy=-3", "policy"),
    ],
)
def test_episode_list_filters_out_of_range_are_400_naming_them(
    client_for: ClientFor, world: World, query, name
):
    response = client_for("admin").get(f"/episodes/?{query}")
    assert response.status_code == 400
    assert f"{name} must be a whole number from 1 to {2**63 - 1}" in text(response)


def test_a_replay_step_out_of_range_is_400_and_a_fine_one_still_works(client_for: ClientFor, world: World):
    client = client_for("admin")
    assert client.get(f"/episodes/{world.episode.pk}/?step={MANY_DIGITS}").status_code == 400
    assert client.get(f"/episodes/{world.episode.pk}/?step={HUGE}").status_code == 400
    assert client.get(f"/episodes/{world.episode.pk}/?step=0").status_code == 200
    assert client.get(f"/episodes/?task={world.task.pk}").status_code == 200


@pytest.mark.parametrize("path", ["/dashboards/success/", "/dashboards/annotation/"])
def test_dashboard_windows_fall_back_to_their_default_for_any_other_value(client_for: ClientFor, path):
    assert client_for("admin").get(f"{path}?since_days={MANY_DIGITS}").status_code == 200
    assert client_for("admin").get(f"/dashboards/health/?since_hours={MANY_DIGITS}").status_code == 200


# --- NUL characters --------------------------------------------------------------------------------


def test_a_nul_in_a_form_field_is_400_naming_it_and_nothing_is_stored(
    client_for: ClientFor, personas: Personas
):
    from webapp.accounts.models import ApiToken

    response = client_for("annotator").post("/accounts/tokens/new/", {"name": "laptop\x00"})
    assert response.status_code == 400
    assert "name may not contain NUL characters" in text(response)
    assert not ApiToken.objects.exists()


def test_a_nul_in_a_query_parameter_or_the_path_is_400(client_for: ClientFor, world: World):
    client = client_for("admin")
    response = client.get("/tasks/?q=click%00")
    assert response.status_code == 400 and "query parameter q may not contain NUL" in text(response)
    assert client.get("/api/v1/tasks/abc%00").status_code == 400


# --- bodies over the limit ---------------------------------------------------------------------------


def test_a_form_body_over_the_limit_is_413(client_for: ClientFor, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 10_000
    form = client_for("annotator").post("/accounts/tokens/new/", {"name": "x" * 20_000})
    assert form.status_code == 413 and "larger than the 10000 bytes accepted" in text(form)


def test_a_body_found_too_large_while_reading_is_413(settings):
    # Without a Content-Length (a chunked body), Django only finds out while reading it, in any view.
    from django.core.exceptions import RequestDataTooBig
    from django.test import RequestFactory

    from webapp.common.errors import bad_request

    response = bad_request(RequestFactory().post("/api/v1/tasks"), RequestDataTooBig("too big"))
    assert response.status_code == 413
    assert json.loads(response.content)["detail"].startswith("the request body is larger than")


@pytest.mark.parametrize(
    ("persona", "path", "form"),
    [
        ("admin", "/training/merge/", {"policy_a": "²", "policy_b": "1", "weight_a": "0.5"}),
        ("admin", "/training/launch/", {"algorithm": "sft", "name": "r", "base_policy": "²", "suite": "²"}),
        ("annotator", "/annotate/start/", {"task": "²"}),
        ("admin", "/annotate/assign/", {"task": MANY_DIGITS, "annotator": "²"}),
        ("admin", "/reviews/assign/auto/", {"per_episode": MANY_DIGITS}),
    ],
)
def test_form_ids_int_cannot_read_are_refused_not_500(
    client_for: ClientFor, world: World, persona, path, form
):
    response = client_for(persona).post(path, form)
    assert response.status_code < 500, response.content[:300]


# --- text over its cap --------------------------------------------------------------------------------


def test_notes_reasons_and_names_over_their_cap_are_refused_and_not_stored(
    client_for: ClientFor, world: World, personas: Personas
) -> None:
    from webapp.annotation.models import Assignment
    from webapp.datasets.models import FlywheelIteration, VersionWithdrawal
    from webapp.training.services import TrainingRunError, training_run_launch

    long = "x" * 10_001
    admin = client_for("admin")
    page = admin.post(
        "/annotate/assign/",
        {"task": world.task.pk, "annotator": personas.annotator.pk, "note": long},
        follow=True,
    )
    assert "the note may be at most 10000 characters" in text(page)
    version = world.dataset.versions.get()
    page = admin.post(f"/datasets/versions/{version.pk}/withdraw/", {"reason": long}, follow=True)
    assert "the reason may be at most 10000 characters" in text(page)
    page = admin.post("/datasets/flywheel/close/", {"notes": long}, follow=True)
    assert "The notes may be at most 10000 characters" in text(page)
    api = admin.post("/api/v1/flywheel/rounds", {"notes": long}, content_type="application/json")
    assert api.status_code == 400 and api.json()["errors"][0]["field"] == "notes"
    with pytest.raises(TrainingRunError) as refused:
        training_run_launch(
            algorithm="sft", name="run\x00", config={}, created_by=personas.admin, dataset_pin=None,
            base_policy=None, suite=None,
        )  # fmt: skip
    assert ("name", "may not contain NUL characters") in refused.value.errors
    assert not Assignment.objects.exists() and not VersionWithdrawal.objects.exists()
    assert not FlywheelIteration.objects.exists()
