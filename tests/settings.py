"""Test settings: the production settings with a fast password hasher and a per-process cache.

Hashing five personas' passwords with PBKDF2 dominated test set-up. Child processes the tests start
(daphne, celery) inherit DJANGO_SETTINGS_MODULE, so they verify these hashes too. The cache (login
attempt counts, used live tickets) is each process's own and emptied before every test, so one
test's wrong passwords cannot lock another's personas out; tests/webapp/accounts/test_throttle.py
runs the same code on the real Redis cache.
"""

from webapp.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
