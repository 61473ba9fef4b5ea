# nixl-agent: build/test glue. `make test` works from a fresh clone.
SHELL := bash
.SHELLFLAGS := -euo pipefail -c

CARGO ?= cargo
ARGS ?=

# Absolute paths to what scripts/setup.sh puts in .deps/ (see scripts/env.sh).
export NIXL_LIB_DIR := $(CURDIR)/.deps/nixl/.nixl_cu12.mesonpy.libs
export PROMTOOL     := $(CURDIR)/.deps/prometheus/usr/bin/promtool
export PROMETHEUS   := $(CURDIR)/.deps/prometheus/usr/bin/prometheus
export NIXL_AGENT_PYTHON := $(CURDIR)/.deps/venv/bin/python
export ALERTMANAGER := $(CURDIR)/.deps/alertmanager/usr/bin/prometheus-alertmanager
export AMTOOL       := $(CURDIR)/.deps/alertmanager/usr/bin/amtool

.PHONY: all setup build run test fmt clean-deps python wheel

all: test

setup:
	bash "$(CURDIR)/scripts/setup.sh"

# The binary and, beside it, the interposer `nixl-agent instrument` preloads
# (target/release/nixl-agent, target/release/libnixl_agent_interpose.so).
build: setup
	$(CARGO) build --release -p nixl-agent -p nixl-agent-interpose

# The Python package (nixl_agent_instrument) built and installed into .deps/venv.
python: setup
	bash "$(CURDIR)/scripts/python.sh"

# The wheel a user installs (README, docs/python.md):
# target/wheels/release/nixl_agent_instrument-*.whl, not installed anywhere.
wheel: setup
	bash "$(CURDIR)/scripts/python.sh" release --build-only

# One wheel per CPython the frameworks support (3.10-3.13) that is installed
# here, into target/wheels/all; each is installed into a fresh virtualenv
# of its interpreter and imported. PYTHONS='python3.12 ...' to choose.
PYTHONS ?= python3.10 python3.11 python3.12 python3.13
.PHONY: wheels
wheels: setup
	bash "$(CURDIR)/scripts/wheels.sh" $(PYTHONS)

# The agent on its embedded default plan; extra arguments: make run ARGS='...'
run: build
	$(CARGO) run --release -- run $(ARGS)

# Every test. nextest when available, else cargo test. Lints first: fmt and
# clippy with warnings denied are part of the test command.
test: setup
	$(CARGO) fmt --all -- --check
	# Every crate of the workspace (ARCHITECTURE.md), and the library
	# alone as an embedder builds it.
	$(CARGO) clippy --workspace --all-targets -- -D warnings
	$(CARGO) clippy --lib --no-default-features -- -D warnings
	$(CARGO) build --workspace --all-targets
	# What an embedder builds: the library without the CLI (no clap), and the example.
	$(CARGO) build --no-default-features --lib --example serving
	# The Python wheel, installed into .deps/venv for tests/python.rs.
	bash "$(CURDIR)/scripts/python.sh"
	if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --workspace --no-fail-fast; \
	else \
		$(CARGO) test --workspace --no-fail-fast; \
	fi

# docs/metrics.md's families table, generated from the declarations
# (crates/ledger/src/telemetry/names.rs); `make test` checks it.
.PHONY: docs
docs:
	NIXL_AGENT_BLESS=1 $(CARGO) test --test integration -- --exact docs::metrics_table_is_generated_from_the_declarations

# The NIXL release matrix (docs/instrument.md, "Tested"): every build
# scripts/matrix.sh sets up in .deps/matrix/, NIXL's own example and the
# C++, Rust and Python programs counted under the interposer on each, the
# lifecycle (`nixl-agent run`) and the Python front-end too.
# `make test` runs three of them: the oldest, the newest, the source layout.
.PHONY: matrix
matrix: setup
	if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --test integration --run-ignored all --no-fail-fast interposer::releases::; \
	else \
		$(CARGO) test --test integration -- --include-ignored interposer::releases::; \
	fi

fmt:
	$(CARGO) fmt --all

clean-deps:
	rm -rf "$(CURDIR)/.deps"

# Benchmarks (bench/, docs/performance.md): sets up what they need, builds in
# release mode, prints the tables and writes bench/results/latest.json.
# Extra nixl-bench arguments: make bench ARGS='--sections registration'
.PHONY: bench bench-smoke
bench:
	bash "$(CURDIR)/scripts/bench.sh" -- $(ARGS)

# The benchmark's smoke test alone (also part of `make test`).
bench-smoke: setup
	$(CARGO) build --example nixl-bench
	if $(CARGO) nextest --version >/dev/null 2>&1; then \
		$(CARGO) nextest run --test integration bench_smoke::; \
	else \
		$(CARGO) test --test integration bench_smoke::; \
	fi

# The Python instrumentation benchmark (docs/python.md):
# release wheel, bare vs instrumented NIXL Python API, start-up, /metrics
# under the GIL vs prometheus_client. Writes bench/results/python.{json,md}.
.PHONY: bench-python
bench-python:
	bash "$(CURDIR)/scripts/bench-python.sh"

# The 10-minute soak (docs/reliability.md); `make test` runs 30 seconds of it.
.PHONY: soak
soak: setup
	bash "$(CURDIR)/scripts/soak.sh"

# The 10-minute stress of the interposer (docs/reliability.md); `make test`
# runs 15 seconds of it. NIXL_AGENT_STRESS_SECS=120 make stress for less.
.PHONY: stress
stress: setup
	bash "$(CURDIR)/scripts/stress.sh"
