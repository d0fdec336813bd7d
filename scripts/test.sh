#!/usr/bin/env bash
# The test tiers (see the README):
#   make test            set up, lint, the whole suite on real PostgreSQL and Redis servers started here,
#                        then what can differ on SQLite (tests marked `engine`) on the embedded default;
#                        ends with the 25 slowest tests and each phase's time against tests/budget.toml.
#   make test-fast       FAST=1: lint and the fast tests on SQLite (still a real Redis): the inner loop.
#   make verify-suites   VERIFY=1: the long sweeps in full (every task of every suite, every seed).
# Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
phases=()
phase_start=$t0
phase_end() {  # phase_end NAME: record the time since the last phase ended
  local now; now=$(date +%s)
  phases+=("$1 $((now - phase_start))")
  phase_start=$now
}

scripts/setup.sh test
phase_end setup
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

status=0
# Each phase's output is also kept, so the end of the run can name every failure of every phase
# (a CI log is often read from its tail only).
logs="$FLYWHEEL_VAR_DIR/test-logs"
rm -rf "$logs" && mkdir -p "$logs"

if [ "${VERIFY:-0}" = 1 ]; then
  start_redis
  phase_end services
  echo "[test] the long sweeps in full (FULL_SWEEPS=1), the benchmarks' runs on the inference engine too"
  scripts/vllm-env.sh > "$logs/vllm-env.log" 2>&1 || { tail -20 "$logs/vllm-env.log"; status=1; }
  FULL_SWEEPS=1 VLLM_PYTHON=$PWD/.venv-vllm/bin/python pytest -m sweep -p no:cacheprovider --durations=10 "$@" \
    2>&1 | tee "$logs/sweeps.log" || status=$?
  phase_end sweeps
else
  echo "[test] lint: ruff, mypy"
  ruff check .
  ruff format --check .
  mypy
  phase_end lint
  start_redis
  if [ "${FAST:-0}" = 1 ]; then
    phase_end services
    # One process: the fast tests are CPU-bound, and two on two cores starve the sandboxes' apps past
    # the step's settle window (an xterm repaint missed its 25 ms). TEST_WORKERS=2 runs two anyway.
    workers=${TEST_WORKERS:-0}
    echo "[test] fast tests on SQLite ($workers parallel workers)"
    pytest -m "not slow" $([ "$workers" -gt 0 ] && echo "-n $workers") --durations=25 "$@" 2>&1 \
      | tee "$logs/sqlite.log" || status=$?
    phase_end fast
  else
    # vLLM's own environment installs (a few minutes, the first time) while the main pass runs; the
    # tests that need it (marked vllm) run after, in a phase of their own.
    scripts/vllm-env.sh > "$logs/vllm-env.log" 2>&1 &
    vllm_env_pid=$!
    # OSWorld's metric functions (desktop-env) in their own environment, and OSWorld's applications
    # (LibreOffice, GIMP, VLC, Thunderbird), install meanwhile too; the tests marked osworld run in the
    # main pass, each first waiting until this install reports (tests/conftest.py).
    export OSWORLD_ENV_STATUS="$logs/osworld-env.status" OSWORLD_REQUIRED=1
    rm -f "$OSWORLD_ENV_STATUS"
    ( { scripts/osworld-env.sh && scripts/office-apps.sh; } > "$logs/osworld-env.log" 2>&1 \
        && echo ok > "$OSWORLD_ENV_STATUS" || echo failed > "$OSWORLD_ENV_STATUS" ) &
    osworld_env_pid=$!
    start_postgres
    phase_end services
    # Two processes (pytest-xdist), a test module each at a time: the slow tests mostly wait on sandboxes,
    # browsers and servers. TEST_WORKERS=0 runs them in this process.
    workers=${TEST_WORKERS:-2}
    echo "[test] the whole suite on PostgreSQL ($workers parallel workers)"
    pytest -m "not vllm" $([ "$workers" -gt 0 ] && echo "-n $workers --dist loadfile") \
      --durations=25 "$@" 2>&1 | tee "$logs/postgres.log" || status=$?
    phase_end postgres
    echo "[test] the inference engine: a real vLLM server (marked vllm), on PostgreSQL"
    if ! wait "$osworld_env_pid" || [ "$(cat "$OSWORLD_ENV_STATUS" 2>/dev/null)" != ok ]; then
      echo "[test] OSWorld's environment or applications failed to install:"; tail -20 "$logs/osworld-env.log"
      echo "FAILED scripts/osworld-env.sh + scripts/office-apps.sh" >> "$logs/serving.log"
      status=1
    fi
    if wait "$vllm_env_pid"; then
      VLLM_PYTHON=$PWD/.venv-vllm/bin/python pytest -m "vllm and not sweep" --durations=10 "$@" 2>&1 \
        | tee -a "$logs/serving.log" || status=$?
    else
      echo "[test] scripts/vllm-env.sh failed:"; grep -v "^WARNING: Location" "$logs/vllm-env.log" | tail -20
      echo "FAILED scripts/vllm-env.sh (the vLLM environment)" >> "$logs/serving.log"
      status=1
    fi
    phase_end serving
    echo "[test] what can differ on SQLite (marked engine), on the embedded default"
    DATABASE_URL= pytest -m "engine and not slow and not postgres" -p no:cacheprovider -q "$@" 2>&1 \
      | tee "$logs/sqlite.log" || status=$?
    phase_end sqlite
  fi
fi

for f in "$logs"/*.log; do
  if grep -qE '^(FAILED|ERROR) ' "$f"; then
    echo "[test] failures in the $(basename "$f" .log) phase:"
    grep -E '^(FAILED|ERROR) ' "$f" | cut -c1-400
  fi
done
# The slowest tests of the main phase, then each phase's time against its budget (fails past one).
tier=test main_log=$logs/postgres.log
if [ "${VERIFY:-0}" = 1 ]; then tier=verify main_log=$logs/sweeps.log
elif [ "${FAST:-0}" = 1 ]; then tier=fast main_log=$logs/sqlite.log; fi
printf '%s\n' "${phases[@]}" | python scripts/budget.py --tier "$tier" --log "$main_log" || status=$((status == 0 ? 3 : status))
echo "[test] finished in $(( $(date +%s) - t0 )) s with status $status"
exit $status
