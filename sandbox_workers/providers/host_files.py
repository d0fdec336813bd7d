"""The project's files that sandboxes bind read-only, readable by sandbox uids whatever the umask.

Every provider that binds a folder of the project into its sandboxes names it here: the virtual
environment's site-packages (the `mcp` SDK an X desktop's MCP servers import, the `miniwob` package's
pages a browser sandbox loads), the MCP servers' own package and the games' pages. The sandbox host makes
them readable at start (`make_readable`; `scripts/setup.sh` runs this module too, right after it installs
the environment), so a checkout cloned or a `.venv` made under `umask 077` still works; what it cannot
fix (a parent folder above the project that others may not pass) is logged and named in each sandbox's
start error (`check_binds` in the confinement). Secrets (the var dir, keys) are never among these trees.

`python -m sandbox_workers.providers.host_files` does it from the command line (exit 1 naming each
problem).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from pathlib import Path

from sandbox_workers import miniwob
from sandbox_workers.base import EnvError
from sandbox_workers.providers.browser import gamefiles
from sandbox_workers.providers.confine.exposed import Exposure, expose
from sandbox_workers.providers.xdesktop import mcp

log = logging.getLogger(__name__)

PROJECT = Path(__file__).resolve().parents[2]
"""The checkout (the folder holding sandbox_workers/)."""


def bound_trees() -> list[Path]:
    """Every folder of the project a sandbox binds (outermost only: one inside another is left out)."""
    found = [mcp.site_packages(), mcp.SERVERS_DIR]
    for optional in (miniwob.html_dir, gamefiles.html_dir):
        with contextlib.suppress(EnvError, miniwob.MiniWobError):  # a suite not installed binds nothing
            found.append(optional())
    trees = sorted({p.resolve() for p in found})
    return [t for t in trees if not any(o != t and o in t.parents for o in trees)]


def project_roots() -> list[Path]:
    """The folders this project owns: the checkout and the virtual environment it runs from."""
    return [PROJECT, Path(sys.prefix).resolve()]


def make_readable() -> Exposure:
    """Grant sandbox uids read on every bound tree (only needed, and only done, when sandboxes run as
    uids of their own: a root host); logs what changed and each problem left."""
    if os.geteuid() != 0:
        return Exposure()
    done = expose(bound_trees(), roots=project_roots())
    if done.changed:
        log.info("made %d of the project's files readable by sandbox users (first: %s)",
                 len(done.changed), done.changed[0])  # fmt: skip
    for problem in done.problems:
        log.error("sandboxes cannot read the project's files: %s", problem)
    return done


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    return 1 if make_readable().problems else 0  # each problem was logged


if __name__ == "__main__":
    raise SystemExit(main())
