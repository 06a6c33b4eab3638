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

# shellcheck source=scripts/npm-cache.sh
source "$(dirname "$0")/npm-cache.sh"
npm_cache_main "$@"
