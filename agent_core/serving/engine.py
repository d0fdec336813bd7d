"""One vLLM OpenAI-compatible server as a child process: its command line, health, adapters and metrics.

vLLM lives in a virtual environment of its own (scripts/vllm-env.sh: its transformers pin differs from
the project's), so the engine is started as `<that python> -m vllm.entrypoints.openai.api_server` (the
`vllm` command looks for a distribution named `vllm`, which the CPU build is not). LoRA adapters are
added to a running server through `POST /v1/load_lora_adapter`, which vLLM allows only with
VLLM_ALLOW_RUNTIME_LORA_UPDATING=True in its environment.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import os
import re
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any

import httpx

log = logging.getLogger(__name__)

# Prometheus lines: `name{labels} value`; the labels are dropped (one engine, one model label).
_METRIC_RE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(?:\{[^}]*\})?\s+([-+0-9.eEinfa]+)$")
# vLLM's names (v1 engine); older releases spelled KV-cache use `gpu_cache_usage_perc`.
METRICS = {
    "running": ("vllm:num_requests_running",),
    "waiting": ("vllm:num_requests_waiting",),
    "requests_total": ("vllm:request_success_total",),
    "prompt_tokens_total": ("vllm:prompt_tokens_total",),
    "generation_tokens_total": ("vllm:generation_tokens_total",),
    "kv_cache_usage": ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
}


def vision_engine_args(
    model: Path, *, screen: tuple[int, int], history_images: int, max_new_tokens: int = 512
) -> tuple[int | None, list[str]]:
    """For a vision-language checkpoint: the context (--max-model-len) its prompts need, the current
    screenshot and `history_images` earlier ones at `screen` (W, H) with the prompt text and the reply,
    and the vLLM arguments that make the engine resize as the checkpoint says (its min/max pixels) and
    take that many images. (None, []) for a text-only checkpoint."""
    from agent_core.policies.local import is_vision_model
    from agent_core.policies.vision import ImageSpec, context_for, image_spec

    if not is_vision_model(model):
        return None, []
    spec = image_spec(model) or ImageSpec()
    images = history_images + 1
    context = context_for(spec, screen=screen, images=images, max_new_tokens=max_new_tokens)
    args = [
        "--mm-processor-kwargs",
        json.dumps(spec.mm_processor_kwargs()),
        "--limit-mm-per-prompt",
        json.dumps({"image": images, "video": 0}),
    ]
    return context, args


class EngineError(Exception):
    """The engine failed to start, died, or refused an operation; the message says which and why."""


@dataclass(frozen=True)
class EngineSpec:
    """How to start one server: the weights, the name it serves them under, where it listens."""

    model: Path
    served_name: str
    port: int
    python: str
    host: str = "127.0.0.1"
    max_model_len: int = 4096
    enable_lora: bool = True
    max_lora_rank: int = 64
    max_loras: int = 4
    kv_cache_gib: int = 1
    dtype: str = "auto"
    cpu_cores: str = ""
    """The CPU build's cores for this engine (VLLM_CPU_OMP_THREADS_BIND, e.g. "1" or "2-5"); by default each
    engine binds itself to the first core, so two engines on one machine share it."""
    extra_args: Sequence[str] = ()
    env: Mapping[str, str] = field(default_factory=dict)
    stop_grace_s: float = 5.0
    """How long a stopped server may take to exit before its process group is killed."""

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def command(self) -> list[str]:
        """The command line that starts the server."""
        cmd = [
            self.python,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(self.model),
            "--served-model-name",
            self.served_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            "--dtype",
            self.dtype,
            "--disable-uvicorn-access-log",
            # Logprobs of the distribution each token was drawn from (after temperature and top-p),
            # not the raw one: what the RL trainer scores π_old and π under (training/sampling.py).
            "--logprobs-mode",
            "processed_logprobs",
        ]
        if self.enable_lora:
            cmd += [
                "--enable-lora",
                "--max-lora-rank",
                str(self.max_lora_rank),
                "--max-loras",
                str(self.max_loras),
            ]
        return cmd + list(self.extra_args)

    def environment(self) -> dict[str, str]:
        """The child's environment: runtime LoRA updates allowed, a bounded KV cache on CPU builds."""
        env = dict(os.environ)
        for key in ("PYTHONPATH", "VIRTUAL_ENV", "DJANGO_SETTINGS_MODULE"):
            env.pop(key, None)
        env.update(
            {
                "VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True",
                "VLLM_CPU_KVCACHE_SPACE": str(self.kv_cache_gib),
                "VLLM_NO_USAGE_STATS": "1",
                "DO_NOT_TRACK": "1",
                "HF_HUB_OFFLINE": "1",
                "TRANSFORMERS_OFFLINE": "1",
            }
        )
        if self.cpu_cores:
            env["VLLM_CPU_OMP_THREADS_BIND"] = self.cpu_cores
        env.update(self.env)
        return env


def parse_metrics(text: str) -> dict[str, float]:
    """The figures of METRICS from a Prometheus text page (a metric summed over its label sets)."""
    values: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _METRIC_RE.match(line.strip())
        if m is None:
            continue
        with contextlib.suppress(ValueError):
            value = float(m.group(2))
            if math.isfinite(value):  # NaN / Inf say nothing a page could show
                values[m.group(1)] = values.get(m.group(1), 0.0) + value
    out: dict[str, float] = {}
    for key, names in METRICS.items():
        for name in names:
            if name in values:
                out[key] = values[name]
                break
    return out


# Runs the server as the leader of its process group and ends that group when the serving agent dies or
# stops it (guard.py says why: an aborted vLLM server otherwise holds requests in flight unanswered).
GUARD = Path(__file__).resolve().with_name("guard.py")


class Engine:
    """A vLLM server process: start it, wait until it answers, ask it things, stop it."""

    def __init__(self, spec: EngineSpec, *, log_path: Path | None = None, timeout_s: float = 10.0) -> None:
        self.spec = spec
        self.log_path = log_path
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._http = httpx.Client(timeout=httpx.Timeout(timeout_s, connect=2.0))
        self.started_at: float | None = None

    # --- the process ---------------------------------------------------------------------------

    def start(self) -> None:
        """Start the server (returns at once; `wait_ready` waits for it)."""
        if self.alive():
            return
        if not Path(self.spec.python).exists():
            raise EngineError(f"no vLLM environment at {self.spec.python} (run scripts/vllm-env.sh)")
        if self.log_path is not None:
            self.log_path.parent.mkdir(parents=True, exist_ok=True)
            self._log = self.log_path.open("ab")
        out = self._log if self._log is not None else subprocess.DEVNULL
        log.info("starting vLLM: %s", " ".join(self.spec.command()))
        self._proc = subprocess.Popen(  # noqa: S603 - our own command line
            [self.spec.python, str(GUARD), str(self.spec.stop_grace_s), *self.spec.command()],
            env=self.spec.environment(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # the guard leads the group: the server and its workers end with it
        )
        self.started_at = time.monotonic()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def exit_code(self) -> int | None:
        return self._proc.poll() if self._proc is not None else None

    def ready(self) -> bool:
        """Whether the server answers its health check now."""
        if not self.alive():
            return False
        try:
            return self._http.get(f"http://{self.spec.host}:{self.spec.port}/health").status_code == 200
        except httpx.HTTPError:
            return False

    def wait_ready(self, timeout_s: float = 300.0) -> float:
        """Block until the server is healthy; returns the seconds since start. Raises EngineError
        (with the log's tail) when it exits or the time runs out."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.ready():
                return time.monotonic() - (self.started_at or time.monotonic())
            if not self.alive():
                raise EngineError(
                    f"vLLM exited with code {self.exit_code()} while starting: {self.log_tail()}"
                )
            time.sleep(0.5)
        raise EngineError(f"vLLM did not answer /health within {timeout_s:g} s: {self.log_tail()}")

    def log_tail(self, chars: int = 1500) -> str:
        if self.log_path is None or not self.log_path.exists():
            return "(no log)"
        with self.log_path.open("rb") as fh:
            fh.seek(0, os.SEEK_END)
            fh.seek(max(0, fh.tell() - chars))
            return fh.read().decode(errors="replace").strip()

    def stop(self, timeout_s: float = 20.0) -> None:
        """SIGTERM the server's process group, SIGKILL it after `timeout_s`."""
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(10)
        if self._log is not None:
            self._log.close()
            self._log = None

    def close(self) -> None:
        self.stop()
        self._http.close()

    # --- what it serves --------------------------------------------------------------------------

    def models(self) -> list[dict[str, Any]]:
        """[{"id", "kind": "base"|"lora", "path"?}] of what the server serves now."""
        data = self._get_json("/v1/models")
        out = []
        for m in data.get("data", []) if isinstance(data, Mapping) else []:
            if not isinstance(m, Mapping) or "id" not in m:
                continue
            lora = m.get("parent") not in (None, "", m.get("id"))
            item: dict[str, Any] = {"id": str(m["id"]), "kind": "lora" if lora else "base"}
            if lora and m.get("root"):
                item["path"] = str(m["root"])
            out.append(item)
        return out

    def load_adapter(self, name: str, path: str | Path) -> None:
        """Add a LoRA adapter to the running server under `name`; raises EngineError with its reason."""
        self._post("/v1/load_lora_adapter", {"lora_name": name, "lora_path": str(path)})

    def unload_adapter(self, name: str) -> None:
        self._post("/v1/unload_lora_adapter", {"lora_name": name})

    def metrics(self) -> dict[str, float]:
        """The server's load and token counters (see METRICS); empty when it does not answer."""
        try:
            resp = self._http.get(f"http://{self.spec.host}:{self.spec.port}/metrics")
        except httpx.HTTPError:
            return {}
        return parse_metrics(resp.text) if resp.status_code == 200 else {}

    def _get_json(self, path: str) -> Any:
        url = f"http://{self.spec.host}:{self.spec.port}{path}"
        try:
            resp = self._http.get(url)
        except httpx.HTTPError as exc:
            raise EngineError(f"GET {url}: {type(exc).__name__}: {exc}") from None
        if resp.status_code != 200:
            raise EngineError(f"GET {url}: HTTP {resp.status_code}: {resp.text[:300]}")
        return resp.json()

    def _post(self, path: str, body: Mapping[str, Any]) -> None:
        url = f"http://{self.spec.host}:{self.spec.port}{path}"
        try:
            # Loading an adapter reads it from disk and may compile kernels: give it time.
            resp = self._http.post(url, json=dict(body), timeout=120.0)
        except httpx.HTTPError as exc:
            raise EngineError(f"POST {url}: {type(exc).__name__}: {exc}") from None
        if resp.status_code != 200:
            raise EngineError(f"POST {url}: HTTP {resp.status_code}: {resp.text[:300]}")
