#!/usr/bin/env bash
# `make run`: set up, migrate, seed demo data, then run Redis, web, workers and beat until Ctrl-C.
# Every process it starts is in its own process group and is stopped on exit, whatever the cause.
set -euo pipefail
cd "$(dirname "$0")/.."
started=$(date +%s%N)
# Set-up runs with the user's own umask: what it installs (.venv, the front-end packages) is read by
# sandboxes, which run as users of their own (setup.sh makes the parts they bind readable by them
# whatever that umask is).
scripts/setup.sh run
# SANDBOX_OFFICE=1: the office profile (OSWorld's tasks): its applications, and OSWorld's metric functions
# in their own environment (about two minutes the first time).
if [ "${SANDBOX_OFFICE:-0}" = 1 ]; then
  scripts/office-apps.sh
  scripts/osworld-env.sh >/dev/null
fi
# Everything the platform writes from here on (the database and its sessions, keys, logs, screenshots,
# exports) is its user's alone: files 0600, folders 0700. Settings and the database config enforce it too.
umask 077

# Production settings by default: no debug pages (a 404 listing the URL patterns, a 500 showing source and
# local variables) for whoever reaches the port; static files are collected and served by the web app.
# DEBUG=1 make run is the development switch. Cookies go over the plain HTTP this serves on loopback
# unless SECURE_COOKIES=1 (behind TLS).
export DEBUG=${DEBUG:-0}
export SECURE_COOKIES=${SECURE_COOKIES:-0}
export PORT=${PORT:-8000}
REDIS_PORT=${REDIS_PORT:-6379}
export REDIS_URL=${REDIS_URL:-redis://127.0.0.1:$REDIS_PORT/0}
VAR=${FLYWHEEL_VAR_DIR:-$PWD/var}
mkdir -p "$VAR/log" "$VAR/redis"
# The var dir is the platform's alone (set-up may have made it under a wider umask); never a shared,
# sticky one such as /tmp.
[ -k "$VAR" ] || chmod go-rwx "$VAR"
PY=.venv/bin/python

pids=()
stop_all() {
  trap - INT TERM EXIT
  [ ${#pids[@]} -eq 0 ] && return
  echo; echo "[run] stopping ${#pids[@]} processes"
  for pid in "${pids[@]}"; do kill -TERM -- "-$pid" 2>/dev/null || true; done
  for _ in $(seq 1 50); do
    alive=0; for pid in "${pids[@]}"; do kill -0 -- "-$pid" 2>/dev/null && alive=1; done
    [ $alive = 0 ] && break; sleep 0.2
  done
  for pid in "${pids[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
  # Sandboxes run in sessions of their own (a restarted host adopts them): whatever a host killed past
  # its grace left is reaped now, not after its watchdog's grace.
  $PY -m sandbox_workers.reaper reap "$VAR/sandbox-host" >/dev/null 2>>"$VAR/log/sandbox-host.log" || true
  echo "[run] stopped"
}
trap stop_all EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

rotate_log() {  # rotate_log FILE: keep the last runs' logs as FILE.1 (the previous run) … FILE.$KEEP_LOGS
  local log=$1 i
  [ -s "$log" ] || return 0
  for i in $(seq $((KEEP_LOGS - 1)) -1 1); do
    if [ -e "$log.$i" ]; then mv -f "$log.$i" "$log.$((i + 1))"; fi
  done
  mv -f "$log" "$log.1"
}
KEEP_LOGS=${KEEP_LOGS:-5}

start() {  # start NAME CMD...: run CMD in its own process group, output to $VAR/log/NAME.log
  local name=$1; shift
  rotate_log "$VAR/log/$name.log"
  echo "[run] $name started $(date -Is): $*" >"$VAR/log/$name.log"
  setsid "$@" >>"$VAR/log/$name.log" 2>&1 &
  pids+=($!)
  echo "[run] $name (pid $!, log $VAR/log/$name.log)"
}

if redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1; then
  echo "[run] using the Redis already on port $REDIS_PORT"
else
  start redis redis-server --port "$REDIS_PORT" --bind 127.0.0.1 --save "" --appendonly no --dir "$VAR/redis"
  for _ in $(seq 1 50); do redis-cli -p "$REDIS_PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done
fi

# The web app and its sandbox host share one secret, generated once and kept in the var dir.
if [ -z "${SANDBOX_HOST_TOKEN:-}" ]; then
  [ -s "$VAR/sandbox-host-token" ] || (umask 077; $PY -c "import secrets; print(secrets.token_urlsafe(32))" > "$VAR/sandbox-host-token")
  SANDBOX_HOST_TOKEN=$(cat "$VAR/sandbox-host-token")
fi
export SANDBOX_HOST_TOKEN
# Likewise the secret the web app shares with its policy servers (their heartbeats in).
if [ -z "${POLICY_SERVER_TOKEN:-}" ]; then
  [ -s "$VAR/policy-server-token" ] || (umask 077; $PY -c "import secrets; print(secrets.token_urlsafe(32))" > "$VAR/policy-server-token")
  POLICY_SERVER_TOKEN=$(cat "$VAR/policy-server-token")
fi
export POLICY_SERVER_TOKEN
SANDBOX_HOST_PORT=${SANDBOX_HOST_PORT:-8100}
# The web app's key, kept private in the var dir: settings read it when SECRET_KEY is unset, so the
# README's `manage.py` commands work in a plain shell too (DEBUG on or off).
if [ -z "${SECRET_KEY:-}" ] && [ ! -s "$VAR/secret_key" ]; then
  (umask 077; $PY -c "import secrets; print(secrets.token_urlsafe(50))" > "$VAR/secret_key")
fi

$PY manage.py migrate --no-input -v0
$PY manage.py seed_demo
[ "$DEBUG" = 1 ] || $PY manage.py collectstatic --no-input -v0

# daphne's command line gives a WebSocket 5 s to be accepted; a busy server can take longer (1006 then).
start web .venv/bin/daphne -b 127.0.0.1 -p "$PORT" --websocket_connect_timeout 30 webapp.asgi:application
# One worker per kind of work, so nobody waits behind longer work of another kind (see webapp/celery.py):
# agents' episodes; the catalog's checks (bulk: a first start queues every task); rounds and exports;
# people (a demonstration's sandbox) and short upkeep; training.
start worker-rollouts .venv/bin/celery -A webapp worker -Q rollouts -n "rollouts@%h" --concurrency 2 -l INFO
start worker-checks .venv/bin/celery -A webapp worker -Q checks -n "checks@%h" --concurrency 1 -l INFO
start worker-datasets .venv/bin/celery -A webapp worker -Q datasets -n "datasets@%h" --concurrency 1 -l INFO
start worker-interactive .venv/bin/celery -A webapp worker -Q interactive,sandboxes -n "interactive@%h" --concurrency 2 -l INFO
start worker-training .venv/bin/celery -A webapp worker -Q training -n "training@%h" --concurrency 1 -l INFO
start beat .venv/bin/celery -A webapp beat -l INFO -s "$VAR/celerybeat-schedule"
# The sandbox host runs each sandbox as a uid of its own, which must reach the sandbox's root: the host
# keeps the usual umask (022); its log, made here, stays private.
start sandbox-host sh -c 'umask 022; exec "$@"' sandbox-host \
  $PY -m sandbox_workers.host --bind 127.0.0.1 --port "$SANDBOX_HOST_PORT" \
  --name "${SANDBOX_HOST_NAME:-local}" --web-url "http://127.0.0.1:$PORT" --var-dir "$VAR/sandbox-host"

# SERVE_POLICY=1: a local policy server (vLLM's CPU build, in its own environment, installed the first time:
# a few minutes) serving the tiny policy as `tiny-base-served`; it registers and heartbeats into the web
# app (Policy servers page) and hot-loads the LoRA adapters promoted on its base.
if [ "${SERVE_POLICY:-0}" = 1 ]; then
  VLLM_PY=$(scripts/vllm-env.sh)
  $PY manage.py tiny_policy --name tiny-base --served
  start policy-server "$VLLM_PY" -m agent_core.serving --model "$VAR/models/tiny-base" --served-name tiny-base \
    --name "${POLICY_SERVER_NAME:-local-vllm}" --port "${POLICY_SERVER_PORT:-8200}" \
    --web-url "http://127.0.0.1:$PORT" --vllm-python "$VLLM_PY" --log-file "$VAR/log/vllm-engine.log"
fi

for _ in $(seq 1 100); do
  curl -fsS -o /dev/null "http://127.0.0.1:$PORT/accounts/login/" 2>/dev/null && break
  for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || { echo "[run] a process died at start; see $VAR/log/"; exit 1; }; done
  sleep 0.2
done
echo "[run] ready in $(( ($(date +%s%N) - started) / 1000000 )) ms"
# Tasks are published once their oracle scores 1 and do-nothing 0 on real sandboxes: the checks worker
# checks the ones never checked, in the background (see the Tasks page as they pass); agents' episodes
# never wait behind them (their own queue and worker).
$PY manage.py tasks_verify --unverified --enqueue
echo
echo "  Flywheel is running at http://127.0.0.1:$PORT/   (Ctrl-C stops everything)"
echo "  Log in as 'admin' with the password printed above."
echo
# Stay up while every process is; if one dies, say which and stop the rest.
while true; do
  for i in "${!pids[@]}"; do
    if ! kill -0 "${pids[$i]}" 2>/dev/null; then echo "[run] process ${pids[$i]} exited; see $VAR/log/"; exit 1; fi
  done
  sleep 1
done
