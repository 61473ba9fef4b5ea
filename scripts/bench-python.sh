#!/usr/bin/env bash
# The Python instrumentation benchmark (bench/py/instrument_bench.py,
# docs/python.md): set-up, the release wheel into .deps/venv,
# then the run. Writes bench/results/python.json and python.md (~2 minutes).
#   bash scripts/bench-python.sh [OUT_DIR]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:-$ROOT/bench/results}"
bash "$ROOT/scripts/setup.sh" >&2
bash "$ROOT/scripts/python.sh" release >&2
mkdir -p "$OUT"
cd "$ROOT"
NIXL_AGENT_LISTEN=127.0.0.1:0 "$ROOT/.deps/venv/bin/python" bench/py/instrument_bench.py "$OUT/python.json" \
    2> >(grep -v '^\[' >&2) | tee "$OUT/python.md"
