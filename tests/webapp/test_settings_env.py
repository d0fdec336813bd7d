"""Settings come from the environment with strict parsing: a bad value fails with its name."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from webapp.env import database_config, env_bool, env_ice_servers, env_int, env_list, env_str, env_url

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("raw", "expected"), [("1", True), ("TRUE", True), ("off", False), ("No", False)])
def test_env_bool_accepts_the_usual_spellings(raw, expected):
    assert env_bool("X", False, environ={"X": raw}) is expected


def test_env_bool_rejects_anything_else_naming_the_variable():
    with pytest.raises(ImproperlyConfigured, match="DEBUG='maybe' is not a boolean"):
        env_bool("DEBUG", False, environ={"DEBUG": "maybe"})


def test_env_int_checks_type_and_range():
    assert env_int("N", 3, environ={}) == 3
    assert env_int("N", 3, environ={"N": " 12 "}) == 12
    with pytest.raises(ImproperlyConfigured, match="N='12a' is not an integer"):
        env_int("N", 3, environ={"N": "12a"})
    with pytest.raises(ImproperlyConfigured, match="below the minimum 1"):
        env_int("N", 3, minimum=1, environ={"N": "0"})


def test_ice_servers_are_the_browsers_list_checked_at_start_up():
    assert env_ice_servers("ICE", environ={}) == []
    raw = (
        '[{"urls": "stun:stun.example.org:3478"},'
        ' {"urls": ["turn:turn.example.org:3478?transport=udp", "turns:turn.example.org:5349"],'
        '  "username": "lab", "credential": "secret"}]'
    )
    assert env_ice_servers("ICE", environ={"ICE": raw}) == [
        {"urls": ["stun:stun.example.org:3478"]},
        {"urls": ["turn:turn.example.org:3478?transport=udp", "turns:turn.example.org:5349"],
         "username": "lab", "credential": "secret"},
    ]  # fmt: skip
    for bad, why in [
        ("stun:x", "not JSON"),
        ('{"urls": "stun:x"}', "JSON list"),
        ('[{"url": "stun:x"}]', r"ICE\[0\] must be an object with urls"),
        ('[{"urls": "http://x"}]', "stun:, turn: or turns:"),
        ('[{"urls": "turn:x:3478"}]', "needs a username and a credential"),
        ('[{"urls": "stun:x", "password": "p"}]', "unknown keys"),
    ]:
        with pytest.raises(ImproperlyConfigured, match=why):
            env_ice_servers("ICE", environ={"ICE": bad})


def test_env_list_refuses_empty_items():
    assert env_list("H", ["a"], environ={"H": "x, y"}) == ["x", "y"]
    with pytest.raises(ImproperlyConfigured, match="empty item"):
        env_list("H", [], environ={"H": "x,,y"})


def test_env_str_required_without_default():
    with pytest.raises(ImproperlyConfigured, match="SECRET must be set"):
        env_str("SECRET", environ={"SECRET": "  "})


def test_env_url_checks_scheme_and_host():
    assert env_url("R", "redis://h:1/0", schemes=("redis",), environ={}) == "redis://h:1/0"
    with pytest.raises(ImproperlyConfigured, match="scheme 'mysql'"):
        env_url("DATABASE_URL", "", schemes=("sqlite", "postgres"), environ={"DATABASE_URL": "mysql://h/db"})
    with pytest.raises(ImproperlyConfigured, match="has no host"):
        env_url("R", "", schemes=("redis",), environ={"R": "redis:///0"})


def test_database_config_sqlite_defaults_to_wal_in_var(tmp_path):
    config = database_config("sqlite:///", var_dir=tmp_path, conn_max_age=0)
    assert config["NAME"] == str(tmp_path / "db.sqlite3")
    assert "journal_mode=WAL" in config["OPTIONS"]["init_command"]
    assert config["OPTIONS"]["transaction_mode"] == "IMMEDIATE"
    assert database_config("sqlite:////abs/x.db", var_dir=tmp_path, conn_max_age=0)["NAME"] == "/abs/x.db"


def test_database_config_postgres_uses_psycopg_backend(tmp_path):
    config = database_config("postgres://u:p@db.example:5433/fly", var_dir=tmp_path, conn_max_age=60)
    assert config["ENGINE"] == "django.db.backends.postgresql"
    assert (config["HOST"], config["PORT"], config["NAME"], config["USER"]) == (
        "db.example",
        5433,
        "fly",
        "u",
    )


def _settings_import(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    base = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "DATABASE_URL")}
    base.update(env)
    code = "import django; from django.conf import settings; settings.INSTALLED_APPS; print('ok')"
    return subprocess.run(
        [sys.executable, "-c", code],
        env={**base, "DJANGO_SETTINGS_MODULE": "webapp.settings"},
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_production_settings_refuse_to_start_without_secret_key(tmp_path):
    result = _settings_import({"DEBUG": "0", "FLYWHEEL_VAR_DIR": str(tmp_path)})
    assert result.returncode != 0
    assert "SECRET_KEY must be set when DEBUG is off" in result.stderr
    assert not (tmp_path / "secret_key").exists()  # never invented with DEBUG off


def _clean_env(var_dir: Path, **extra: str) -> dict[str, str]:
    """What a newcomer's shell holds: no DEBUG, no SECRET_KEY, no Django settings module."""
    return {"PATH": "/usr/bin:/bin", "HOME": str(var_dir.parent), "FLYWHEEL_VAR_DIR": str(var_dir), **extra}


@pytest.mark.django_db(transaction=True)
def test_readme_commands_work_without_debug_on_a_make_run_install(tmp_path):
    from django.contrib.auth import get_user_model

    from tests.procs import child_db_env

    var = tmp_path / "var"
    # `make run` runs with DEBUG=1, which writes the checkout's key into the var dir...
    made = _settings_import({"DEBUG": "1", "FLYWHEEL_VAR_DIR": str(var)})
    assert made.returncode == 0, made.stderr
    assert (var / "secret_key").stat().st_mode & 0o777 == 0o600
    # ...and the README's commands, typed in a plain shell afterwards, read it.
    env = _clean_env(var, DATABASE_URL=child_db_env()["DATABASE_URL"])
    result = subprocess.run(
        [sys.executable, "manage.py", "create_user", "maria", "--role", "annotator"],
        env=env, capture_output=True, text=True, cwd=ROOT, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "password:" in result.stdout
    assert get_user_model().objects.filter(username="maria").exists()


def _check(var_dir: Path) -> subprocess.CompletedProcess[str]:
    args = [sys.executable, "manage.py", "check"]
    return subprocess.run(args, env=_clean_env(var_dir), capture_output=True, text=True, cwd=ROOT)


def test_a_key_file_others_may_read_is_refused(tmp_path):
    key = tmp_path / "secret_key"
    key.write_text("k" * 50)
    key.chmod(0o644)
    result = _check(tmp_path)
    assert result.returncode != 0
    assert f"{key} is readable by others" in result.stderr
    key.chmod(0o600)
    result = _check(tmp_path)
    assert result.returncode == 0, result.stderr


def test_settings_refuse_a_bad_database_url():
    result = _settings_import({"DEBUG": "0", "SECRET_KEY": "k" * 40, "DATABASE_URL": "mysql://x/y"})
    assert result.returncode != 0
    assert "DATABASE_URL='mysql://x/y' has scheme 'mysql'" in result.stderr


def test_training_timings_come_from_the_environment_and_must_be_consistent():
    code = "from django.conf import settings as s; print(s.TRAINING_STALE_S, s.TRAINING_HEARTBEAT_S)"
    env = {
        "DEBUG": "0",
        "SECRET_KEY": "k" * 40,
        "TRAINING_STALE_SECONDS": "120",
        "TRAINING_HEARTBEAT_SECONDS": "5",
    }
    base = {k: v for k, v in os.environ.items() if k not in ("DEBUG", "SECRET_KEY", "DATABASE_URL")}
    ok = subprocess.run(
        [sys.executable, "-c", code],
        env={**base, **env, "DJANGO_SETTINGS_MODULE": "webapp.settings"},
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert ok.returncode == 0 and ok.stdout.split() == ["120", "5"], ok.stderr
    result = _settings_import({**env, "TRAINING_STALE_SECONDS": "5"})
    assert result.returncode != 0
    assert "TRAINING_STALE_SECONDS (5) must be longer than TRAINING_HEARTBEAT_SECONDS (5)" in result.stderr


@pytest.mark.django_db
def test_sqlite_runs_in_wal_mode():
    from django.db import connection

    if connection.vendor != "sqlite":
        pytest.skip("this run is on PostgreSQL; the SQLite pass of make test covers it")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA journal_mode")
        assert cursor.fetchone()[0] == "wal"


def test_the_sandbox_host_token_make_run_keeps_is_read_when_unset(tmp_path):
    (tmp_path / "secret_key").write_text("k" * 50)
    (tmp_path / "secret_key").chmod(0o600)
    token = tmp_path / "sandbox-host-token"
    token.write_text("t" * 40 + "\n")
    token.chmod(0o600)
    code = "import django; from django.conf import settings; print(settings.SANDBOX_HOST_TOKEN)"
    args = [sys.executable, "-c", code]
    env = _clean_env(tmp_path, DJANGO_SETTINGS_MODULE="webapp.settings")
    result = subprocess.run(args, env=env, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "t" * 40
    token.chmod(0o640)
    result = subprocess.run(args, env=env, capture_output=True, text=True, cwd=ROOT)
    assert result.returncode != 0
    assert f"{token} is readable by others" in result.stderr
