"""The policy-server process: runs one vLLM engine and keeps the web app told what it serves.

    python -m agent_core.serving --model DIR --served-name tiny-policy --name local-1 --port 8200 \
        --web-url http://127.0.0.1:8000 --token-file var/policy-server-token

Every `interval` seconds it heartbeats (`POST /api/v1/policy-servers/heartbeat`) its state, the models it
serves (the base and its LoRA adapters), its load and token counters and its recent errors. The reply
names the adapters it should serve (every active policy version on its base): missing ones are
hot-loaded into the running engine, retired ones unloaded — a promoted adapter reaches rollouts
without a restart. A reply may also name other full weights (`weights`): the engine is then restarted
on them, which the web app grants to one server of a base at a time (a rolling update). An engine that
dies is restarted; the web app marks a server that stops heartbeating offline.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any

import httpx

from agent_core.serving.engine import Engine, EngineError

log = logging.getLogger(__name__)

MAX_ERRORS = 20
RESTART_BACKOFF_S = (2.0, 5.0, 15.0, 30.0)
ADAPTER_RETRY_S = 30.0


class ServerAgent:
    """Heartbeats one engine into the web app and carries out what the replies ask."""

    def __init__(
        self,
        engine: Engine,
        *,
        name: str,
        web_url: str,
        token: str,
        engine_label: str = "vllm",
        public_url: str | None = None,
        interval: float = 2.0,
    ) -> None:
        self.engine = engine
        self.name = name
        self.web_url = web_url.rstrip("/")
        self.token = token
        self.engine_label = engine_label
        self.public_url = (public_url or engine.spec.base_url).rstrip("/")
        self.interval = interval
        self.state = "starting"
        self.errors: deque[dict[str, Any]] = deque(maxlen=MAX_ERRORS)
        self.restarts = 0
        self._adapter_failed: dict[tuple[str, str], float] = {}
        self._last_counters: tuple[float, float] | None = None  # (monotonic, generation tokens)
        self._http = httpx.Client(timeout=httpx.Timeout(10.0, connect=3.0))
        self._stop = threading.Event()
        self._beat_failing = False

    def error(self, message: str) -> None:
        log.warning("%s", message)
        self.errors.append({"at": time.time(), "message": message[:1000]})

    # --- the loop --------------------------------------------------------------------------------

    def run(self) -> None:
        """Start the engine and heartbeat until `stop()`; restarts the engine when it dies."""
        self.engine.start()
        while not self._stop.is_set():
            started = time.monotonic()
            self._watch_engine()
            reply = self.beat()
            if reply is not None:
                self.apply(reply)
            self._stop.wait(max(0.1, self.interval - (time.monotonic() - started)))
        self.engine.close()
        self._http.close()

    def stop(self) -> None:
        self._stop.set()

    def _watch_engine(self) -> None:
        """Move between starting, serving and restarting as the engine comes up or dies."""
        if self.engine.alive():
            if self.state != "serving" and self.engine.ready():
                took = time.monotonic() - (self.engine.started_at or time.monotonic())
                log.info("engine serving %s after %.1f s", self.engine.spec.served_name, took)
                self.state = "serving"
            return
        code = self.engine.exit_code()
        self.error(f"vLLM exited (code {code}): {self.engine.log_tail(600)}")
        self.engine.stop()
        delay = RESTART_BACKOFF_S[min(self.restarts, len(RESTART_BACKOFF_S) - 1)]
        self.restarts += 1
        self.state = "restarting"
        if not self._stop.wait(delay):
            try:
                self.engine.start()
            except EngineError as exc:
                self.error(str(exc))

    # --- heartbeats --------------------------------------------------------------------------------

    def report(self) -> dict[str, Any]:
        """What the heartbeat says: who, what it serves, how loaded, what went wrong lately."""
        serving = self.state == "serving"
        models: list[dict[str, Any]] = []
        metrics: dict[str, float] = {}
        if serving:
            try:
                models = self.engine.models()
            except EngineError as exc:
                self.error(f"cannot list models: {exc}")
            metrics = self.engine.metrics()
            metrics["gen_tokens_per_s"] = self._tokens_per_s(metrics)
        spec = self.engine.spec
        return {
            "name": self.name,
            "api_url": self.public_url,
            "engine": self.engine_label,
            "base_model": spec.served_name,
            "weights": str(spec.model),
            "state": self.state,
            "models": models,
            "lora": spec.enable_lora,
            "metrics": metrics,
            "errors": list(self.errors),
        }

    def _tokens_per_s(self, metrics: Mapping[str, float]) -> float:
        total = metrics.get("generation_tokens_total")
        if total is None:
            return 0.0
        now = time.monotonic()
        last, self._last_counters = self._last_counters, (now, total)
        if last is None or now <= last[0] or total < last[1]:
            return 0.0
        return round((total - last[1]) / (now - last[0]), 2)

    def beat(self) -> dict[str, Any] | None:
        """POST one heartbeat; the reply, or None when the web app could not be reached."""
        url = self.web_url + "/api/v1/policy-servers/heartbeat"
        try:
            resp = self._http.post(url, json=self.report(), headers={"Authorization": f"Bearer {self.token}"})
            if resp.status_code != 200:
                raise RuntimeError(f"HTTP {resp.status_code}: {resp.text[:300]}")
            reply = resp.json()
        except (httpx.HTTPError, RuntimeError, ValueError) as exc:
            if not self._beat_failing:
                log.warning("heartbeat to %s failed: %s (retrying every %.0f s)", url, exc, self.interval)
            self._beat_failing = True
            return None
        if self._beat_failing:
            log.info("heartbeat to %s works again", url)
        self._beat_failing = False
        return reply if isinstance(reply, dict) else None

    # --- what the web app asks -------------------------------------------------------------------

    def apply(self, reply: Mapping[str, Any]) -> None:
        """Serve the adapters the reply names (load missing ones, unload the rest); restart on other
        full weights when the reply grants it."""
        weights = reply.get("weights")
        if isinstance(weights, Mapping) and weights.get("path"):
            self._switch_weights(
                str(weights.get("name") or self.engine.spec.served_name), str(weights["path"])
            )
            return
        if self.state != "serving" or not self.engine.spec.enable_lora:
            return
        wanted = {
            str(a["name"]): str(a["path"])
            for a in reply.get("adapters") or []
            if isinstance(a, Mapping) and a.get("name") and a.get("path")
        }
        try:
            loaded = {m["id"] for m in self.engine.models() if m["kind"] == "lora"}
        except EngineError as exc:
            self.error(f"cannot list models: {exc}")
            return
        for name, path in wanted.items():
            if name not in loaded:
                self._load(name, path)
        for name in loaded - set(wanted):
            try:
                self.engine.unload_adapter(name)
                log.info("unloaded adapter %s (no longer wanted)", name)
            except EngineError as exc:
                self.error(f"cannot unload adapter {name}: {exc}")

    def _load(self, name: str, path: str) -> None:
        key = (name, path)
        if time.monotonic() < self._adapter_failed.get(key, 0.0):
            return
        started = time.monotonic()
        try:
            self.engine.load_adapter(name, path)
        except EngineError as exc:
            self._adapter_failed[key] = time.monotonic() + ADAPTER_RETRY_S
            self.error(f"cannot load adapter {name} from {path}: {exc}")
            return
        log.info("hot-loaded adapter %s from %s in %.2f s", name, path, time.monotonic() - started)

    def _switch_weights(self, served_name: str, path: str) -> None:
        """Restart the engine on other full weights (the web app grants one server at a time)."""
        spec = self.engine.spec
        if Path(path) == Path(spec.model) and served_name == spec.served_name:
            return
        log.info("restarting on %s (%s) in place of %s", served_name, path, spec.served_name)
        # Not the full grace: a request in flight holds a stopping vLLM's server open; it fails over.
        self.engine.stop(timeout_s=5.0)
        self.engine.spec = replace(spec, model=Path(path), served_name=served_name)
        self.state = "restarting"
        self._last_counters = None
        try:
            self.engine.start()
        except EngineError as exc:
            self.error(str(exc))
