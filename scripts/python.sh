#!/usr/bin/env bash
# Builds the nixl_agent_instrument wheel (pyproject.toml, python/) with
# maturin and installs it into the project's virtualenv (.deps/venv, made by
# scripts/setup.sh) beside NIXL's own wheel, the way a user's
# `pip install <wheel>` would.
#   bash scripts/python.sh                       dev profile (what `make test` uses)
#   bash scripts/python.sh release               release profile (benchmarks)
#   bash scripts/python.sh release --build-only  the wheel a user installs
#       (`make wheel`: target/wheels/release/nixl_agent_instrument-*.whl), not
#       installed into .deps/venv
# The wheel ships the interposer (libnixl_agent_interpose.so, built first:
# the dev profile's for dev, the image's whole-program `interposer` profile
# for release) as package data beside the launcher, which preloads it for
# any command. NIXL_AGENT_WHEEL_DIR: where the wheel goes (default
# target/wheels/<profile>).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.deps/venv"
PROFILE="${1:-dev}"
BUILD_ONLY="${2:-}"
OUT="${NIXL_AGENT_WHEEL_DIR:-$ROOT/target/wheels/$PROFILE}"
CARGO="${CARGO:-cargo}"
log() { printf 'python: %s\n' "$*"; }
[ -x "$VENV/bin/maturin" ] || { echo "python: ERROR: no .deps/venv/bin/maturin; run scripts/setup.sh" >&2; exit 1; }
# The interposer, as package data (git-ignored; pyproject.toml includes it).
case "$PROFILE" in
    dev) so_profile=dev; so_dir=debug ;;
    release) so_profile=interposer; so_dir=interposer ;;
    *) so_profile="$PROFILE"; so_dir="$PROFILE" ;;
esac
log "cargo build --profile $so_profile -p nixl-agent-interpose"
(cd "$ROOT" && "$CARGO" build --quiet --profile "$so_profile" -p nixl-agent-interpose)
so="$ROOT/python/nixl_agent_instrument/libnixl_agent_interpose.so"
cp "$ROOT/target/$so_dir/libnixl_agent_interpose.so" "$so.tmp"
strip --strip-debug "$so.tmp"
mv -f "$so.tmp" "$so"
rm -rf "$OUT"
log "maturin build --profile $PROFILE"
(cd "$ROOT" && "$VENV/bin/maturin" build --quiet --profile "$PROFILE" --strip \
    --interpreter "$VENV/bin/python" -o "$OUT")
wheel="$(ls "$OUT"/nixl_agent_instrument-*.whl | head -n1)"
if [ "$BUILD_ONLY" = "--build-only" ]; then
    rel="${wheel#"$ROOT"/}"
    [ "$rel" = "$wheel" ] || rel="./$rel"
    log "built $rel: pip install $rel"
    exit 0
fi
log "pip install $(basename "$wheel") into .deps/venv"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel"
"$VENV/bin/python" -c 'import nixl_agent_instrument' || { echo "python: ERROR: the wheel does not import" >&2; exit 1; }
