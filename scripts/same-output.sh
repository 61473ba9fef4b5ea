#!/usr/bin/env bash
# Shows that a restructuring changed nothing an operator reads: runs the
# binary of REV and of the working tree on one plan (groups that register,
# one on a backend NIXL lacks, one on VRAM without CUDA, retries) and diffs
# /metrics (text and OpenMetrics), /v1/status, /readyz?verbose and the log
# lines, with what differs between any two runs masked (times, durations,
# pids, the git revision, process_* series, and the log lines' targets).
#
#   bash scripts/same-output.sh 0db8896     # prints the diffs; exit 1 if any
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
rev=${1:?usage: same-output.sh REV}
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
export NIXL_LIB_DIR="$root/.deps/nixl/.nixl_cu12.mesonpy.libs"

git worktree add -q --detach "$work/base" "$rev"
# Its own target folder: the base's crates must not replace this tree's.
(cd "$work/base" && CARGO_TARGET_DIR="$root/target/same-output" cargo build -q --bin nixl-agent)
cargo build -q --bin nixl-agent

cat > "$work/plan.toml" <<'EOF'
listen = "127.0.0.1:18915"
nixl_call_timeout = "60s"
[retry]
initial_backoff = "50ms"
max_backoff = "100ms"
max_attempts = 2
[[group]]
name = "kv"
kind = "kv"
mem_type = "DRAM"
backends = ["UCX"]
count = 8
size = "512KiB"
[[group]]
name = "aux"
kind = "aux"
mem_type = "DRAM"
backends = ["UCX"]
required = false
count = 4
size = "64KiB"
[[group]]
name = "broken"
kind = "custom_word"
mem_type = "DRAM"
backends = ["NOPE"]
required = false
count = 2
size = "4KiB"
[[group]]
name = "gpu"
kind = "state"
mem_type = "VRAM"
backends = ["UCX"]
required = false
count = 2
size = "4KiB"
EOF

capture() { # BIN OUT
  local bin=$1 out=$2
  mkdir -p "$out"
  "$bin" run --config "$work/plan.toml" >"$out/log.raw" 2>&1 &
  local pid=$!
  for _ in $(seq 100); do
    curl -sf 127.0.0.1:18915/livez >/dev/null 2>&1 && break
    sleep 0.1
  done
  sleep 3 # the failing groups' retries run out
  curl -s 127.0.0.1:18915/metrics >"$out/metrics.raw"
  curl -s -H 'Accept: application/openmetrics-text' 127.0.0.1:18915/metrics >"$out/openmetrics.raw"
  curl -s 127.0.0.1:18915/v1/status >"$out/status.raw"
  curl -s '127.0.0.1:18915/readyz?verbose' >"$out/readyz.txt"
  kill -TERM "$pid"
  wait "$pid" || true
  for m in metrics openmetrics; do
    grep -v 'process_' "$out/$m.raw" |
      sed -E 's/(_seconds(_sum|_bucket\{[^}]*\})?(\{[^}]*\})?) [0-9.e+-]+( .*)?$/\1 X/; s/revision="[0-9a-f]+"/revision="X"/' >"$out/$m.txt"
  done
  python3 - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
def norm(v, key=""):
    if isinstance(v, dict):
        return {k: norm(x, k) for k, x in v.items()}
    if isinstance(v, list):
        return [norm(x) for x in v]
    if isinstance(v, (int, float)) and not isinstance(v, bool) and re.search(r"seconds|_ms$|_us$|pid|^at$|since|unix", key):
        return "X"
    return v
json.dump(norm(json.load(open(out + "/status.raw"))), open(out + "/status.txt", "w"), indent=1)
lines = []
for l in open(out + "/log.raw"):
    l = re.sub(r"^\S+\s+", "", l)                      # time
    l = re.sub(r"^(\s*\w+) [\w:]+: ", r"\1 ", l)        # target
    l = re.sub(r"(elapsed_(us|ms)|time_to_ready_ms|pid)=\d+", r"\1=X", l)
    lines.append(l)
open(out + "/log.txt", "w").writelines(lines)
PY
}

capture "$root/target/same-output/debug/nixl-agent" "$work/old"
capture "$root/target/debug/nixl-agent" "$work/new"
status=0
for f in metrics.txt openmetrics.txt status.txt readyz.txt log.txt; do
  if diff -u "$work/old/$f" "$work/new/$f"; then
    echo "same: $f ($(wc -l <"$work/new/$f") lines)"
  else
    status=1
  fi
done
exit $status
