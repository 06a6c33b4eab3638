#!/usr/bin/env bash
# A real PostgreSQL for the multi-worker tests: Debian's server, a throwaway cluster on 127.0.0.1.
#
#   scripts/postgres.sh setup    install Debian's postgresql package if the server binaries are missing
#   scripts/postgres.sh start    create the cluster (first time) and start it; wait until it accepts connections
#   scripts/postgres.sh stop     stop it (fast shutdown)
#   scripts/postgres.sh status   say whether it is set up and running, and print the URL
#   scripts/postgres.sh url      print the URL the tests use (export it as NOETIC_POSTGRES_URL)
#   scripts/postgres.sh restart  stop, then start (the tests use it to drop every connection)
#
# The cluster lives in NOETIC_POSTGRES_DIR (default /tmp/noetic-postgres: throwaway) and listens on
# 127.0.0.1:NOETIC_POSTGRES_PORT (default 54329), owned by the unprivileged `postgres` user when run as root (the
# server refuses to run as root). Database `noetic`, user `noetic`, password `noetic`. Every command is idempotent.
set -euo pipefail

DIR="${NOETIC_POSTGRES_DIR:-/tmp/noetic-postgres}"
PORT="${NOETIC_POSTGRES_PORT:-54329}"
DATA="$DIR/data"
LOG="$DIR/server.log"
URL="postgres://noetic:noetic@127.0.0.1:$PORT/noetic"

say() { printf 'postgres: %s\n' "$*"; }
die() { printf 'postgres: error: %s\n' "$*" >&2; exit 1; }

bindir() {
  local d
  for d in /usr/lib/postgresql/*/bin; do
    [[ -x "$d/initdb" && -x "$d/pg_ctl" ]] && { echo "$d"; return 0; }
  done
  return 1
}

# Runs a command as the cluster's owner: `postgres` when we are root, else ourselves.
as_owner() {
  if [[ "$(id -u)" == 0 ]]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

is_running() {
  local bin
  bin="$(bindir)" || return 1
  [[ -f "$DATA/PG_VERSION" ]] && as_owner "$bin/pg_ctl" -D "$DATA" status >/dev/null 2>&1
}

accepts() {
  local bin
  bin="$(bindir)" || return 1
  "$bin/pg_isready" -h 127.0.0.1 -p "$PORT" -q 2>/dev/null
}

setup() {
  if bindir >/dev/null; then
    say "server binaries present in $(bindir)"
    return 0
  fi
  [[ "$(id -u)" == 0 ]] || die "postgresql is not installed; run as root (apt-get install postgresql)"
  say "installing Debian's postgresql package"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >/dev/null
  bindir >/dev/null || die "postgresql installed but no initdb found under /usr/lib/postgresql"
}

start() {
  local bin
  bin="$(bindir)" || die "postgresql is not installed; run 'scripts/postgres.sh setup' first"
  if is_running && accepts; then
    say "already running: $URL"
    return 0
  fi
  mkdir -p "$DIR"
  if [[ "$(id -u)" == 0 ]]; then chown postgres: "$DIR"; fi
  if [[ ! -f "$DATA/PG_VERSION" ]]; then
    say "creating a throwaway cluster in $DATA"
    local pwfile="$DIR/pw"
    printf 'noetic\n' >"$pwfile"
    if [[ "$(id -u)" == 0 ]]; then chown postgres: "$pwfile"; fi
    as_owner "$bin/initdb" -D "$DATA" -U noetic --pwfile="$pwfile" -A scram-sha-256 -E UTF8 --no-locale >/dev/null
    rm -f "$pwfile"
    # Tests open many connections (several workers, each with a pool and a listener) and restart the server.
    cat >>"$DATA/postgresql.conf" <<CONF
listen_addresses = '127.0.0.1'
port = $PORT
max_connections = 300
unix_socket_directories = '$DIR'
fsync = off
synchronous_commit = off
full_page_writes = off
CONF
  fi
  as_owner "$bin/pg_ctl" -D "$DATA" -l "$LOG" -w -t 60 start >/dev/null || { tail -20 "$LOG" >&2; die "the server did not start (log: $LOG)"; }
  local tries=0
  until accepts; do
    tries=$((tries + 1))
    ((tries < 120)) || die "the server does not accept connections on 127.0.0.1:$PORT (log: $LOG)"
    sleep 0.5
  done
  if ! PGPASSWORD=noetic "$bin/psql" -h 127.0.0.1 -p "$PORT" -U noetic -d postgres -tAc \
      "SELECT 1 FROM pg_database WHERE datname = 'noetic'" | grep -q 1; then
    PGPASSWORD=noetic "$bin/createdb" -h 127.0.0.1 -p "$PORT" -U noetic noetic
  fi
  say "running: $URL"
}

stop() {
  local bin
  bin="$(bindir)" || { say "not installed"; return 0; }
  if is_running; then
    as_owner "$bin/pg_ctl" -D "$DATA" -m fast -w stop >/dev/null
    say "stopped"
  else
    say "not running"
  fi
}

case "${1:-}" in
  setup) setup ;;
  start) start ;;
  stop) stop ;;
  restart) stop; start ;;
  status)
    if ! bindir >/dev/null; then say "not installed (scripts/postgres.sh setup)"; exit 1; fi
    if is_running && accepts; then say "running: $URL"; else say "not running (scripts/postgres.sh start)"; exit 1; fi
    ;;
  url) echo "$URL" ;;
  *) die "usage: scripts/postgres.sh setup|start|stop|restart|status|url" ;;
esac
