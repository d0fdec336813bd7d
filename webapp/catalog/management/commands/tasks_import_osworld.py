"""manage.py tasks_import_osworld PATH…: import OSWorld task files (or folders of them) into the catalog."""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from webapp.catalog.services import osworld_import


class Command(BaseCommand):
    help = (
        "Import OSWorld task files (evaluation_examples/examples/<domain>/<id>.json; a folder is searched "
        "for *.json) into the suites osworld-<domain>; every file refused is listed with its reason."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", help="task files or folders")

    def handle(self, *args: Any, **opts: Any) -> None:
        files: list[Path] = []
        for raw in opts["paths"]:
            path = Path(raw)
            if path.is_dir():
                files.extend(sorted(path.rglob("*.json")))
            elif path.is_file():
                files.append(path)
            else:
                raise CommandError(f"{raw}: no such file or folder")
        if not files:
            raise CommandError("no .json task files found")
        result = osworld_import(paths=files)
        for slug, (created, changed) in sorted(result.counts.items()):
            self.stdout.write(f"suite {slug}: {created} new, {changed} changed")
        for path, slug in result.known:
            self.stdout.write(f"{path}: imported before as {slug}, which it still is (one task per file)")
        if result.unavailable:
            n = len(result.unavailable)
            self.stdout.write(f"{n} of them cannot be started yet: no sandbox host serves their profile now")
        refused = result.refused
        self.stdout.write(f"imported {len(result.slugs)} of {len(files)} task files; refused {len(refused)}:")
        reasons: Counter[str] = Counter()
        for path, why in refused:
            self.stdout.write(f"  {path}: {why}")
            reasons[re.sub(r"\[\d+\]", "[i]", re.sub(r"^OSWorld task [^:]+: ", "", why))[:160]] += 1
        if refused:
            self.stdout.write("refusals by reason:")
            for why, n in reasons.most_common():
                self.stdout.write(f"  {n:4}  {why}")
