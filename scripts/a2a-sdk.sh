#!/usr/bin/env bash
# Installs the official A2A SDK the A2A tests use as the real counterpart: @a2a-js/sdk (its client drives
# `noetic serve`'s A2A endpoint; its server, on express, is the agent our A2A tool calls), from npm into a cache
# directory. Prints the directory the tests read as NOETIC_A2A_SDK_DIR. Needs Node 20+ and npm (Debian:
# apt-get install -y nodejs npm).
#
#   scripts/a2a-sdk.sh setup   # install (idempotent; pinned versions)
#   scripts/a2a-sdk.sh dir     # print the directory
set -euo pipefail

DIR="${NOETIC_A2A_SDK_DIR:-$HOME/.cache/noetic-a2a}"
VERSION=1.3.0
PACKAGES=(
  "@a2a-js/sdk@$VERSION"
  "express@5.3.0"
)

# shellcheck source=scripts/npm-cache.sh
source "$(dirname "$0")/npm-cache.sh"
npm_cache_main "$@"
