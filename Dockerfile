# syntax=docker/dockerfile:1
# The nixl-agent image that deploy/ names (registry.example.com/nixl-agent:<version>):
# the binary, the pinned NIXL runtime, non-root. docs/image.md says how to build
# it and how to add the Python wheel to a serving image; tests/image.rs checks
# this file and runs its NIXL step.
#   docker build -t registry.example.com/nixl-agent:0.1.0 .
#   docker build --target wheel -o type=local,dest=dist .   # the Python wheel only

# The NIXL runtime inside: the same pin as scripts/setup.sh (nixl-sys 1.5.1).
ARG NIXL_VERSION=1.5.1

# 1. The binary, from the sources and Cargo.lock as they are.
FROM rust:1.95-bookworm AS build
RUN apt-get update \
 && apt-get install -y --no-install-recommends libclang-dev pkg-config \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY . .
RUN cargo build --release --locked --bin nixl-agent \
 && cargo build --profile interposer --locked -p nixl-agent-interpose \
 && strip --strip-debug target/interposer/libnixl_agent_interpose.so

# 2. The nixl_agent_instrument wheel for the stage's python3 (Debian
#    bookworm: CPython 3.11; one wheel per CPython version, `make wheels`
#    builds 3.10-3.13), for serving images (docs/image.md). It ships the
#    interposer built above, as scripts/python.sh's wheels do.
FROM build AS wheel-build
RUN apt-get update \
 && apt-get install -y --no-install-recommends python3 python3-venv \
 && rm -rf /var/lib/apt/lists/* \
 && cp target/interposer/libnixl_agent_interpose.so python/nixl_agent_instrument/ \
 && python3 -m venv /venv \
 && /venv/bin/pip install --no-cache-dir maturin==1.16.0 \
 && /venv/bin/maturin build --release --strip --interpreter python3 -o /wheels
FROM scratch AS wheel
COPY --from=wheel-build /wheels/ /

# 3. The pinned NIXL runtime, unpacked from its PyPI wheel (no Python needed
#    at run time: the binary loads libnixl_capi.so by path).
FROM python:3.11-slim-bookworm AS nixl
ARG NIXL_VERSION
COPY scripts/nixl-runtime.sh /usr/local/bin/nixl-runtime.sh
RUN pip download --no-cache-dir --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux_2_28_x86_64 -d /wheels "nixl-cu12==${NIXL_VERSION}" \
 && sh /usr/local/bin/nixl-runtime.sh /wheels/nixl_cu12-${NIXL_VERSION}-*.whl /opt/nixl

# 4. What runs: debian-slim, the NIXL runtime, the binary and the
#    interposer, a user of its own.
FROM debian:bookworm-slim AS runtime
RUN apt-get update \
 && apt-get install -y --no-install-recommends libssl3 ca-certificates \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --uid 10001 --user-group --no-create-home --shell /usr/sbin/nologin nixl-agent
COPY --from=nixl /opt/nixl /opt/nixl
COPY --from=build /src/target/release/nixl-agent /usr/local/bin/nixl-agent
# The interposer `nixl-agent instrument` preloads (found at ../lib/nixl-agent/
# from the binary); a serving image copies both (docs/image.md).
COPY --from=build /src/target/interposer/libnixl_agent_interpose.so /usr/local/lib/nixl-agent/libnixl_agent_interpose.so
ENV NIXL_LIB_DIR=/opt/nixl/.nixl_cu12.mesonpy.libs
# NIXL looks up $HOME/.nixl.cfg before it makes any agent, and a HOME the
# user may not search fails that (reason nixl_config): a HOME every uid can
# search, whatever runAsUser the pod sets (docs/image.md).
ENV HOME=/tmp
USER 10001:10001
EXPOSE 10915
ENTRYPOINT ["nixl-agent"]
CMD ["run", "--listen", "0.0.0.0:10915"]
