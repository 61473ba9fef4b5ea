#!/usr/bin/env bash
# The data path's loop from many Python threads, bare and under the
# interposer, paired (bench/py/interpose_bench.py `loop`): the cost of
# recording must not grow with threads. Each pair runs the same loop bare
# (NIXL alone) and under `nixl-agent instrument --` (the interposer alone:
# NIXL_AGENT_PYTHON_INSTRUMENT is not set, so the Python front-end stays
# out), one after the other, which goes first alternating; the ratio is
# instrumented / bare time. Each pair also times the loop's four calls
# apart from one thread (`calls`, 20,000 transfers): what recording adds
# to each call. Writes bench/results/threads.{json,md}.
#   bash scripts/bench-threads.sh [THREADS] [TRANSFERS_PER_THREAD] [PAIRS]
#   defaults: 16 threads, 12,500 each (200,000 transfers), 3 pairs
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
threads=${1:-16} n=${2:-12500} pairs=${3:-3}
bash scripts/setup.sh >&2
cargo build -q --release -p nixl-agent -p nixl-agent-interpose
lib="$ROOT/.deps/nixl/.nixl_cu12.mesonpy.libs"
py="$ROOT/.deps/venv/bin/python"
run() { # bare|instrumented ARGS...: one JSON line
  local port
  port=$(( 20000 + RANDOM % 20000 ))
  local mode=$1
  shift
  if [[ $mode == bare ]]; then
    NIXL_PLUGIN_DIR="$lib/plugins" LD_LIBRARY_PATH="$lib" "$py" bench/py/interpose_bench.py "$@"
  else
    NIXL_PLUGIN_DIR="$lib/plugins" LD_LIBRARY_PATH="$lib" NIXL_AGENT_LISTEN="127.0.0.1:$port" \
      target/release/nixl-agent instrument -- "$py" bench/py/interpose_bench.py "$@"
  fi
}
out=$(mktemp)
for p in $(seq "$pairs"); do
  if (( p % 2 )); then order=(bare instrumented); else order=(instrumented bare); fi
  for mode in "${order[@]}"; do
    line=$(run "$mode" loop "$threads" "$n" | grep '"mode": "loop"')
    calls=$(run "$mode" calls 20000 | grep '"mode": "calls"')
    echo "{\"pair\": $p, \"contender\": \"$mode\", \"run\": $line, \"calls\": $calls}" >>"$out"
    echo "pair $p $mode: $line $calls" >&2
  done
done
mkdir -p bench/results
python3 - "$out" "$threads" "$n" <<'PY'
import json, os, platform, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
threads, n = int(sys.argv[2]), int(sys.argv[3])
pairs = sorted({r["pair"] for r in rows})
CALLS = ("initialize_xfer", "transfer", "check_xfer_state", "release_xfer_handle")
def t_calls(rows, p, who):
    c = next(r["calls"] for r in rows if r["pair"] == p and r["contender"] == who)
    return {k: c[k + "_ns"] for k in CALLS}
table = []
for p in pairs:
    t = {r["contender"]: r["run"] for r in rows if r["pair"] == p}
    b, i = t["bare"], t["instrumented"]
    table.append({"pair": p, "bare_s": b["seconds"], "instrumented_s": i["seconds"],
                  "ratio": i["seconds"] / b["seconds"],
                  "transfers": [b["transfers"], i["transfers"]], "failed": [b["failed"], i["failed"]],
                  "calls": {"bare": t_calls(rows, p, "bare"), "instrumented": t_calls(rows, p, "instrumented")}})
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), platform.machine())
doc = {"command": f"bash scripts/bench-threads.sh {threads} {n} {len(pairs)}", "cpu": cpu,
       "cores": os.cpu_count(), "threads": threads, "transfers_per_thread": n, "pairs": table}
json.dump(doc, open("bench/results/threads.json", "w"), indent=1)
md = [f"Python data-path loop, {threads} threads x {n:,} 4 KiB loopback WRITEs, bare vs under the interposer",
      f"({cpu}, {os.cpu_count()} cores; `{doc['command']}`)", "",
      "| pair | bare s | instrumented s | ratio | transfers (bare, instrumented) |", "|---|---|---|---|---|"]
for r in table:
    md.append(f"| {r['pair']} | {r['bare_s']:.2f} | {r['instrumented_s']:.2f} | {r['ratio']:.3f} | {r['transfers'][0]:,}, {r['transfers'][1]:,} |")
md += ["", "The same loop from one thread, 20,000 transfers, each call's mean (ns), bare -> instrumented (added):", "",
       "| pair | " + " | ".join(f"`{k}`" for k in CALLS) + " |", "|---|" + "---|" * len(CALLS)]
for r in table:
    b, i = r["calls"]["bare"], r["calls"]["instrumented"]
    md.append(f"| {r['pair']} | " + " | ".join(f"{b[k]:,.0f} -> {i[k]:,.0f} ({i[k] - b[k]:+,.0f})" for k in CALLS) + " |")
open("bench/results/threads.md", "w").write("\n".join(md) + "\n")
print("\n".join(md))
PY
rm -f "$out"
