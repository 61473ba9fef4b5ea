#!/usr/bin/env bash
# The long stress of the interposer (not part of `make test`, which runs 15
# seconds of it): tests/programs/cpp/nixl_stress.cpp under the interposer for
# NIXL_AGENT_STRESS_SECS (default 600) on the release build, /metrics scraped
# every 200 ms, the program's counts compared with what was recorded, RSS
# sampled. Summary JSON in target/stress-summary.json, copied to
# bench/results/stress.json (committed: the figures docs/reliability.md
# quotes).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
source scripts/env.sh
export NIXL_AGENT_PYTHON="${NIXL_AGENT_PYTHON:-$PWD/.deps/venv/bin/python}"
export NIXL_AGENT_STRESS_SECS="${NIXL_AGENT_STRESS_SECS:-600}"
cargo test --release --test integration -- --exact \
    interposer::sixteen_threads_agent_churn_and_forks_are_counted_exactly_with_flat_rss --nocapture
mkdir -p bench/results
cp target/stress-summary.json bench/results/stress.json
cat bench/results/stress.json
