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
# How fast this machine is against the one the budgets were set on (measured idle, before and after).
speed() { .venv/bin/python scripts/speed.py 2>/dev/null || echo '{"factor": 1.0}'; }
speed_before=$(speed)
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
elif [ "${FAST:-0}" = 1 ]; then
  echo "[test] lint: ruff, mypy"
  ruff check .
  ruff format --check .
  mypy
  phase_end lint
  start_redis
  phase_end services
  # One process: the fast tests are CPU-bound, and two on two cores starve the sandboxes' apps past
  # the step's settle window (an xterm repaint missed its 25 ms). TEST_WORKERS=2 runs two anyway.
  workers=${TEST_WORKERS:-0}
  echo "[test] fast tests on SQLite ($workers parallel workers)"
  pytest -m "not slow" $([ "$workers" -gt 0 ] && echo "-n $workers") --durations=25 "$@" 2>&1 \
    | tee "$logs/sqlite.log" || status=$?
  phase_end fast
else
  # Every pytest session here gets a --basetemp of its own: a session started with pytest's default
  # makes /tmp/pytest-of-<user> private again (0700), and the sandboxes of a session already running
  # (whose uids must traverse it) then fail to start.
  tmp=$(mktemp -d /tmp/flywheel-tests.XXXXXX)
  CLEANUP+=("rm -rf $tmp")
  # Lint runs beside the main pass (a failure still fails the run; its output is printed after it).
  echo "[test] lint: ruff, mypy (beside the main pass)"
  ( lint_t0=$(date +%s)
    { ruff check . && ruff format --check . && mypy; } > "$logs/lint.out" 2>&1 \
      || { cat "$logs/lint.out"; echo "FAILED lint: ruff or mypy (above)"; } > "$logs/lint.log"
    echo "[test] lint took $(( $(date +%s) - lint_t0 )) s" >> "$logs/lint.out" ) &
  lint_pid=$!
  phase_end lint
  start_redis
  # vLLM's own environment and OSWorld's (desktop-env's metric functions, and the applications:
  # LibreOffice, GIMP, VLC, Thunderbird) install meanwhile; the tests that need them run at the end of
  # the main pass (tests/conftest.py orders them last), each first waiting until its install reports.
  export VLLM_PYTHON=$PWD/.venv-vllm/bin/python
  export VLLM_ENV_STATUS="$logs/vllm-env.status" OSWORLD_ENV_STATUS="$logs/osworld-env.status" OSWORLD_REQUIRED=1
  rm -f "$VLLM_ENV_STATUS" "$OSWORLD_ENV_STATUS"
  ( scripts/vllm-env.sh > "$logs/vllm-env.log" 2>&1 \
      && echo ok > "$VLLM_ENV_STATUS" || echo failed > "$VLLM_ENV_STATUS" ) &
  ( { scripts/osworld-env.sh && scripts/office-apps.sh; } > "$logs/osworld-env.log" 2>&1 \
      && echo ok > "$OSWORLD_ENV_STATUS" || echo failed > "$OSWORLD_ENV_STATUS" ) &
  start_postgres
  phase_end services
  # Two processes (pytest-xdist), a test module each at a time: the slow tests mostly wait on sandboxes,
  # browsers and servers. TEST_WORKERS=0 runs them in this process.
  workers=${TEST_WORKERS:-2}
  echo "[test] the whole suite on PostgreSQL ($workers parallel workers)"
  pytest -m "not vllm or vllm_main" $([ "$workers" -gt 0 ] && echo "-n $workers --dist loadfile") \
    --basetemp="$tmp/postgres" --durations=25 "$@" 2>&1 | tee "$logs/postgres.log" || status=$?
  wait "$lint_pid" || true
  cat "$logs/lint.out"
  [ -e "$logs/lint.log" ] && status=1
  phase_end postgres
  for what in osworld vllm; do
    file="$logs/$what-env.status"
    if [ "$(cat "$file" 2>/dev/null)" != ok ]; then
      echo "[test] the $what environment failed to install:"; grep -v "^WARNING: Location" "$logs/$what-env.log" | tail -20
      echo "FAILED the $what environment's install ($what-env.log)" >> "$logs/serving.log"
      status=1
    fi
  done
  # What can differ on SQLite (marked engine: database behaviour, no sandboxes) runs beside the phase of
  # the engines' platform test (one pytest process).
  echo "[test] what can differ on SQLite (marked engine), on the embedded default, beside the next phase"
  ( DATABASE_URL= pytest -m "engine and not slow and not postgres" -p no:cacheprovider -q \
      --basetemp="$tmp/sqlite" "$@" > "$logs/sqlite.log" 2>&1 ) &
  sqlite_pid=$!
  echo "[test] the inference engine under the whole platform: real vLLM servers (marked vllm), on PostgreSQL"
  if [ "$(cat "$VLLM_ENV_STATUS" 2>/dev/null)" = ok ]; then
    pytest -m "vllm and not vllm_main and not sweep" --basetemp="$tmp/serving" --durations=10 "$@" 2>&1 \
      | tee -a "$logs/serving.log" || status=$?
  fi
  phase_end serving
  wait "$sqlite_pid" || status=1
  tail -3 "$logs/sqlite.log"
  phase_end sqlite
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
printf '%s\n' "${phases[@]}" | python scripts/budget.py --tier "$tier" --log "$main_log" \
  --speed "$speed_before" --speed "$(speed)" || status=$((status == 0 ? 3 : status))
echo "[test] finished in $(( $(date +%s) - t0 )) s with status $status"
exit $status
