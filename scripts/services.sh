# Sourced by scripts/test.sh: throwaway Redis and PostgreSQL servers on free loopback ports.
# Each start_* exports the URL and registers its own clean-up in CLEANUP.

CLEANUP=()
cleanup_all() { for cmd in "${CLEANUP[@]}"; do eval "$cmd" || true; done; }

free_port() { .venv/bin/python -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

start_redis() {
  local port dir
  port=$(free_port); dir=$(mktemp -d /tmp/flywheel-redis.XXXXXX)
  redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$dir" --daemonize yes \
    --pidfile "$dir/redis.pid" --logfile "$dir/redis.log"
  for _ in $(seq 1 50); do redis-cli -p "$port" ping >/dev/null 2>&1 && break; sleep 0.1; done
  redis-cli -p "$port" ping >/dev/null || { echo "redis did not start"; cat "$dir/redis.log"; return 1; }
  CLEANUP+=("redis-cli -p $port shutdown nosave >/dev/null 2>&1; rm -rf $dir")
  export REDIS_URL="redis://127.0.0.1:$port/0"
  echo "[test] redis on $REDIS_URL"
}

start_postgres() {
  local bin port dir run=()
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  port=$(free_port); dir=$(mktemp -d /tmp/flywheel-pg.XXXXXX)
  # PostgreSQL refuses to run as root: as root, run it as the postgres user the package created.
  if [ "$(id -u)" = 0 ]; then chown postgres "$dir"; run=(runuser -u postgres --); fi
  "${run[@]}" "$bin/initdb" -D "$dir/data" -U flywheel -A trust --no-sync -E UTF8 >/dev/null
  "${run[@]}" "$bin/pg_ctl" -D "$dir/data" -l "$dir/log" -w -s start \
    -o "-p $port -k $dir -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off -c full_page_writes=off"
  CLEANUP+=("${run[*]} $bin/pg_ctl -D $dir/data -m immediate -s stop; rm -rf $dir")
  "$bin/createdb" -h 127.0.0.1 -p "$port" -U flywheel flywheel
  export DATABASE_URL="postgres://flywheel@127.0.0.1:$port/flywheel"
  echo "[test] postgres $("$bin/postgres" --version | awk '{print $3}') on $DATABASE_URL"
}
