#!/usr/bin/env bash
# The long soak (not part of `make test`, which runs the 30-second version):
# /metrics and /readyz at 500 requests/s for 10 minutes against the release
# binary while every group is re-registered every 10 s. Summary JSON in
# target/soak-summary.json, copied to bench/results/soak.json (committed: the
# figures docs/reliability.md quotes). Override with SOAK_SECONDS, SOAK_RPS,
# SOAK_REREGISTER_SECS.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bash scripts/setup.sh
source scripts/env.sh
export SOAK_SECONDS="${SOAK_SECONDS:-600}" SOAK_RPS="${SOAK_RPS:-500}" SOAK_REREGISTER_SECS="${SOAK_REREGISTER_SECS:-10}"
cargo test --release --test integration -- --exact soak::sustained_scrapes_with_periodic_reregistration --nocapture
mkdir -p bench/results
cp target/soak-summary.json bench/results/soak.json
cat bench/results/soak.json
