"""manage.py tiny_policy [--name tiny-base] [--seed 0] [--force]

Builds the tiny demonstration policy (a small text-only decoder, random weights, its tokenizer trained
on the platform's prompts, the catalog's task instructions and the instructions recorded episodes were
given) under VAR_DIR/models/<name> and registers it as an active local policy version that reads the
"elements" observation. A model folder already there (its version row lost) is registered as it is.

--vision builds a tiny Qwen2.5-VL instead (the architecture of UI-TARS-1.5 and Qwen2.5-VL), which reads
the screenshots: a vision-language policy to serve, roll out and train as a lab's own would be.

--served also registers `<name>-served`: the same weights served by the platform's policy servers
(vLLM; `SERVE_POLICY=1 make run` starts one), answering in the same form from the same prompt.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.utils.text import slugify

from webapp.catalog.models import Task
from webapp.episodes.models import Episode
from webapp.policies.models import PolicyVersion
from webapp.policies.services import served_twin_create

RECORDED_INSTRUCTIONS = 5000


def corpus() -> list[str]:
    """The catalog's task instructions (templates left out) and instructions episodes were given."""
    texts = {t for t in Task.objects.values_list("instruction", flat=True) if "{{" not in t}
    recorded = (
        Episode.objects.exclude(prepared={})
        .order_by("-pk")
        .values_list("prepared__instruction", flat=True)[:RECORDED_INSTRUCTIONS]
    )
    texts.update(t for t in recorded if isinstance(t, str) and t)
    return sorted(texts)


class Command(BaseCommand):
    help = "Build the tiny demo policy and register it as a local policy version (idempotent)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--name", default="tiny-base", help="policy version name and model folder")
        parser.add_argument("--seed", type=int, default=0, help="weights and tokenizer seed")
        parser.add_argument("--force", action="store_true", help="rebuild the model and reset the version")
        parser.add_argument(
            "--served", action="store_true", help="also register <name>-served, served by the policy servers"
        )
        parser.add_argument("--vision", action="store_true", help="a tiny Qwen2.5-VL that reads screenshots")

    def handle(self, *args: Any, **opts: Any) -> None:
        name = str(opts["name"])
        if slugify(name) != name:
            raise CommandError(f"--name must be a slug (letters, digits, - and _), got {name!r}")
        relative = Path("models") / name
        path = Path(settings.VAR_DIR) / relative
        existing = PolicyVersion.objects.filter(name=name).first()
        if existing is not None and not opts["force"]:
            model = existing.model_dir()
            where = f" ({model})" if model is not None else ""
            self.stdout.write(f"policy {name} exists{where}; --force rebuilds it")
            if opts["served"]:
                self._register_served(name, existing)
            return
        # Imported only when there is something to build: torch takes seconds to import, and
        # `make run` (seed_demo) calls this on every start.
        try:
            from agent_core.training.tiny_policy import POLICY_CONFIG, build_tiny_policy
        except ImportError as exc:
            raise CommandError(f"the tiny policy needs the train extra (pip install '.[train]'): {exc}")
        instructions = corpus()
        if (path / "config.json").is_file() and not opts["force"]:
            from agent_core.policies.local import is_vision_model

            if is_vision_model(path) != bool(opts["vision"]):
                kind = "a vision-language" if is_vision_model(path) else "a text-only"
                raise CommandError(f"{path} holds {kind} model; --force rebuilds it as asked")
            built = "registered the model already"  # its version row was lost (a fresh database)
        else:
            shutil.rmtree(path, ignore_errors=True)
            try:
                if opts["vision"]:
                    from agent_core.tiny_models import build_tiny_qwen2_5_vl

                    build_tiny_qwen2_5_vl(path, vocab_corpus=instructions, seed=int(opts["seed"]))
                else:
                    build_tiny_policy(path, corpus=instructions, seed=int(opts["seed"]))
            except Exception as exc:  # noqa: BLE001 - a failed build leaves no half-written model behind
                shutil.rmtree(path, ignore_errors=True)
                raise CommandError(f"building the tiny policy failed: {type(exc).__name__}: {exc}")
            built = f"built ({len(instructions)} task instructions in its tokenizer)"
        policy, created = PolicyVersion.objects.update_or_create(
            name=name,
            defaults={
                "backend": PolicyVersion.Backend.LOCAL,
                "checkpoint": None,
                "endpoint_url": "",
                "model_name": str(relative),
                # A VLM reads the screenshots and clicks in its processor's space (set from the checkpoint).
                "config": {**POLICY_CONFIG, "observation": "screenshot", "coords": "smart_resize"}
                if opts["vision"]
                else dict(POLICY_CONFIG),
                "is_active": True,
                "lineage": {
                    "built_by": "tiny_policy",
                    "seed": int(opts["seed"]),
                    "vision": bool(opts["vision"]),
                },
            },
        )
        self.stdout.write(f"policy {policy.name} {'registered' if created else 'updated'}: {path} {built}")
        if opts["served"]:
            self._register_served(name, policy)

    def _register_served(self, name: str, local: PolicyVersion) -> None:
        """`<name>-served`: the local policy's weights on the policy servers, under the model id `name`."""
        served = served_twin_create(local=local, served_name=name)
        self.stdout.write(f"policy {served.name} registered: model {name} on the policy servers")
