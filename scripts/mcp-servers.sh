#!/usr/bin/env bash
# Installs the MCP reference servers the noetic-mcp tests run (from npm, into a cache directory) and prints
# where they are. Needs Node 20+ and npm (Debian: apt-get install -y nodejs npm).
#
#   scripts/mcp-servers.sh setup   # install (idempotent; pinned versions)
#   scripts/mcp-servers.sh dir     # print the directory the tests read as NOETIC_MCP_SERVERS_DIR
set -euo pipefail

DIR="${NOETIC_MCP_SERVERS_DIR:-$HOME/.cache/noetic-mcp-servers}"
VERSION=2026.8.31
PACKAGES=(
  "@modelcontextprotocol/server-filesystem@$VERSION"
  "@modelcontextprotocol/server-everything@$VERSION"
)

case "${1:-setup}" in
  setup)
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
      echo "node and npm are missing: install them (Debian: apt-get install -y nodejs npm)" >&2
      exit 1
    fi
    mkdir -p "$DIR"
    if [ -f "$DIR/.installed-$VERSION" ]; then
      echo "$DIR"
      exit 0
    fi
    npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error "${PACKAGES[@]}" >&2
    touch "$DIR/.installed-$VERSION"
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
