"""The policy-server token: from POLICY_SERVER_TOKEN, else the private file `make run` keeps in the var
dir, else empty (every heartbeat refused); a file others may read is refused at start."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CODE = "import django; from django.conf import settings; print(repr(settings.POLICY_SERVER_TOKEN))"

pytestmark = pytest.mark.engine


def _settings_token(var: Path, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {"PATH": "/usr/bin:/bin", "HOME": str(var.parent), "FLYWHEEL_VAR_DIR": str(var)}
    clean |= {"DJANGO_SETTINGS_MODULE": "webapp.settings", **env}
    args = [sys.executable, "-c", CODE]
    return subprocess.run(args, env=clean, capture_output=True, text=True, cwd=ROOT, check=False)


def test_the_token_comes_from_the_environment_else_the_var_dir_file_else_nothing(tmp_path):
    (tmp_path / "secret_key").write_text("k" * 50)
    (tmp_path / "secret_key").chmod(0o600)
    assert _settings_token(tmp_path).stdout.strip() == "''"

    token = tmp_path / "policy-server-token"
    token.write_text("p" * 40 + "\n")
    token.chmod(0o600)
    assert _settings_token(tmp_path).stdout.strip() == repr("p" * 40)
    assert _settings_token(tmp_path, POLICY_SERVER_TOKEN="e" * 20).stdout.strip() == repr("e" * 20)

    token.chmod(0o640)
    result = _settings_token(tmp_path)
    assert result.returncode != 0 and f"{token} is readable by others" in result.stderr
