#!/usr/bin/env bash
# Installs what the page tests drive a real browser with: Debian's Chromium (apt) and playwright-core (npm, into a
# cache directory; it uses the system Chromium, it downloads no browser). Prints the directory the tests read as
# NOETIC_BROWSER_DIR.
#
#   scripts/browser.sh setup   # install (idempotent; pinned version)
#   scripts/browser.sh dir     # print the directory
set -euo pipefail

DIR="${NOETIC_BROWSER_DIR:-$HOME/.cache/noetic-browser}"
VERSION=1.65.1

case "${1:-setup}" in
  setup)
    if ! command -v chromium >/dev/null 2>&1; then
      if [ "$(id -u)" = 0 ]; then
        apt-get update -qq >&2 && apt-get install -y -qq chromium >&2
      else
        echo "chromium is missing: install it (Debian: sudo apt-get install -y chromium)" >&2
        exit 1
      fi
    fi
    if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
      echo "node and npm are missing: install them (Debian: apt-get install -y nodejs npm)" >&2
      exit 1
    fi
    mkdir -p "$DIR"
    if [ ! -f "$DIR/.installed-$VERSION" ]; then
      PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm install --prefix "$DIR" --no-audit --no-fund --loglevel=error \
        "playwright-core@$VERSION" >&2
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
