"""What the platform writes into its var dir is its user's alone: the SQLite database with its sessions
(and its -wal and -shm files), screenshots, exports and demo credentials are 0600 in 0700 folders,
whatever the umask of the process that writes them (a shell's is usually 022)."""

from __future__ import annotations

import os
import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.core.files.base import ContentFile

from webapp.common.storage import ContentAddressedStorage
from webapp.env import database_config


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def lax_umask() -> Iterator[None]:
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


def test_the_sqlite_database_and_its_wal_and_shm_are_private(tmp_path: Path, lax_umask: None) -> None:
    var = tmp_path / "var"
    config = database_config("sqlite:///", var_dir=var, conn_max_age=0)
    db = Path(config["NAME"])
    assert (mode(var), mode(db)) == (0o700, 0o600)
    # The real SQLite, in the WAL mode the settings ask for, with a session row written.
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("CREATE TABLE django_session (session_key TEXT, session_data TEXT)")
    conn.execute("INSERT INTO django_session VALUES ('k', 'secret')")
    conn.commit()
    wal, shm = db.with_name("db.sqlite3-wal"), db.with_name("db.sqlite3-shm")
    assert wal.exists() and shm.exists()
    assert {p.name: mode(p) for p in (db, wal, shm)} == {p.name: 0o600 for p in (db, wal, shm)}
    conn.close()


def test_an_older_install_s_readable_database_is_made_private(tmp_path: Path, lax_umask: None) -> None:
    db = tmp_path / "db.sqlite3"
    sqlite3.connect(db).close()
    wal = tmp_path / "db.sqlite3-wal"
    wal.write_bytes(b"")
    for p in (db, wal):
        p.chmod(0o644)
    database_config(f"sqlite:///{db}", var_dir=tmp_path, conn_max_age=0)
    assert (mode(db), mode(wal)) == (0o600, 0o600)


def test_screenshots_and_their_folders_are_private(tmp_path: Path, lax_umask: None, settings) -> None:
    storage = ContentAddressedStorage(location=tmp_path / "media")
    name = storage.save("screens/ab/cd/abcd.png", ContentFile(b"\x89PNG..."))
    path = Path(storage.path(name))
    assert mode(path) == 0o600
    folders = [
        tmp_path / "media",
        *(tmp_path / "media" / p for p in ("screens", "screens/ab", "screens/ab/cd")),
    ]
    assert {str(f): mode(f) for f in folders} == {str(f): 0o700 for f in folders}
