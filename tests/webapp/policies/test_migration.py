"""policies.0002 (policy servers, PolicyVersion.serving) applies over existing rows and back, on SQLite and
PostgreSQL: old rows get an empty `serving`, the widened openai check takes a served version and still
refuses an openai version with neither an endpoint nor a served base."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

BEFORE = [("policies", "0001_initial")]
AFTER = [("policies", "0002_policy_servers")]

pytestmark = pytest.mark.engine


def _migrate(targets):  # type: ignore[no-untyped-def]
    executor = MigrationExecutor(connection)
    executor.loader.build_graph()
    executor.migrate(targets)
    return executor.loader.project_state(targets).apps


@pytest.mark.django_db(transaction=True)
def test_serving_and_policy_servers_come_and_go_with_the_migration():
    try:
        _forwards_and_back()
    finally:  # whatever happened, the tests after this one find the schema as it is now
        executor = MigrationExecutor(connection)
        _migrate(executor.loader.graph.leaf_nodes())


def _forwards_and_back() -> None:
    apps = _migrate(BEFORE)
    Version = apps.get_model("policies", "PolicyVersion")
    hosted = Version.objects.create(
        name="hosted", backend="openai", endpoint_url="http://vllm:8000/v1", model_name="m"
    ).pk
    Version.objects.create(name="oracle", backend="oracle")
    with pytest.raises(IntegrityError), transaction.atomic():
        Version.objects.create(name="nowhere", backend="openai")

    apps = _migrate(AFTER)
    Version = apps.get_model("policies", "PolicyVersion")
    assert Version.objects.get(pk=hosted).serving == {}
    assert list(Version.objects.values_list("serving", flat=True)) == [{}, {}]
    served = Version.objects.create(
        name="served", backend="openai", model_name="run-3-v2", serving={"base": "tiny", "kind": "lora"}
    )
    with pytest.raises(IntegrityError), transaction.atomic():
        Version.objects.create(name="nowhere", backend="openai", serving={"kind": "lora"})
    Server = apps.get_model("policies", "PolicyServer")
    Server.objects.create(name="local-1", api_url="http://127.0.0.1:8100/v1", base_model="tiny")
    with pytest.raises(IntegrityError), transaction.atomic():
        Server.objects.create(name="bad", api_url="http://x/v1", base_model="tiny", status="serving")

    served.delete()  # the old check cannot hold a version only the platform's servers serve
    apps = _migrate(BEFORE)
    Version = apps.get_model("policies", "PolicyVersion")
    assert Version.objects.get(pk=hosted).endpoint_url == "http://vllm:8000/v1"
    with pytest.raises(IntegrityError), transaction.atomic():
        Version.objects.create(name="nowhere", backend="openai")
    assert "policies_policyserver" not in connection.introspection.table_names()
