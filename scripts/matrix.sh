#!/usr/bin/env bash
# The NIXL release matrix (docs/instrument.md, "Tested"): every NIXL release
# of the last year as its real wheel, each unpacked into
# .deps/matrix/<dist>-<version>/ as a site-packages-like tree:
#   <dist>/                     NIXL's Python package (nixl_cu12, nixl_cu13)
#   .<dist>.mesonpy.libs/       libnixl.so, libnixl_capi.so, plugins/
#   <dist>.libs/                the libraries auditwheel bundled (UCX, ...)
#   <dist>-<version>.dist-info  the wheel's metadata (what the gate reads)
#   <dist>.scripts/nixl_example NIXL's own example program
#   nixl/, nixl-<version>.dist-info (and nixl_meta_utils.py from 1.4)
#                               the `nixl` meta package of that version
# and one source-layout build, .deps/matrix/source-1.5.1/: the 1.5.1 tree
# with every dist-info taken away, as an image built from source carries
# NIXL (hard links: no disk of its own).
# Left out: the headers and data of <dist>-<version>.data, NIXL's other
# scripts and nixl_ep (no test uses them).
# Idempotent and cached: wheels are downloaded once into .deps/wheels, a
# build is unpacked once (a stamp file marks it whole).
# Usage: scripts/matrix.sh [--list]   (--list: print the builds' folders)
set -euo pipefail

# <dist>==<version>: nixl-cu12 of every release since 1.0 (the last of
# each minor), and nixl-cu13 where Dynamo 1.6.1 pins it (ai-dynamo[vllm]:
# nixl[cu13]==1.4.1, ai-dynamo[sglang]: nixl[cu13]==1.5.0).
BUILDS=(
    nixl-cu12==1.0.1
    nixl-cu12==1.1.0
    nixl-cu12==1.3.2
    nixl-cu12==1.4.1
    nixl-cu12==1.5.0
    nixl-cu12==1.5.1
    nixl-cu13==1.4.1
    nixl-cu13==1.5.0
)
SOURCE_LAYOUT_OF=nixl-cu12==1.5.1
WHEEL_PYTHON=3.11
WHEEL_PLATFORM=manylinux_2_28_x86_64

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEPS="$ROOT/.deps"
WHEEL_DIR="$DEPS/wheels"
MATRIX="$DEPS/matrix"
STAMP=.nixl-agent-matrix

log() { printf 'matrix: %s\n' "$*" >&2; }
die() { printf 'matrix: ERROR: %s\n' "$*" >&2; exit 1; }

# pip's name (nixl-cu12) -> the wheel's and the package's (nixl_cu12).
dist_of() { local n="${1%%==*}"; printf '%s\n' "${n//-/_}"; }
version_of() { printf '%s\n' "${1##*==}"; }

if [ "${1:-}" = "--list" ]; then
    for b in "${BUILDS[@]}"; do
        printf '%s\n' "$MATRIX/$(dist_of "$b")-$(version_of "$b")"
    done
    printf '%s\n' "$MATRIX/source-$(version_of "$SOURCE_LAYOUT_OF")"
    exit 0
fi

# The wheel of pip name `spec` (`name==version`) whose file starts with
# `file_prefix`, downloaded once into .deps/wheels; prints its path.
wheel() {
    local spec="$1" file_prefix="$2" w
    mkdir -p "$WHEEL_DIR"
    w="$(ls "$WHEEL_DIR"/"$file_prefix"-*.whl 2>/dev/null | head -n1 || true)"
    if [ -z "$w" ]; then
        log "pip download $spec"
        python3 -m pip download --quiet --disable-pip-version-check --no-deps \
            --only-binary=:all: --python-version "$WHEEL_PYTHON" \
            --platform "$WHEEL_PLATFORM" -d "$WHEEL_DIR" "$spec" >&2
        w="$(ls "$WHEEL_DIR"/"$file_prefix"-*.whl 2>/dev/null | head -n1 || true)"
        [ -n "$w" ] || die "no $file_prefix wheel in $WHEEL_DIR after pip download $spec"
    fi
    printf '%s\n' "$w"
}

# One build of BUILDS unpacked into .deps/matrix/<dist>-<version>/.
unpack() {
    local spec="$1" dist version dir tmp w meta
    dist="$(dist_of "$spec")"
    version="$(version_of "$spec")"
    dir="$MATRIX/$dist-$version"
    if [ -e "$dir/$STAMP" ]; then
        log "$dist $version present"
        return
    fi
    w="$(wheel "$spec" "$dist-$version")"
    meta="$(wheel "nixl==$version" "nixl-$version")"
    log "unzip $(basename "$w") $(basename "$meta") -> .deps/matrix/$dist-$version"
    tmp="$dir.tmp"
    rm -rf "$tmp"
    mkdir -p "$tmp"
    unzip -q "$w" -d "$tmp" \
        "$dist/*" ".$dist.mesonpy.libs/*" "$dist.libs/*" "$dist-$version.dist-info/*" \
        "$dist.scripts/nixl_example"
    # shellcheck disable=SC2046 # one name a line, none with a space
    unzip -q "$meta" -d "$tmp" $(zipinfo -1 "$meta" | grep -v -e '^nixl_ep/' -e '/$')
    chmod +x "$tmp/$dist.scripts/nixl_example"
    [ -f "$tmp/.$dist.mesonpy.libs/libnixl.so" ] || die "$(basename "$w") has no .$dist.mesonpy.libs/libnixl.so"
    [ -f "$tmp/.$dist.mesonpy.libs/plugins/libplugin_UCX.so" ] || die "$(basename "$w") has no UCX plugin"
    [ -f "$tmp/nixl/__init__.py" ] || die "$(basename "$meta") has no nixl/__init__.py"
    printf '%s\n' "$spec" >"$tmp/$STAMP"
    rm -rf "$dir"
    mv "$tmp" "$dir"
}

for b in "${BUILDS[@]}"; do
    unpack "$b"
done

# The source layout: the same libraries and Python packages, no metadata.
from="$MATRIX/$(dist_of "$SOURCE_LAYOUT_OF")-$(version_of "$SOURCE_LAYOUT_OF")"
src="$MATRIX/source-$(version_of "$SOURCE_LAYOUT_OF")"
if [ -e "$src/$STAMP" ]; then
    log "source-layout $(version_of "$SOURCE_LAYOUT_OF") present"
else
    log "source layout of $(basename "$from") (no dist-info) -> .deps/matrix/$(basename "$src")"
    rm -rf "$src.tmp"
    cp -al "$from" "$src.tmp"
    rm -rf "$src.tmp"/*.dist-info "$src.tmp/$STAMP"
    printf 'source layout of %s\n' "$SOURCE_LAYOUT_OF" >"$src.tmp/$STAMP"
    rm -rf "$src"
    mv "$src.tmp" "$src"
fi
