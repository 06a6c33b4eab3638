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

# shellcheck source=scripts/npm-cache.sh
source "$(dirname "$0")/npm-cache.sh"
npm_cache_main "$@"
