"""Test settings: the production settings with a fast password hasher.

Hashing five personas' passwords with PBKDF2 dominated test set-up. Child processes the tests start
(daphne, celery) inherit DJANGO_SETTINGS_MODULE, so they verify these hashes too.
"""

from webapp.settings import *  # noqa: F403

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
