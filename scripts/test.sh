#!/usr/bin/env bash
# `make test`: set up, lint, then the whole suite against real Redis and PostgreSQL servers started
# here, then the fast tests again on the embedded default (SQLite). `FAST=1` runs only the fast tests
# on SQLite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
scripts/setup.sh test
# shellcheck source=scripts/services.sh
source scripts/services.sh
trap cleanup_all EXIT

export PATH="$PWD/.venv/bin:$PATH"
export FLYWHEEL_VAR_DIR=${FLYWHEEL_VAR_DIR:-$PWD/var/test}
mkdir -p "$FLYWHEEL_VAR_DIR"
unset DATABASE_URL
# Tests run the production settings (DEBUG off, manifest static files) over plain-HTTP loopback.
export DEBUG=0 SECURE_COOKIES=0 SECRET_KEY=${SECRET_KEY:-test-only-secret-key-$(head -c 24 /dev/urandom | base64)}
python manage.py collectstatic --no-input -v0

echo "[test] lint: ruff, mypy"
ruff check .
ruff format --check .
mypy

start_redis
status=0
# Each phase's output is also kept, so the end of the run can name every failure of both phases
# (a CI log is often read from its tail only).
logs="$FLYWHEEL_VAR_DIR/test-logs"
rm -rf "$logs" && mkdir -p "$logs"
if [ "${FAST:-0}" = 1 ]; then
  echo "[test] fast tests on SQLite"
  pytest -m "not slow" "$@" 2>&1 | tee "$logs/sqlite.log" || status=$?
else
  start_postgres
  echo "[test] the whole suite on PostgreSQL"
  pytest "$@" 2>&1 | tee "$logs/postgres.log" || status=$?
  echo "[test] fast tests again on the embedded default, SQLite"
  DATABASE_URL= pytest -m "not slow and not postgres" -p no:cacheprovider -q "$@" 2>&1 \
    | tee "$logs/sqlite.log" || status=$?
fi
for f in "$logs"/*.log; do
  if grep -qE '^(FAILED|ERROR) ' "$f"; then
    echo "[test] failures in the $(basename "$f" .log) phase:"
    grep -E '^(FAILED|ERROR) ' "$f" | cut -c1-400
  fi
done
echo "[test] finished in $(( $(date +%s) - t0 )) s with status $status"
exit $status
