#!/usr/bin/env bash
# `make wheels`: the nixl_agent_instrument wheel for each CPython named on the
# command line that is installed here (on PATH, or under pyenv), one wheel
# per version (the extension is not built against the stable ABI, see
# python/native/Cargo.toml), into target/wheels/all. Each wheel is then
# tested with its own interpreter: a fresh virtualenv with that version's
# NIXL wheel (nixl-cu12, --no-deps) and numpy, a registration made through
# NIXL's Python API under nixl-agent-instrument, and the recording's ready
# gauge and registered bytes read back. A version not installed is named
# and skipped; exit 1 when none was built or one fails its test.
#   bash scripts/wheels.sh python3.10 python3.11 python3.12 python3.13
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The NIXL pinned by scripts/setup.sh, in each version's own build.
NIXL_WHEEL_NAME="$(sed -n 's/^NIXL_WHEEL_NAME=//p' "$ROOT/scripts/setup.sh")"
NIXL_VERSION="$(sed -n 's/^NIXL_WHEEL_VERSION=//p' "$ROOT/scripts/setup.sh")"
MATURIN="$ROOT/.deps/venv/bin/maturin"
OUT="$ROOT/target/wheels/all"
CACHE="$ROOT/.deps/wheels"
[ -x "$MATURIN" ] || { echo "wheels: ERROR: no .deps/venv/bin/maturin; run scripts/setup.sh" >&2; exit 1; }
mkdir -p "$OUT" "$CACHE"

# An interpreter that runs: the name on PATH, else pyenv's build of it.
resolve() {
    local py="$1" p
    if p="$(command -v "$py" 2>/dev/null)" && "$p" -c pass >/dev/null 2>&1; then
        echo "$p"; return 0
    fi
    for p in "${PYENV_ROOT:-$HOME/.pyenv}"/versions/*/bin/"$py"; do
        [ -x "$p" ] && "$p" -c pass >/dev/null 2>&1 && { echo "$p"; return 0; }
    done
    return 1
}

check() {
    local py="$1" wheel="$2" venv
    venv="$(mktemp -d)"
    trap 'rm -rf "$venv"' RETURN
    "$py" -m venv "$venv"
    "$venv/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        -d "$CACHE" "$NIXL_WHEEL_NAME==$NIXL_VERSION" "nixl==$NIXL_VERSION" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps --find-links "$CACHE" \
        "$NIXL_WHEEL_NAME==$NIXL_VERSION" "nixl==$NIXL_VERSION" numpy "$wheel"
    NIXL_AGENT_LISTEN=off "$venv/bin/nixl-agent-instrument" "$venv/bin/python" -c '
import sys
import numpy as np
import nixl_agent_instrument as nai
from nixl._api import nixl_agent, nixl_agent_config
agent = nixl_agent("wheels", nixl_agent_config(backends=["UCX"]))
buf = np.ones(1 << 20, dtype=np.uint8)
agent.register_memory(np.array([(buf.ctypes.data, buf.nbytes, 0)], dtype=np.uint64), "DRAM")
seen = {l.split("{")[0].split(" ")[0]: l.split()[-1] for l in nai.metrics().splitlines() if not l.startswith("#")}
assert seen.get("nixl_agent_ready") == "1", seen.get("nixl_agent_ready")
assert float(seen.get("nixl_agent_registered_bytes", 0)) == buf.nbytes, seen.get("nixl_agent_registered_bytes")
print(f"wheels: CPython {sys.version.split()[0]}: a registration through NIXL recorded (ready, {buf.nbytes} bytes)")
' 2> >(grep -v '^\[\|^20' >&2)
}

built=0
for name in "$@"; do
    if ! py="$(resolve "$name")"; then
        echo "wheels: $name: not installed, skipped"
        continue
    fi
    tag="$("$py" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
    rm -f "$OUT"/nixl_agent_instrument-*-"$tag"-*.whl
    (cd "$ROOT" && "$MATURIN" build --quiet --release --strip --interpreter "$py" -o "$OUT")
    wheel="$(ls "$OUT"/nixl_agent_instrument-*-"$tag"-*.whl | head -n1)"
    echo "wheels: built ${wheel#"$ROOT"/}"
    check "$py" "$wheel"
    built=$((built + 1))
done
[ "$built" -gt 0 ] || { echo "wheels: ERROR: none of $* is installed" >&2; exit 1; }
