# Sourced by the scripts that install npm packages the tests use as real counterparts (mcp-servers.sh,
# agui-client.sh, a2a-sdk.sh): each sets DIR (the cache directory), VERSION (its pinned release, the install
# marker) and PACKAGES, then calls `npm_cache_main "$@"`.
#
#   setup   install into DIR once per VERSION (idempotent), print DIR
#   dir     print DIR

npm_cache_main() {
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
}
