"""/metrics: Prometheus text exposition behind an API token or a session and dashboards.view_metrics."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission
from django.test import Client
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from tests.conftest import Personas
from tests.factories import make_task
from tests.webapp.api.helpers import bearer_client
from tests.webapp.dashboards.conftest import ended, heartbeat
from webapp.accounts.services import api_token_create, api_token_revoke
from webapp.celery import QUEUES
from webapp.datasets.models import FlywheelIteration
from webapp.policies.models import PolicyVersion
from webapp.reviews.services import review_assign, review_decide

pytestmark = pytest.mark.django_db

URL = "/metrics"


def scrape(client: Client) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """{(sample name, sorted labels): value} of one successful scrape."""
    response = client.get(URL)
    assert response.status_code == 200, response.content
    assert response["Content-Type"].startswith("text/plain; version=")
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(response.content.decode())
        for s in family.samples
    }


def test_no_credentials_is_401_with_the_scheme(client: Client) -> None:
    response = client.get(URL)
    assert response.status_code == 401
    assert response["WWW-Authenticate"].startswith("Bearer")


def test_a_wrong_or_revoked_token_is_401(personas: Personas) -> None:
    assert Client(headers={"Authorization": "Bearer fw_not-a-real-token"}).get(URL).status_code == 401
    assert Client(headers={"Authorization": "Basic Y2Fyb2w6eA=="}).get(URL).status_code == 401
    token, raw = api_token_create(user=personas.researcher, name="scraper")
    api_token_revoke(token=token)
    assert Client(headers={"Authorization": f"Bearer {raw}"}).get(URL).status_code == 401


@pytest.mark.parametrize("persona", ["annotator", "reviewer", "outsider"])
def test_a_token_without_the_permission_is_403(personas: Personas, persona: str) -> None:
    response = bearer_client(getattr(personas, persona)).get(URL)
    assert response.status_code == 403
    assert b"dashboards.view_metrics" in response.content


@pytest.mark.parametrize("persona", ["researcher", "admin"])
def test_researchers_and_admins_may_scrape_by_token(personas: Personas, persona: str) -> None:
    assert bearer_client(getattr(personas, persona)).get(URL).status_code == 200


def test_a_logged_in_session_works_too_and_still_needs_the_permission(client_for) -> None:
    assert client_for("researcher").get(URL).status_code == 200
    assert client_for("annotator").get(URL).status_code == 403


def test_the_permission_alone_is_enough(personas: Personas) -> None:
    outsider = personas.outsider
    outsider.user_permissions.add(
        Permission.objects.get(codename="view_metrics", content_type__app_label="dashboards")
    )
    assert bearer_client(outsider).get(URL).status_code == 200


def test_figures_match_the_rows(personas: Personas) -> None:
    policy = PolicyVersion.objects.create(name="metrics-pi", backend="oracle")
    resets = {"reset": {"n": 2.0, "p50": 300.0, "p95": 600.0}}
    host = heartbeat(
        "metrics-host",
        sandboxes=[
            {"profile": "miniwob", "state": "leased", "latency": resets},
            {"profile": "miniwob", "state": "idle"},
        ],
        counters={"started": 4, "start_failed": 1, "replaced": 0, "expired": 3},
        lease_wait={"n": 6.0, "p50": 9.0, "p95": 21.0},
        profiles={"miniwob": {"max_total": 5}},
    )
    task = make_task(slug="metrics/task", env_profile="miniwob")  # a profile the host serves
    sandbox = host.sandboxes.first()
    for reward in (1.0, 1.0, 1.0, 0.0):
        ended(task, reward=reward, policy=policy, sandbox=sandbox)
    ended(task, env_error=True, policy=policy, sandbox=sandbox)
    demo = ended(task, reward=1.0, annotator=personas.annotator, steps=3)
    for reviewer, verdict, kwargs in (
        (personas.reviewer, "accept", {"quality": 5}),
        (personas.admin, "accept", {"quality": 3}),
    ):
        review = review_assign(episode=demo, reviewer=reviewer, assigned_by=personas.admin)
        review_decide(review=review, actor=reviewer, verdict=verdict, **kwargs)
    FlywheelIteration.objects.create(
        number=1, status="finished", finished_at=timezone.now(), stats={"p_v1": 0.25, "episodes": 4}
    )
    FlywheelIteration.objects.create(
        number=2, status="finished", finished_at=timezone.now(), stats={"p_v1": 0.5, "episodes": 12}
    )
    FlywheelIteration.objects.create(number=3, status="running", stats={"p_v1": 0.9})  # not closed yet

    got = scrape(bearer_client(personas.researcher))

    def value(name: str, **labels: str) -> float:
        return got[(name, tuple(sorted(labels.items())))]

    ended_total = "flywheel_episodes_ended_total"
    assert value(ended_total, task="metrics/task", policy="metrics-pi", outcome="success") == 3
    assert value(ended_total, task="metrics/task", policy="metrics-pi", outcome="failure") == 1
    assert value(ended_total, task="metrics/task", policy="metrics-pi", outcome="env_error") == 1
    assert value(ended_total, task="metrics/task", policy="", outcome="success") == 1
    assert value("flywheel_policy_success_ratio", policy="metrics-pi") == 0.75
    assert value("flywheel_task_success_ratio", task="metrics/task") == 0.8  # 4 of 5 attempts, the demo too
    assert value("flywheel_sandbox_host_up", host="metrics-host") == 1
    assert value("flywheel_pool_utilisation_ratio", host="metrics-host") == 0.5
    assert value("flywheel_lease_wait_ms", host="metrics-host", quantile="0.95") == 21.0
    assert value("flywheel_reset_latency_ms", host="metrics-host", quantile="0.5") == 300.0
    assert value("flywheel_sandbox_events_total", host="metrics-host", event="expired") == 3
    assert value("flywheel_sandbox_crash_ratio", host="metrics-host") == 1 / 5  # 1 failed of 5 starts tried
    assert value("flywheel_env_error_ratio_by_host", host="metrics-host") == 1 / 5
    assert value("flywheel_env_error_ratio_by_profile", profile="miniwob") == 1 / 6
    assert value("flywheel_profile_capacity", profile="miniwob") == 5
    assert value("flywheel_broker_up") == 1
    for queue in QUEUES:
        assert value("flywheel_queue_depth", queue=queue) >= 0
    assert value("flywheel_demonstrations_today", annotator="alice") == 1
    assert value("flywheel_demonstration_steps_today", annotator="alice") == 3
    assert value("flywheel_review_decisions_today", reviewer="bob", verdict="accepted") == 1
    assert value("flywheel_reviewer_agreement_items", first="bob", second="dave") == 1
    assert value("flywheel_round_p_v1", round="2") == 0.5
    assert value("flywheel_round_episodes", round="2") == 12
    assert not any(name == "flywheel_round_p_v1" and labels != (("round", "2"),) for name, labels in got)
    # Both accepted the only shared trajectory: κ is undefined, so no sample rather than a made-up one.
    assert ("flywheel_reviewer_agreement_kappa", (("first", "bob"), ("second", "dave"))) not in got


def test_a_round_without_stats_and_an_empty_platform_scrape_cleanly(personas: Personas) -> None:
    FlywheelIteration.objects.create(number=7, status="finished", finished_at=timezone.now(), stats={})
    got = scrape(bearer_client(personas.admin))
    assert ("flywheel_round_p_v1", (("round", "7"),)) not in got
    assert got[("flywheel_episodes_running", (("source", "agent"),))] == 0
    assert not any(name.startswith("flywheel_pool_") for name, _ in got)


def test_metrics_reject_post(personas: Personas) -> None:
    assert bearer_client(personas.admin).post(URL).status_code == 405
