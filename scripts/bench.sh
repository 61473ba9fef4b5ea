#!/usr/bin/env bash
# Benchmarks of nixl-agent (bench/, see README "Performance"). From a fresh
# clone it sets up what it needs, builds in release mode, runs every section
# and writes bench/results/latest.json (+ latest.md, the printed tables).
#
#   bash scripts/bench.sh              full run (~4 minutes on 2 cores)
#   bash scripts/bench.sh setup        set-up only (also what the smoke test calls)
#   bash scripts/bench.sh smoke        tiny run (N <= 64, 1 s of load), output in /tmp
#   bash scripts/bench.sh -- ARGS...   full run with nixl-bench arguments, e.g.
#                                      -- --sections registration --sizes 1024,4096
#
# Set-up (idempotent, everything under the git-ignored .deps/):
#   a. scripts/setup.sh: the NIXL runtime from the pinned nixl-cu12 wheel
#   b. .deps/bench-venv: a Python 3.11 venv (the wheel is cp311) with numpy,
#      which the wheel's Python API imports; torch is optional and not
#      installed. The API itself is imported from the unpacked wheel
#      (PYTHONPATH=.deps/nixl), the same files the agent loads.
# The load generator is nixl-bench's own (bench/load.rs): no wrk needed.
set -euo pipefail

NUMPY_VERSION=2.4.6

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.deps"
VENV="$DEPS/bench-venv"
CARGO="${CARGO:-cargo}"
export NIXL_LIB_DIR="${NIXL_LIB_DIR:-$DEPS/nixl/.nixl_cu12.mesonpy.libs}"
export DEBIAN_FRONTEND=noninteractive

log() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: ERROR: %s\n' "$*" >&2; exit 1; }

SUDO=()
if [ "$(id -u)" -ne 0 ] && command -v sudo >/dev/null 2>&1; then
    SUDO=(sudo -E)
fi

# A Python 3.11 interpreter: the wheel's extension modules are cpython-311.
find_python() {
    local c
    for c in python3.11 python3; do
        if command -v "$c" >/dev/null 2>&1 \
            && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
            command -v "$c"
            return 0
        fi
    done
    return 1
}

setup_python() {
    if [ -x "$VENV/bin/python" ] && "$VENV/bin/python" -c 'import numpy' 2>/dev/null; then
        log "python venv present ($("$VENV/bin/python" -c 'import sys, numpy; print(sys.version.split()[0], "numpy", numpy.__version__)'))"
        return 0
    fi
    local py
    py="$(find_python)" || die "need Python 3.11 (the nixl-cu12 wheel is cp311): apt-get install python3.11"
    rm -rf "$VENV"
    if ! "$py" -m venv "$VENV" 2>/dev/null; then
        # Debian splits ensurepip out of the interpreter.
        [ "$(id -u)" -eq 0 ] || [ "${#SUDO[@]}" -gt 0 ] || die "need root or sudo to install python3-venv"
        log "apt-get install python3-venv"
        ${SUDO[@]+"${SUDO[@]}"} apt-get update -qq
        ${SUDO[@]+"${SUDO[@]}"} apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
        rm -rf "$VENV"
        "$py" -m venv "$VENV"
    fi
    log "pip install numpy==$NUMPY_VERSION into .deps/bench-venv"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "numpy==$NUMPY_VERSION"
    "$VENV/bin/python" -c 'import numpy' || die "numpy does not import in $VENV"
}

setup() {
    bash "$ROOT/scripts/setup.sh" >&2
    setup_python
}

mode="${1:-run}"
case "$mode" in
    setup)
        setup
        exit 0
        ;;
    smoke)
        shift
        setup
        log "cargo build --release --bin nixl-agent --example nixl-bench"
        (cd "$ROOT" && "$CARGO" build --release --quiet --bin nixl-agent --example nixl-bench)
        exec "$ROOT/target/release/examples/nixl-bench" --smoke \
            --agent-bin "$ROOT/target/release/nixl-agent" \
            --out "${TMPDIR:-/tmp}/nixl-bench-smoke.json" "$@"
        ;;
    run | --)
        if [ "$#" -gt 0 ]; then shift; fi
        if [ "${1:-}" = "--" ]; then shift; fi
        ;;
    *)
        die "unknown mode '$mode' (run, setup, smoke, or -- ARGS)"
        ;;
esac

setup
log "cargo build --release --bin nixl-agent --example nixl-bench"
(cd "$ROOT" && "$CARGO" build --release --quiet --bin nixl-agent --example nixl-bench)
mkdir -p "$ROOT/bench/results"
log "running (about 4 minutes); tables on stdout, JSON in bench/results/latest.json"
"$ROOT/target/release/examples/nixl-bench" \
    --agent-bin "$ROOT/target/release/nixl-agent" \
    --out "$ROOT/bench/results/latest.json" "$@" | tee "$ROOT/bench/results/latest.md"
