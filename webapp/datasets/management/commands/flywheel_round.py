"""Close the next flywheel round from the command line (in this process)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.datasets.rounds import RoundError, flywheel_round_close


class Command(BaseCommand):
    help = "Route every finished episode and write the next SFT and CT dataset versions."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--notes", default="")

    def handle(self, *args: Any, **opts: Any) -> None:
        try:
            iteration = flywheel_round_close(notes=opts["notes"])
        except RoundError as exc:
            raise CommandError(str(exc)) from exc
        stats = iteration.stats
        self.stdout.write(
            f"round {iteration.number}: {stats['episodes']} new episodes, P(V=1)={stats['p_v1']}, "
            f"routed {stats['total']['sft']} to SFT and {stats['total']['ct']} to CT"
        )
        self.stdout.write(json.dumps({"by_source": stats["by_source"]}))
