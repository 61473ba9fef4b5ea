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
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="$ROOT/.deps/venv"
PROFILE="${1:-dev}"
BUILD_ONLY="${2:-}"
OUT="$ROOT/target/wheels/$PROFILE"
log() { printf 'python: %s\n' "$*"; }
[ -x "$VENV/bin/maturin" ] || { echo "python: ERROR: no .deps/venv/bin/maturin; run scripts/setup.sh" >&2; exit 1; }
rm -rf "$OUT"
log "maturin build --profile $PROFILE"
(cd "$ROOT" && "$VENV/bin/maturin" build --quiet --profile "$PROFILE" --strip \
    --interpreter "$VENV/bin/python" -o "$OUT")
wheel="$(ls "$OUT"/nixl_agent_instrument-*.whl | head -n1)"
if [ "$BUILD_ONLY" = "--build-only" ]; then
    log "built ${wheel#"$ROOT"/}: pip install ./${wheel#"$ROOT"/}"
    exit 0
fi
log "pip install $(basename "$wheel") into .deps/venv"
"$VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --force-reinstall "$wheel"
"$VENV/bin/python" -c 'import nixl_agent_instrument' || { echo "python: ERROR: the wheel does not import" >&2; exit 1; }
