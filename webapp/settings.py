"""Django settings, all read from the environment (see webapp/env.py and README's table)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from webapp.env import database_config, env_bool, env_ice_servers, env_int, env_list, env_str, env_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("FLYWHEEL_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)


def _private_file(path: Path, *, name: str, min_len: int) -> str:
    """A secret kept in a file only this user may read (what `make run` writes into the var dir)."""
    if path.stat().st_mode & 0o077:
        raise ImproperlyConfigured(f"{path} is readable by others: `chmod 600 {path}`, or set {name}")
    value = path.read_text().strip()
    if len(value) < min_len:
        raise ImproperlyConfigured(f"{path} must hold a {name} of at least {min_len} characters")
    return value


def _secret_key() -> str:
    key = env_str("SECRET_KEY", None)
    if key:
        if len(key) < 32:
            raise ImproperlyConfigured("SECRET_KEY must be at least 32 characters")
        return key
    # One key per var dir, kept so sessions survive restarts: `make run` writes it, and the README's
    # `manage.py` commands read it without DEBUG. It is never generated with DEBUG off (a deployment
    # that forgot SECRET_KEY must not quietly invent one), and a key others may read is refused.
    path = VAR_DIR / "secret_key"
    if not path.exists():
        if not DEBUG:
            raise ImproperlyConfigured(
                f"SECRET_KEY must be set when DEBUG is off (or {path} must hold one: `make run` writes it)"
            )
        VAR_DIR.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_urlsafe(50))
    return _private_file(path, name="SECRET_KEY", min_len=32)


SECRET_KEY = _secret_key()
ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["localhost", "127.0.0.1", "[::1]"])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "channels",
    "django_celery_results",
    "django_htmx",
    "template_partials",
    "ninja",
    "webapp.accounts",
    "webapp.catalog",
    "webapp.policies",
    "webapp.sandboxes",
    "webapp.episodes",
    "webapp.rollouts",
    "webapp.annotation",
    "webapp.reviews",
    "webapp.datasets",
    "webapp.training",
    "webapp.dashboards",
    "webapp.demo",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "webapp.common.middleware.RequestGuardMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
]

ROOT_URLCONF = "webapp.urls"
ASGI_APPLICATION = "webapp.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "webapp.accounts.context_processors.navigation",
            ],
        },
    }
]

# --- Database -------------------------------------------------------------------------------------
DATABASE_URL = env_url("DATABASE_URL", "sqlite:///", schemes=("sqlite", "postgres", "postgresql"))
DATABASES = {
    "default": database_config(
        DATABASE_URL, var_dir=VAR_DIR, conn_max_age=env_int("DB_CONN_MAX_AGE", 60, minimum=0)
    )
}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Every request's writes commit together or not at all.
for _db in DATABASES.values():
    _db["ATOMIC_REQUESTS"] = True

# --- Redis: Celery broker and Channels layer --------------------------------------------------------
# Shared secret between the web app and its sandbox hosts (heartbeats in, host API calls out).
# Unset, it is the one `make run` generated into the var dir (so `manage.py tasks_verify` reaches its host).
SANDBOX_HOST_TOKEN = env_str("SANDBOX_HOST_TOKEN", "") or (
    _private_file(_token, name="SANDBOX_HOST_TOKEN", min_len=16)
    if (_token := VAR_DIR / "sandbox-host-token").exists()
    else ""
)
SANDBOX_HOST_GRACE_SECONDS = env_int("SANDBOX_HOST_GRACE_SECONDS", 30, minimum=1)
# Shared secret between the web app and its policy servers (their heartbeats in); unset, the one `make run`
# generated into the var dir; empty, every policy server heartbeat is refused.
POLICY_SERVER_TOKEN = env_str("POLICY_SERVER_TOKEN", "") or (
    _private_file(_ps_token, name="POLICY_SERVER_TOKEN", min_len=16)
    if (_ps_token := VAR_DIR / "policy-server-token").exists()
    else ""
)
# A policy server silent this long is offline: no rollout is sent to it.
POLICY_SERVER_GRACE_S = env_int("POLICY_SERVER_GRACE_S", 30, minimum=1)
# Live view tickets (signed, tied to the session): how long one may wait before its socket connects.
LIVE_TICKET_SECONDS = env_int("LIVE_TICKET_SECONDS", 60, minimum=1)
# WebRTC beyond loopback: STUN/TURN servers (JSON, see webapp.env.env_ice_servers) for the browsers and
# the server's peers; a page whose peer has not connected in LIVE_WEBRTC_CONNECT_S (ICE failed: UDP
# blocked, no TURN) falls back to a WebSocket transport by itself.
LIVE_ICE_SERVERS = env_ice_servers("LIVE_ICE_SERVERS")
LIVE_WEBRTC_CONNECT_S = env_int("LIVE_WEBRTC_CONNECT_S", 8, minimum=1)
# Rollouts: a running episode whose worker has been silent this long is reaped and re-run; a queued
# one that no worker started in ROLLOUT_REQUEUE_SECONDS is enqueued again (starting it is idempotent).
ROLLOUT_STALE_SECONDS = env_int("ROLLOUT_STALE_SECONDS", 90, minimum=2)
ROLLOUT_HEARTBEAT_SECONDS = env_int("ROLLOUT_HEARTBEAT_SECONDS", 10, minimum=1)
ROLLOUT_REQUEUE_SECONDS = env_int("ROLLOUT_REQUEUE_SECONDS", 600, minimum=5)
ROLLOUT_LEASE_WAIT_SECONDS = env_int("ROLLOUT_LEASE_WAIT_SECONDS", 120, minimum=0)
# How long an episode waits for a policy server of its version (starting, restarting) before it ends
# as an environment error and is re-run.
ROLLOUT_POLICY_WAIT_SECONDS = env_int("ROLLOUT_POLICY_WAIT_SECONDS", 120, minimum=0)
# A demonstration's sandbox stays leased this long without a sign of life from its page (renewed
# every half minute while the annotator is connected), so a reload or a short outage loses nothing.
DEMO_LEASE_SECONDS = env_int("DEMO_LEASE_SECONDS", 600, minimum=30)
# Training: a worker heartbeats its run every TRAINING_HEARTBEAT_SECONDS from a thread; the beat
# reaper re-queues a run silent for TRAINING_STALE_SECONDS (it resumes from its last checkpoint); a
# running trainer reads its stop request every TRAINING_STOP_POLL_SECONDS.
TRAINING_HEARTBEAT_S = env_int("TRAINING_HEARTBEAT_SECONDS", 10, minimum=1)
TRAINING_STALE_S = env_int("TRAINING_STALE_SECONDS", 60, minimum=2)
TRAINING_STOP_POLL_S = env_int("TRAINING_STOP_POLL_SECONDS", 2, minimum=1)
if TRAINING_STALE_S <= TRAINING_HEARTBEAT_S:
    raise ImproperlyConfigured(
        f"TRAINING_STALE_SECONDS ({TRAINING_STALE_S}) must be longer than TRAINING_HEARTBEAT_SECONDS "
        f"({TRAINING_HEARTBEAT_S}), or live runs would be reaped"
    )

REDIS_URL = env_url("REDIS_URL", "redis://127.0.0.1:6379/0", schemes=("redis", "rediss", "unix"))
# Every consumer waits for its channel's messages in a blocking read (channels_redis: BZPOPMIN, 5 s at
# a time), so a socket read timeout must be longer than that wait: redis-py 8's 5 s default closed
# every idle WebSocket with 1011. The timeout is set here, not inherited, and only has to catch a dead
# connection. (Celery's broker passes its own socket_timeout=None to redis-py; see test_socket_lifetime.)
REDIS_SOCKET_TIMEOUT_S = 30
CHANNEL_LAYERS = {
    "default": {
        "BACKEND": "channels_redis.core.RedisChannelLayer",
        "CONFIG": {
            "hosts": [
                {
                    "address": REDIS_URL,
                    "socket_timeout": REDIS_SOCKET_TIMEOUT_S,
                    "socket_connect_timeout": 5,
                }
            ],
            "prefix": env_str("CHANNELS_PREFIX", "flywheel"),
        },
    }
}

# The cache every web process shares: login attempt counts and used live tickets live here.
CACHES = {
    "default": {
        "BACKEND": "django.core.cache.backends.redis.RedisCache",
        "LOCATION": REDIS_URL,
        "KEY_PREFIX": env_str("CHANNELS_PREFIX", "flywheel"),
        "OPTIONS": {"socket_timeout": 5, "socket_connect_timeout": 5},
    }
}

# --- Celery -----------------------------------------------------------------------------------------
CELERY_BROKER_URL = REDIS_URL
CELERY_RESULT_BACKEND = "django-db"
CELERY_RESULT_EXTENDED = True
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_ACKS_LATE = True
CELERY_TASK_REJECT_ON_WORKER_LOST = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1
CELERY_TASK_ALWAYS_EAGER = False
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# --- Auth -------------------------------------------------------------------------------------------
LOGIN_URL = "accounts:login"
LOGIN_REDIRECT_URL = "dashboards:home"
LOGOUT_REDIRECT_URL = "accounts:login"
AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
# Login throttling (webapp/accounts/throttle.py): attempts per username and per client address in a
# window that opens with the first; past either limit every attempt waits for the window to close.
LOGIN_MAX_FAILURES_PER_USER = env_int("LOGIN_MAX_FAILURES_PER_USER", 10, minimum=1)
LOGIN_MAX_FAILURES_PER_ADDRESS = env_int("LOGIN_MAX_FAILURES_PER_ADDRESS", 50, minimum=1)
LOGIN_LOCKOUT_SECONDS = env_int("LOGIN_LOCKOUT_SECONDS", 900, minimum=1)
SESSION_COOKIE_HTTPONLY = True
SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", not DEBUG)
CSRF_COOKIE_SECURE = SESSION_COOKIE_SECURE
X_FRAME_OPTIONS = "DENY"

# --- Static and media ---------------------------------------------------------------------------
STATIC_URL = "static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    # Screenshots and other observation files: content-addressed, never served publicly
    # (views check who may see the episode before streaming a file).
    "default": {
        "BACKEND": "webapp.common.storage.ContentAddressedStorage",
        "OPTIONS": {"location": env_str("MEDIA_ROOT", str(VAR_DIR / "media"))},
    },
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
MEDIA_ROOT = STORAGES["default"]["OPTIONS"]["location"]
# Screenshots of people's sessions are served only through access checks: on disk, the platform's
# user alone reads them.
FILE_UPLOAD_PERMISSIONS = 0o600
FILE_UPLOAD_DIRECTORY_PERMISSIONS = 0o700
WHITENOISE_USE_FINDERS = DEBUG
DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("UPLOAD_MAX_BYTES", 20 * 1024 * 1024, minimum=1024)
# The OSWorld upload takes a domain's task files at once (its largest Linux domain has 101); more is a
# 400 naming the limit (webapp.common.middleware), not Django's bare error page.
DATA_UPLOAD_MAX_NUMBER_FILES = env_int("UPLOAD_MAX_FILES", 500, minimum=1)

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO")},
    "loggers": {"daphne": {"level": "WARNING"}, "django.channels.server": {"level": "WARNING"}},
}

# Dataset exports: finished folders (and their temporary ones while being written) live here.
EXPORTS_DIR = Path(env_str("EXPORTS_DIR", str(VAR_DIR / "exports")))
