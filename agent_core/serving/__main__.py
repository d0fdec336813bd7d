"""`python -m agent_core.serving`: one policy server (a vLLM engine and its heartbeat agent)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
from pathlib import Path
from typing import Any

from agent_core.serving.agent import ServerAgent
from agent_core.serving.engine import Engine, EngineSpec, vision_engine_args


def _args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m agent_core.serving", description=__doc__)
    p.add_argument("--model", required=True, type=Path, help="the base weights (a model directory)")
    p.add_argument("--served-name", required=True, help="the model id requests name (the policy's model)")
    p.add_argument("--name", required=True, help="this server's name in the web app")
    p.add_argument("--port", type=int, default=8200)
    p.add_argument("--host", default="127.0.0.1", help="the address vLLM listens on")
    p.add_argument("--public-url", default=None, help="the /v1 URL rollout workers reach it at")
    p.add_argument("--web-url", default=os.environ.get("FLYWHEEL_WEB_URL", "http://127.0.0.1:8000"))
    p.add_argument("--token-file", type=Path, default=None, help="else $POLICY_SERVER_TOKEN")
    p.add_argument(
        "--vllm-python",
        default=os.environ.get("VLLM_PYTHON", str(Path(".venv-vllm/bin/python").resolve())),
        help="the python of vLLM's own environment (scripts/vllm-env.sh)",
    )
    p.add_argument("--log-file", type=Path, default=None, help="vLLM's output (else discarded)")
    p.add_argument("--interval", type=float, default=2.0, help="seconds between heartbeats")
    p.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="the engine's context; default: 4096 for a text model, and for a vision-language model what"
        " --history-images + 1 screenshots at --screen, the prompt and the reply need",
    )
    p.add_argument("--screen", default="1920x1080", help="a VLM's screenshots: WxH (the profile's screen)")
    p.add_argument(
        "--history-images", type=int, default=3, help="a VLM's earlier screenshots kept per prompt"
    )
    p.add_argument("--kv-cache-gib", type=int, default=1, help="KV cache of the CPU build, in GiB")
    p.add_argument("--max-loras", type=int, default=4)
    p.add_argument("--max-lora-rank", type=int, default=64)
    p.add_argument("--cpu-cores", default="", help='CPU build: the cores of this engine ("1", "2-5")')
    p.add_argument("--no-lora", action="store_true", help="serve the base only (no adapters)")
    p.add_argument("--engine-label", default="vllm", help="what the page shows as the engine")
    p.add_argument("vllm_args", nargs="*", help="more vLLM arguments, after --")
    return p.parse_args(argv)


def _token(args: argparse.Namespace) -> str:
    if args.token_file is not None:
        return str(args.token_file.read_text().strip())
    token = os.environ.get("POLICY_SERVER_TOKEN", "")
    if not token:
        sys.exit("no token: pass --token-file or set POLICY_SERVER_TOKEN")
    return token


def engine_spec(args: argparse.Namespace) -> EngineSpec:
    """The engine the arguments ask for; a vision-language checkpoint gets the context, pixel limits and
    image count its prompts need unless --max-model-len says otherwise. SystemExit on a bad argument."""
    try:
        width, height = (int(v) for v in args.screen.lower().split("x"))
    except ValueError:
        sys.exit(f"--screen: WxH, e.g. 1920x1080, got {args.screen!r}")
    if width <= 0 or height <= 0:
        sys.exit(f"--screen: WxH, both positive, got {args.screen!r}")
    if args.history_images < 0:
        sys.exit("--history-images: 0 or more")
    try:
        context, vision_args = vision_engine_args(
            args.model.resolve(), screen=(width, height), history_images=args.history_images
        )
    except ValueError as exc:  # VisionConfigError: the checkpoint's processor config, named
        sys.exit(f"--model: {exc}")
    if context is not None:
        logging.getLogger(__name__).info(
            "vision-language model: context %d for %d screenshots at %dx%d; %s",
            args.max_model_len or context,
            args.history_images + 1,
            width,
            height,
            " ".join(vision_args),
        )
    return EngineSpec(
        model=args.model.resolve(),
        served_name=args.served_name,
        port=args.port,
        python=args.vllm_python,
        host=args.host,
        max_model_len=args.max_model_len or context or 4096,
        enable_lora=not args.no_lora,
        max_lora_rank=args.max_lora_rank,
        max_loras=args.max_loras,
        kv_cache_gib=args.kv_cache_gib,
        cpu_cores=args.cpu_cores,
        extra_args=(*vision_args, *args.vllm_args),
    )


def main(argv: list[str] | None = None) -> None:
    args = _args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)  # a line per heartbeat request says nothing
    spec = engine_spec(args)
    agent = ServerAgent(
        Engine(spec, log_path=args.log_file),
        name=args.name,
        web_url=args.web_url,
        token=_token(args),
        engine_label=args.engine_label,
        public_url=args.public_url,
        interval=args.interval,
    )

    def _stop(signum: int, _frame: Any) -> None:
        agent.stop()

    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGINT, _stop)
    agent.run()


if __name__ == "__main__":
    main()
