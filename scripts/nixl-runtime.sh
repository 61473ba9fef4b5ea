#!/bin/sh
# Unpacks the NIXL runtime of a nixl-cu12 wheel into DEST the way pip lays it
# out in site-packages: .nixl_cu12.mesonpy.libs/ (libnixl_capi.so and its
# plugins/), nixl_cu12.libs/ (UCX and the other libraries it loads by
# $ORIGIN) and the dist-info (nixl-agent reads the version there). The
# Dockerfile's `nixl` stage runs it; tests/image.rs runs it too.
#   sh scripts/nixl-runtime.sh nixl_cu12-1.5.1-cp311-cp311-manylinux_2_28_x86_64.whl /opt/nixl
# Needs python3 (its zipfile module), nothing else.
set -eu
WHEEL="$1"
DEST="$2"
TMP="$DEST.unpack"
rm -rf "$TMP"
mkdir -p "$TMP" "$DEST"
python3 -m zipfile -e "$WHEEL" "$TMP"
for d in "$TMP"/.nixl_cu12.mesonpy.libs "$TMP"/nixl_cu12.libs "$TMP"/nixl_cu12-*.dist-info; do
    [ -d "$d" ] || { echo "nixl-runtime: $(basename "$d") is not in $WHEEL" >&2; exit 1; }
    rm -rf "$DEST/$(basename "$d")"
    mv "$d" "$DEST/"
done
rm -rf "$TMP"
# zipfile keeps no modes: the libraries must be readable (and loadable) by
# any user, the image runs as a non-root one.
chmod -R a+rX "$DEST"
test -f "$DEST/.nixl_cu12.mesonpy.libs/libnixl_capi.so"
echo "nixl-runtime: $DEST/.nixl_cu12.mesonpy.libs/libnixl_capi.so"
