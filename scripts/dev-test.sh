#!/usr/bin/env bash
# A developer's targeted pytest run that keeps out of the way of other runs on the same machine
# (another session, `make test`): its own Redis, var dir, pytest basetemp and sandbox uid range.
#   scripts/dev-test.sh [-n NAME] [--pg] PYTEST-ARGS...
# NAME (default "dev") names /tmp/flywheel-dev-NAME; --pg also starts a throwaway PostgreSQL (else SQLite).
set -euo pipefail
cd "$(dirname "$0")/.."
name=dev pg=0
while [ $# -gt 0 ]; do
  case "$1" in
    -n) name=$2; shift 2 ;;
    --pg) pg=1; shift ;;
    *) break ;;
  esac
done
# shellcheck source=scripts/services.sh
source scripts/services.sh
trap cleanup_all EXIT
base=/tmp/flywheel-dev-$name
mkdir -p "$base" && chmod 755 "$base"
export PATH="$PWD/.venv/bin:$PATH" FLYWHEEL_VAR_DIR="$base/var"
mkdir -p "$FLYWHEEL_VAR_DIR"
unset DATABASE_URL
export DEBUG=0 SECURE_COOKIES=0 SECRET_KEY=${SECRET_KEY:-test-only-secret-key-$(head -c 24 /dev/urandom | base64)}
# A uid range of its own: a stable number from the name, past make test's (its workers use 0-2999).
export FLYWHEEL_TEST_SLOT_OFFSET=${FLYWHEEL_TEST_SLOT_OFFSET:-$(( 3000 + ($(printf '%s' "$name" | cksum | cut -d' ' -f1) % 40) * 1000 ))}
start_redis >/dev/null
[ "$pg" = 1 ] && start_postgres >/dev/null
[ -d "$FLYWHEEL_VAR_DIR/static" ] || python manage.py collectstatic --no-input -v0
rm -rf "$base/pytest"
pytest -p no:cacheprovider --basetemp="$base/pytest" "$@"
