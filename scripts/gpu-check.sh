#!/usr/bin/env bash
# GPU check: runs the VRAM tests (tests/gpu.rs) and a VRAM plan through the
# release binary on a machine with a CUDA GPU.
#
#   bash scripts/gpu-check.sh pack   # here: build, strip, pack into .gpu/ (≈ 30 MB)
#   bash scripts/gpu-check.sh run    # on the GPU host, from the repo root
#
# `pack` bundles the release binary, the integration test binary (the GPU
# host runs its `gpu::` tests) and the part of the NIXL runtime that UCX
# registration needs, so the GPU host needs no network.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
root=$PWD
out=.gpu
CUDART_VERSION=12.9.79

pack() {
  bash scripts/setup.sh
  export NIXL_LIB_DIR="$root/.deps/nixl/.nixl_cu12.mesonpy.libs"
  cargo build --release --bin nixl-agent
  local test_bin
  test_bin=$(cargo test --release --test integration --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["name"]=="integration": print(m["executable"])' | tail -n1)
  # nixl-agent-sys's unit tests: the CUDA-context test lives beside cuda.rs.
  local lib_bin
  lib_bin=$(cargo test --release -p nixl-agent-sys --lib --no-run --message-format=json 2>/dev/null \
    | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and "lib" in m["target"]["kind"]: print(m["executable"])' | tail -n1)
  rm -rf "$out" && mkdir -p "$out"
  cp target/release/nixl-agent "$out/nixl-agent"
  cp "$test_bin" "$out/gpu-tests"
  cp "$lib_bin" "$out/lib-tests"
  echo "$root/target/release/nixl-agent" > "$out/built-path"
  strip "$out/nixl-agent" "$out/gpu-tests" "$out/lib-tests"
  # The NIXL libraries, the UCX plugin and UCX modules, and what they load.
  local libs=.deps/nixl
  local list
  list=$( (cd "$libs" && {
      find .nixl_cu12.mesonpy.libs -maxdepth 1 -name '*.so*'
      echo .nixl_cu12.mesonpy.libs/plugins/libplugin_UCX.so
      find nixl_cu12.libs/ucx -name '*.so*'
      for f in .nixl_cu12.mesonpy.libs/*.so* .nixl_cu12.mesonpy.libs/plugins/libplugin_UCX.so nixl_cu12.libs/ucx/*.so*; do
        ldd "$f" | awk '/nixl_cu12.libs/ {print $3}' | xargs -r realpath -m --relative-to=.
      done
      ls -d nixl_cu12-*.dist-info
    } | sort -u) )
  # The CUDA runtime UCX's CUDA modules load (torch brings it in Python).
  python3 -m pip download --no-deps --only-binary=:all: -d .deps/wheels "nvidia-cuda-runtime-cu12==$CUDART_VERSION" >/dev/null
  local stage
  stage=$(mktemp -d)
  unzip -q -o .deps/wheels/nvidia_cuda_runtime_cu12-"$CUDART_VERSION"-*.whl 'nvidia/cuda_runtime/lib/*' -d "$stage"
  (cd "$libs" && tar -cf "$stage/nixl.tar" $list)
  tar -rf "$stage/nixl.tar" -C "$stage" nvidia
  xz -T0 -c "$stage/nixl.tar" > "$out/nixl.tar.xz"
  rm -rf "$stage"
  du -sh "$out"/*
}

run() {
  mkdir -p "$out/nixl"
  tar -xJf "$out/nixl.tar.xz" -C "$out/nixl"
  export NIXL_LIB_DIR="$root/$out/nixl/.nixl_cu12.mesonpy.libs"
  nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv || true
  # Test binaries find the agent binary at the path it was built at.
  local built
  built=$(cat "$out/built-path")
  if [ -n "$built" ] && [ ! -e "$built" ]; then
    mkdir -p "$(dirname "$built")" && cp "$out/nixl-agent" "$built"
  fi
  echo "== GPU tests"
  "$out/gpu-tests" gpu:: --test-threads 1 --nocapture
  echo "== a VRAM pointer query leaves the caller's CUDA context alone"
  "$out/lib-tests" --exact cuda::tests::a_pointer_query_leaves_the_callers_context_alone \
    --include-ignored --nocapture
  echo "== release binary, VRAM plan"
  cat > "$out/vram.toml" <<'TOML'
listen = "127.0.0.1:10915"
[[group]]
name = "kv"
kind = "kv"
mem_type = "VRAM"
device = 0
count = 16
size = "4MiB"
[[group]]
name = "aux"
kind = "aux"
mem_type = "DRAM"
count = 4
size = "64KiB"
TOML
  echo "== nixl-agent check, VRAM plan"
  "$out/nixl-agent" check --config "$out/vram.toml" 2>/dev/null || echo "check exit code: $?"
  echo "== nixl-agent check --json, VRAM plan: the loopback transfers and their transports"
  "$out/nixl-agent" check --json --config "$out/vram.toml" 2>/dev/null \
    | python3 -c 'import json,sys; r=json.load(sys.stdin); print(json.dumps({"transfers": r["transfers"], "host": r["host"]}, indent=1))' \
    || echo "check --json failed"
  echo "== agent, VRAM plan"
  "$out/nixl-agent" run --config "$out/vram.toml" --log-format json > "$out/agent.log" 2>&1 &
  local pid=$!
  for _ in $(seq 1 100); do
    curl -fs localhost:10915/readyz >/dev/null 2>&1 && break
    sleep 0.2
  done
  curl -s 'localhost:10915/readyz?verbose' || true
  curl -s localhost:10915/metrics | grep -E '^nixl_agent_(registered_|ready|registration_duration_seconds_sum)' || true
  kill -TERM "$pid"; wait "$pid"; echo "exit code: $?"
  grep -E 'group registered|drain complete|failed' "$out/agent.log" | head -20
}

case "${1:-}" in
  pack) pack ;;
  run) run ;;
  *) echo "usage: $0 pack|run" >&2; exit 2 ;;
esac
