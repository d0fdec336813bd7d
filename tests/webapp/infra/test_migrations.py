"""Migrations are complete, and run backwards and forwards on PostgreSQL with the indexes pages need."""

from __future__ import annotations

import pytest
from django.core.management import call_command
from django.db import connection


@pytest.mark.django_db
def test_models_and_migrations_agree():
    # Exits non-zero (SystemExit) when a model change has no migration.
    call_command("makemigrations", "--check", "--dry-run", verbosity=0)


def _require_postgres() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("needs DATABASE_URL=postgres://… (make test runs this pass on PostgreSQL)")


@pytest.mark.postgres
def test_migrations_unapply_and_reapply_on_postgresql(transactional_db):
    _require_postgres()
    call_command("migrate", "episodes", "zero", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('episodes_step'), to_regclass('reviews_review')")
        assert cursor.fetchone() == (None, None)
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        cursor.execute("SELECT to_regclass('episodes_step') IS NOT NULL")
        assert cursor.fetchone()[0]


@pytest.mark.postgres
@pytest.mark.django_db
def test_postgresql_has_the_indexes_the_pages_query_by():
    _require_postgres()
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = current_schema()")
        indexes = dict(cursor.fetchall())
    for name in (
        "episode_task_status_idx",
        "episode_status_source_idx",
        "episode_policy_status_idx",
        "lease_reaper_idx",
        "metric_series_idx",
        "review_queue_idx",
    ):
        assert name in indexes, name
    # Steps of an episode in order come from the unique (episode, index) index.
    assert "(episode_id, index)" in indexes["step_unique_index_per_episode"]
    assert "WHERE" in indexes["lease_one_active_per_sandbox"]  # a partial unique index
