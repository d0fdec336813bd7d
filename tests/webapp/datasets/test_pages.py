"""The dataset and flywheel pages: what each person sees and may do."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.test import override_settings
from django.urls import reverse

from tests.conftest import Personas
from tests.webapp.datasets.conftest import GOOD, build_episode
from webapp.datasets import exports as ex
from webapp.datasets.models import DatasetExport, DatasetVersion, FlywheelIteration
from webapp.datasets.rounds import SFT_DATASET, flywheel_round_close

pytestmark = pytest.mark.django_db


@pytest.fixture(autouse=True)
def exports_dir(tmp_path: Path):  # type: ignore[no-untyped-def]
    with override_settings(EXPORTS_DIR=tmp_path / "exports"):
        yield


@pytest.fixture
def two_rounds(personas: Personas) -> list[FlywheelIteration]:
    build_episode(steps=GOOD, reward=1.0)
    build_episode(steps=GOOD, reward=0.0)
    first = flywheel_round_close()
    build_episode(steps=GOOD, reward=1.0, annotator=personas.annotator)
    build_episode(steps=GOOD, reward=1.0)
    second = flywheel_round_close()
    return [first, second]


def test_the_flywheel_page_shows_each_round_and_whether_p_rises(client_for, two_rounds) -> None:  # type: ignore[no-untyped-def]
    page = client_for("researcher").get(reverse("datasets:flywheel"))
    html = page.content.decode()
    assert page.status_code == 200
    assert html.count('data-testid="round-row"') == 2
    assert "0.500" in html and "1.000" in html  # P(V=1) of round 1 and round 2
    assert "rises every round" in html
    assert 'data-testid="p-v1-chart"' in html
    assert 'data-testid="close-round"' not in html  # researchers watch; admins close rounds
    rounds = client_for("researcher").get("/api/v1/flywheel/rounds").json()
    assert rounds["chart"]["series"]["all"] == [0.5, 1.0]
    assert rounds["chart"]["series"]["human"] == [None, 1.0]
    assert rounds["trend"]["verdict"] == "rises every round"


def test_only_admins_close_a_round(client_for, personas: Personas) -> None:  # type: ignore[no-untyped-def]
    build_episode(steps=GOOD, reward=1.0)
    assert client_for("researcher").post(reverse("datasets:flywheel_close")).status_code == 403
    assert client_for("annotator").get(reverse("datasets:flywheel")).status_code == 403
    response = client_for("admin").post(reverse("datasets:flywheel_close"), {"notes": "first"})
    assert response.status_code == 302
    # The job is queued (no worker here): the round is claimed and the page says it is closing.
    closing = FlywheelIteration.objects.get()
    assert closing.status == "running" and closing.notes == "first"
    html = client_for("admin").get(reverse("datasets:flywheel")).content.decode()
    assert 'data-testid="closing"' in html
    second = client_for("admin").post(reverse("datasets:flywheel_close"), follow=True)
    assert "is closing now" in second.content.decode()


def test_the_version_page_lists_members_with_verdicts_and_exports(
    client_for,  # type: ignore[no-untyped-def]
    two_rounds,
) -> None:
    ct = DatasetVersion.objects.get(dataset__name="flywheel-ct", number=2)
    client = client_for("researcher")
    html = client.get(reverse("datasets:version_detail", args=[ct.pk])).content.decode()
    assert html.count('data-testid="member-row"') == 1
    assert "checker failed" in html
    assert 'data-testid="export-form"' in html
    assert "flywheel-ct@v2" in html
    started = client.post(reverse("datasets:export_start", args=[ct.pk]), {"kind": "ct", "fmt": "parquet"})
    assert started.status_code == 302
    export = DatasetExport.objects.get()
    # While it waits, its row polls; once it is done the row answers 286 so htmx stops.
    row = client.get(reverse("datasets:export_row", args=[export.pk]), HTTP_HX_REQUEST="true")
    assert row.status_code == 200 and 'hx-trigger="every 1s"' in row.content.decode()
    ex.export_run(export_id=export.pk)
    row = client.get(reverse("datasets:export_row", args=[export.pk]), HTTP_HX_REQUEST="true")
    assert row.status_code == 286 and 'data-testid="export-download"' in row.content.decode()
    again = client.post(
        reverse("datasets:export_start", args=[ct.pk]), {"kind": "ct", "fmt": "nope"}, follow=True
    )
    assert "unknown export format" in again.content.decode()


def test_reviewers_and_annotators_cannot_export(client_for, two_rounds) -> None:  # type: ignore[no-untyped-def]
    sft = DatasetVersion.objects.get(dataset__name=SFT_DATASET, number=2)
    for who in ("annotator", "reviewer", "outsider"):
        assert (
            client_for(who).post(reverse("datasets:export_start", args=[sft.pk]), {"kind": "sft"}).status_code
            == 403
        )
        assert client_for(who).get(reverse("datasets:version_detail", args=[sft.pk])).status_code == 403
    assert not DatasetExport.objects.exists()


def test_withdrawing_is_for_admins_and_says_so_on_the_page(client_for, two_rounds) -> None:  # type: ignore[no-untyped-def]
    sft = DatasetVersion.objects.get(dataset__name=SFT_DATASET, number=1)
    url = reverse("datasets:version_withdraw", args=[sft.pk])
    assert client_for("researcher").post(url, {"reason": "x"}).status_code == 403
    empty = client_for("admin").post(url, {"reason": " "}, follow=True)
    assert "say why" in empty.content.decode()
    done = client_for("admin").post(url, {"reason": "a screenshot shows a password"}, follow=True)
    html = done.content.decode()
    assert 'data-testid="withdrawn"' in html and "a screenshot shows a password" in html
    assert 'data-testid="export-form"' not in html


def test_the_diff_page_shows_what_changed(client_for, two_rounds) -> None:  # type: ignore[no-untyped-def]
    v1 = DatasetVersion.objects.get(dataset__name=SFT_DATASET, number=1)
    v2 = DatasetVersion.objects.get(dataset__name=SFT_DATASET, number=2)
    client = client_for("researcher")
    html = client.get(reverse("datasets:version_diff") + f"?a={v1.pk}&b={v2.pk}").content.decode()
    assert "+2</b> added" in html and "−0</b> removed" in html
    bad = client.get(reverse("datasets:version_diff") + "?a=x&b=1")
    assert bad.status_code == 400 and "choose two versions" in bad.content.decode()
    api = client.get(f"/api/v1/dataset-diff?a={v1.pk}&b={v2.pk}").json()
    assert api["added"] == 2 and api["removed"] == 0 and api["kept"] == 1


def test_the_version_page_names_who_and_what_its_lineage_records(client_for, personas: Personas) -> None:  # type: ignore[no-untyped-def]
    """Lineage keeps ids; the page shows names and counts (once it showed "Annotators: 2", an id)."""
    from webapp.episodes.models import Episode
    from webapp.policies.models import PolicyVersion
    from webapp.reviews.services import review_assign

    policy = PolicyVersion.objects.create(name="ui-tars-round-3", backend="noop")
    demo = build_episode(steps=GOOD, reward=1.0, annotator=personas.annotator)
    rollout = build_episode(steps=GOOD, reward=1.0)
    Episode.objects.filter(pk=rollout.pk).update(policy_version=policy)
    review_assign(episode=demo, reviewer=personas.reviewer, assigned_by=personas.admin)
    flywheel_round_close()
    version = DatasetVersion.objects.get(dataset__name=SFT_DATASET)
    assert version.lineage["annotators"] == [personas.annotator.pk]  # the record keeps the id
    url = reverse("datasets:version_detail", args=[version.pk])
    html = client_for("researcher").get(url).content.decode()

    def cell(testid: str) -> str:
        start = html.index(f'data-testid="{testid}">') + len(f'data-testid="{testid}">')
        return html[start : html.index("</dd>", start)]

    assert cell("lineage-annotators") == personas.annotator.get_username()
    assert "ui-tars-round-3" in cell("lineage-policies") and f">{policy.pk}<" not in cell("lineage-policies")
    assert cell("lineage-reviews") == "1 review"
    assert cell("lineage-sources") == "agent: 1 episode · human: 1 episode"


def test_a_round_that_finishes_while_the_page_renders_is_shown_or_polled_for(client_for, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The worker can finish a round between the page's reads: the page must then show the round, or
    still poll for it, never neither (seen in the end-to-end loop: no row and no polling)."""
    from webapp.datasets import views
    from webapp.datasets.rounds import flywheel_round_start

    build_episode(steps=GOOD, reward=1.0)
    iteration = flywheel_round_start()
    real = views.rounds_closed

    def read_then_the_worker_finishes():  # type: ignore[no-untyped-def]
        rounds = list(real())
        flywheel_round_close(iteration=iteration)
        return rounds

    monkeypatch.setattr(views, "rounds_closed", read_then_the_worker_finishes)
    html = client_for("admin").get(reverse("datasets:flywheel")).content.decode()
    assert 'data-testid="round-row"' in html or 'hx-trigger="every 1s"' in html, html
