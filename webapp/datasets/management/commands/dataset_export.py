"""Export a dataset version from the command line, in this process (the pages and the API queue a job)."""

from __future__ import annotations

import json
import resource
import time
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from agent_core.data.export_formats import SFT_LAYOUTS
from webapp.datasets.exports import export_create, export_run
from webapp.datasets.models import DatasetExport
from webapp.datasets.services import DatasetError, version_pin_resolve


class Command(BaseCommand):
    help = "Export a dataset version (a pin such as flywheel-sft@v3) to files under EXPORTS_DIR."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("pin", help="<dataset>@v<number> or <dataset>@latest")
        parser.add_argument("--kind", default="sft", choices=DatasetExport.Kind.values)
        parser.add_argument("--fmt", default="jsonl", choices=DatasetExport.Format.values)
        parser.add_argument("--last-n", type=int, default=None, help="SFT: screenshots kept per sample")
        parser.add_argument("--layout", default=None, choices=SFT_LAYOUTS, help="SFT: the records' layout")
        parser.add_argument("--shard-records", type=int, default=None)
        parser.add_argument("--json", action="store_true", help="print the result as one JSON line")

    def handle(self, *args: Any, **opts: Any) -> None:
        options = {
            k: v
            for k, v in {
                "last_n": opts["last_n"],
                "shard_records": opts["shard_records"],
                "layout": opts["layout"],
            }.items()
            if v is not None
        }
        try:
            version = version_pin_resolve(pin=opts["pin"])
            export = export_create(
                version=version, kind=opts["kind"], fmt=opts["fmt"], options=options, enqueue=False
            )
        except DatasetError as exc:
            raise CommandError(str(exc)) from exc
        started = time.perf_counter()
        done = export_run(export_id=export.pk) or DatasetExport.objects.get(pk=export.pk)
        result = {
            "export": done.pk,
            "status": done.status,
            "error": done.error,
            "records": done.manifest.get("records"),
            "steps": done.manifest.get("steps"),
            "images": done.manifest.get("images"),
            "bytes": done.bytes,
            "seconds": round(time.perf_counter() - started, 3),
            # ru_maxrss is in KiB on Linux: this process's peak resident memory.
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
        }
        if opts["json"]:
            self.stdout.write(json.dumps(result))
        else:
            self.stdout.write(", ".join(f"{k}={v}" for k, v in result.items()))
        if done.status != DatasetExport.Status.FINISHED:
            raise CommandError(f"export #{done.pk} {done.status}: {done.error}")
