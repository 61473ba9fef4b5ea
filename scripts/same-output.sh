#!/usr/bin/env bash
# Shows that a restructuring changed nothing an operator or a host program
# reads. For REV and for the working tree:
# - the binary on one plan (groups that register, one on a backend NIXL
#   lacks, one on VRAM without CUDA, retries): /metrics (text and
#   OpenMetrics), /v1/status, /readyz?verbose and the log lines;
# - `nixl-agent rules` (the alert rules);
# - the interposer under the plain C++ and Python NIXL programs
#   (tests/programs/, scenario `ok`: registrations, a WRITE, its
#   notification), run by `nixl-agent instrument --` and held alive before
#   they exit: /metrics, /v1/status, /readyz?verbose, and the program's own
#   stdout, stderr and exit code (what the host sees);
# and diffs them, with what differs between any two runs masked (times,
# durations, pids, the git revision, process_* series, the log lines'
# targets, NIXL's and UCX's log stamps).
#
# A line only the working tree has is allowed when ADDED (an extended
# regular expression) matches it: what a change adds on purpose, such as a
# new family. Any other difference fails.
#
#   bash scripts/same-output.sh e9764cc     # prints the diffs; exit 1 if any
#   ADDED='nixl_agent_nixl_calls_total' bash scripts/same-output.sh e9764cc
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
rev=${1:?usage: same-output.sh REV}
added=${ADDED:-}
work=$(mktemp -d)
trap 'git -C "$root" worktree remove --force "$work/base" >/dev/null 2>&1 || true; rm -rf "$work"' EXIT
export NIXL_LIB_DIR="$root/.deps/nixl/.nixl_cu12.mesonpy.libs"

git worktree add -q --detach "$work/base" "$rev"
# Its own target folder: the base's crates must not replace this tree's.
(cd "$work/base" && CARGO_TARGET_DIR="$root/target/same-output" cargo build -q -p nixl-agent -p nixl-agent-interpose)
cargo build -q -p nixl-agent -p nixl-agent-interpose
# The plain C++ program, on the wheel's libnixl (the tests build it alike).
g++ -std=c++20 -O1 -pthread -Itests/programs/cpp tests/programs/cpp/nixl_plain.cpp \
  -L"$NIXL_LIB_DIR" -lnixl -lnixl_build -Wl,-rpath,"$NIXL_LIB_DIR" -o "$work/nixl_plain"
python=${NIXL_AGENT_PYTHON:-$root/.deps/venv/bin/python}

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
  normalize "$out"
}

normalize() { # OUT: the masked metrics.txt, openmetrics.txt, status.txt, log.txt
  local out=$1
  for m in metrics openmetrics; do
    grep -v 'process_' "$out/$m.raw" |
      sed -E 's/(_seconds(_sum|_bucket\{[^}]*\})?(\{[^}]*\})?) [0-9.e+-]+( .*)?$/\1 X/; s/revision="[^"]*"/revision="X"/' >"$out/$m.txt"
  done
  python3 - "$out" <<'PY'
import json, re, sys
out = sys.argv[1]
def norm(v, key=""):
    if isinstance(v, dict):
        return {k: norm(x, k) for k, x in v.items()}
    if isinstance(v, list):
        return [norm(x) for x in v]
    if isinstance(v, (int, float)) and not isinstance(v, bool) and re.search(r"seconds|_ms$|_us$|pid|^at$|since|unix|^generation$", key):
        return "X"
    return v
json.dump(norm(json.load(open(out + "/status.raw"))), open(out + "/status.txt", "w"), indent=1)
lines = []
try:
    log = open(out + "/log.raw").readlines()
except FileNotFoundError:
    log = []
for l in log:
    l = re.sub(r"^\S+\s+", "", l)                      # time
    l = re.sub(r"^(\s*\w+) [\w:]+: ", r"\1 ", l)        # target
    l = re.sub(r"(elapsed_(us|ms)|time_to_ready_ms|pid)=\d+", r"\1=X", l)
    lines.append(l)
open(out + "/log.txt", "w").writelines(lines)
PY
}

# NIXL's and UCX's log stamps: `[epoch] [host:pid:thread]`, `E1204 09:15:32.448592 22865 `.
unstamp() {
  sed -E 's/^\[[0-9.]+\] \[[^]]*\]/[stamp]/; s/^([DIWEF])[0-9]{4} [0-9:.]+ +[0-9]+ /\1 [stamp] /'
}

interposed() { # BIN LANG OUT: a plain program under the launcher, held alive before it exits
  local bin=$1 lang=$2 out=$3 pid port=18916
  mkdir -p "$out"
  local argv=("$work/nixl_plain" ok)
  [[ $lang == python ]] && argv=("$python" "$root/tests/programs/python/nixl_plain.py" ok)
  mkfifo "$out/stdin"
  # A zero-configuration pod's directory of this address: each run is the
  # address's first process, so that none has a previous run to report.
  rm -rf "/dev/shm/nixl-agent-$(id -u)/127.0.0.1_$port"
  NIXL_AGENT_LISTEN=127.0.0.1:$port HOLD_BEFORE_EXIT=1 NIXL_PLUGIN_DIR="$NIXL_LIB_DIR/plugins" \
    LD_LIBRARY_PATH="$NIXL_LIB_DIR" "$bin" instrument -- "${argv[@]}" \
    <"$out/stdin" >"$out/stdout.raw" 2>"$out/stderr.raw" &
  pid=$!
  exec 3>"$out/stdin"
  # The launcher execs the program: the hold is this pid reading fd 0.
  for _ in $(seq 600); do
    [[ $(cut -d' ' -f1,2 "/proc/$pid/syscall" 2>/dev/null) == "0 0x0" ]] && break
    sleep 0.1
  done
  sleep 1.5 # the transfer watch's and the watchdog's last look
  curl -s 127.0.0.1:$port/metrics >"$out/metrics.raw"
  curl -s -H 'Accept: application/openmetrics-text' 127.0.0.1:$port/metrics >"$out/openmetrics.raw"
  curl -s 127.0.0.1:$port/v1/status >"$out/status.raw"
  curl -s "127.0.0.1:$port/readyz?verbose" >"$out/readyz.txt"
  echo >&3
  exec 3>&-
  local rc=0
  wait "$pid" || rc=$?
  echo "exit $rc" >"$out/exit.txt"
  unstamp <"$out/stdout.raw" >"$out/stdout.txt"
  unstamp <"$out/stderr.raw" >"$out/stderr.txt"
  normalize "$out"
}

compare() { # FILE...: old and new side by side; lines only new has may be ADDED
  local f
  for f in "$@"; do
    if diff -u "$work/old/$f" "$work/new/$f" >"$work/diff"; then
      echo "same: $f ($(wc -l <"$work/new/$f") lines)"
      continue
    fi
    cat "$work/diff"
    # Changed or removed lines, and added ones ADDED does not allow.
    local bad
    bad=$(tail -n +3 "$work/diff" | grep -E '^[-+]' | grep -vE "^\+.*(${added:-^$})" | grep -cv '^+$' || true)
    [[ -n $added ]] && (( bad == 0 )) && { echo "added only: $f"; continue; }
    status=1
  done
}

capture "$root/target/same-output/debug/nixl-agent" "$work/old"
capture "$root/target/debug/nixl-agent" "$work/new"
"$root/target/same-output/debug/nixl-agent" rules >"$work/old/rules.yml"
"$root/target/debug/nixl-agent" rules >"$work/new/rules.yml"
for lang in cpp python; do
  interposed "$root/target/same-output/debug/nixl-agent" $lang "$work/old/$lang"
  interposed "$root/target/debug/nixl-agent" $lang "$work/new/$lang"
done
status=0
compare metrics.txt openmetrics.txt status.txt readyz.txt log.txt rules.yml
for lang in cpp python; do
  compare $lang/{metrics,openmetrics,status}.txt $lang/{readyz,stdout,stderr,exit}.txt
done
exit $status
