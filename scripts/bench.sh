#!/usr/bin/env bash
# Benchmarks of nixl-agent (bench/, see docs/performance.md). From a fresh
# clone it sets up what it needs, builds in release mode, runs every section
# and writes bench/results/latest.json (+ latest.md, the printed tables).
#
#   bash scripts/bench.sh              full run (~4 minutes on 2 cores)
#   bash scripts/bench.sh setup        set-up only (also what the smoke test calls)
#   bash scripts/bench.sh smoke        tiny run (N <= 64, 1 s of load), output in /tmp
#   bash scripts/bench.sh -- ARGS...   full run with nixl-bench arguments, e.g.
#                                      -- --sections registration --sizes 1024,4096
#   NIXL_BENCH_NAME=NAME               write bench/results/NAME.{json,md} instead
#                                      of latest.* (a partial run kept beside the
#                                      full one)
#
# Set-up (idempotent, everything under the git-ignored .deps/):
#   a. scripts/setup.sh: the NIXL runtime from the pinned nixl-cu12 wheel
#   b. .deps/venv (made by setup.sh): Python 3.11 with numpy, which the
#      wheel's Python API imports; torch is not installed. The API itself is
#      imported from the unpacked wheel (PYTHONPATH=.deps/nixl), the same
#      files the agent loads.
# The load generator is nixl-bench's own (bench/load.rs): no wrk needed.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.deps"
VENV="$DEPS/venv"
CARGO="${CARGO:-cargo}"
export NIXL_LIB_DIR="${NIXL_LIB_DIR:-$DEPS/nixl/.nixl_cu12.mesonpy.libs}"
export DEBIAN_FRONTEND=noninteractive

log() { printf 'bench: %s\n' "$*" >&2; }
die() { printf 'bench: ERROR: %s\n' "$*" >&2; exit 1; }

setup() {
    # setup.sh makes .deps/venv (Python 3.11, numpy, NIXL's Python API).
    bash "$ROOT/scripts/setup.sh" >&2
    "$VENV/bin/python" -c 'import numpy' || die "numpy does not import in $VENV"
}

# The agent and the driver in release mode, and the interposer that the
# interposer's section runs under `nixl-agent instrument --`: the one the
# image ships, the whole-program build (Cargo.toml's `interposer` profile),
# named by NIXL_AGENT_INTERPOSER.
build() {
    log "cargo build --release --bin nixl-agent --example nixl-bench; --profile interposer -p nixl-agent-interpose"
    (cd "$ROOT" && "$CARGO" build --release --quiet --bin nixl-agent --example nixl-bench)
    (cd "$ROOT" && "$CARGO" build --profile interposer --quiet -p nixl-agent-interpose)
    export NIXL_AGENT_INTERPOSER="$ROOT/target/interposer/libnixl_agent_interpose.so"
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
        build
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
build
mkdir -p "$ROOT/bench/results"
name="${NIXL_BENCH_NAME:-latest}"
case "$name" in
    *[!A-Za-z0-9_-]* | "") die "NIXL_BENCH_NAME must be letters, digits, - or _ (got '$name')" ;;
esac
log "running (about 4 minutes); tables on stdout, JSON in bench/results/$name.json"
"$ROOT/target/release/examples/nixl-bench" \
    --agent-bin "$ROOT/target/release/nixl-agent" \
    --out "$ROOT/bench/results/$name.json" "$@" | tee "$ROOT/bench/results/$name.md"
