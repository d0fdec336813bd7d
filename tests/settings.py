"""Test settings: the production settings with a fast password hasher and a per-process cache.

Hashing five personas' passwords with PBKDF2 dominated test set-up. Child processes the tests start
(daphne, celery) inherit DJANGO_SETTINGS_MODULE, so they verify these hashes too. The cache (login
attempt counts, used live tickets) is each process's own and emptied before every test, so one
test's wrong passwords cannot lock another's personas out; tests/webapp/accounts/test_throttle.py
runs the same code on the real Redis cache.
"""

import os
from urllib.parse import urlsplit, urlunsplit


def _own_redis_for_this_xdist_worker() -> None:
    """Under pytest-xdist (`-n 2`), each worker gets its own Redis database and channel prefix, and so
    do the processes its tests start (they inherit the environment): two workers' test databases give
    the same primary keys, so their channel groups and Celery queues must not meet."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or os.environ.get("FLYWHEEL_TEST_ISOLATED") == worker:
        return  # not under xdist, or a child process that inherited the worker's environment already
    os.environ["FLYWHEEL_TEST_ISOLATED"] = worker
    n = int(worker[2:])
    url = urlsplit(os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/0"))
    base = int(url.path.strip("/") or 0)
    os.environ["REDIS_URL"] = urlunsplit(url._replace(path=f"/{base + 1 + n}"))
    os.environ["CHANNELS_PREFIX"] = f"{os.environ.get('CHANNELS_PREFIX', 'flywheel')}-{worker}"


_own_redis_for_this_xdist_worker()

from webapp.settings import *  # noqa: E402, F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# Django's test Client builds the middleware chain anew for every Client, and WhiteNoise scans the
# whole static root (about a thousand files) each time: 0.18 s per Client, over a minute of the fast
# tests. Tests in this process look a static file up when it is asked for instead. The servers the tests
# start (daphne, through tests/procs.py) keep the production scan, so browser tests get the stylesheet
# and scripts the way users do.
WHITENOISE_AUTOREFRESH = os.environ.get("FLYWHEEL_TEST_SERVER") != "1"

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
