#!/usr/bin/env bash
# Installs the AG-UI client the AG-UI tests drive `noetic serve` with: @ag-ui/client (its HttpAgent) and
# @ag-ui/core (the event schemas every event is checked against), from npm into a cache directory. Prints the
# directory the tests read as NOETIC_AGUI_CLIENT_DIR. Needs Node 20+ and npm (Debian: apt-get install -y nodejs npm).
#
#   scripts/agui-client.sh setup   # install (idempotent; pinned versions)
#   scripts/agui-client.sh dir     # print the directory
set -euo pipefail

DIR="${NOETIC_AGUI_CLIENT_DIR:-$HOME/.cache/noetic-agui-client}"
VERSION=1.0.0
PACKAGES=(
  "@ag-ui/client@$VERSION"
  "@ag-ui/core@$VERSION"
)

case "${1:-setup}" in
  setup)
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
      echo "node and npm are missing: install them (Debian: apt-get install -y nodejs npm)" >&2
      exit 1
    fi
    mkdir -p "$DIR"
    if [ ! -f "$DIR/.installed-$VERSION" ]; then
      npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error "${PACKAGES[@]}" >&2
      touch "$DIR/.installed-$VERSION"
    fi
    echo "$DIR"
    ;;
  dir)
    echo "$DIR"
    ;;
  *)
    echo "usage: $0 [setup|dir]" >&2
    exit 2
    ;;
esac
