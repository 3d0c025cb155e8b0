#!/usr/bin/env bash
# Build libfabric's own benchmarks (fabtests: fi_msg_bw, fi_rdm_tagged_bw, fi_pingpong, …)
# from the same upstream tarball scripts/fabric/setup.sh builds libfabric from, against that
# libfabric, into a machine-wide cache; a second run with the same tarball does nothing.
#
#   scripts/fabric/fabtests.sh     # last line: "fabtests: PREFIX/bin"
#
# Runs setup.sh first (which fetches the tarball and builds libfabric when missing). Not part of
# CI: scripts/fabric/bench.sh uses it to set our collectives next to libfabric's figures.
#
# Environment: NEURON_VFIO_FABRIC_PREFIX (libfabric, default /var/cache/neuron-vfio/libfabric-2.1),
#              NEURON_VFIO_FABTESTS_PREFIX (default /var/cache/neuron-vfio/fabtests-2.1).
set -euo pipefail
cd "$(dirname "$0")/../.."

prefix=${NEURON_VFIO_FABRIC_PREFIX:-/var/cache/neuron-vfio/libfabric-2.1}
out=${NEURON_VFIO_FABTESTS_PREFIX:-/var/cache/neuron-vfio/fabtests-2.1}
log() { echo "fabtests: $*" >&2; }

scripts/fabric/setup.sh >&2
cache=$(dirname "$prefix")
tarball=$(ls "$cache"/libfabric-src/dl/libfabric_*.orig.tar.xz 2>/dev/null | head -n1)
if [ -z "$tarball" ]; then
    log "no libfabric source tarball under $cache/libfabric-src/dl (scripts/fabric/setup.sh fetches it)"
    exit 1
fi
sha=$(sha256sum "$tarball" | cut -d' ' -f1)
stamp="sha256=$sha libfabric=$prefix"
if [ -x "$out/bin/fi_msg_bw" ] && [ "$(cat "$out/.stamp" 2>/dev/null)" = "$stamp" ]; then
    echo "fabtests: $out/bin (cached)"
    exit 0
fi
exec 9>"$cache/.fabtests.lock"
flock 9
start=$(date +%s)
work=$(mktemp -d "$cache/fabtests-build.XXXXXX")
trap 'rm -rf "$work"' EXIT
tar -C "$work" -xJf "$tarball"
src=$(find "$work" -mindepth 2 -maxdepth 2 -type d -name fabtests | head -n1)
log "building $(basename "$tarball") fabtests against $prefix"
(
    cd "$src"
    ./autogen.sh >"$work/build.log" 2>&1
    ./configure -q --prefix="$out" --with-libfabric="$prefix" LDFLAGS="-Wl,-rpath,$prefix/lib" >>"$work/build.log" 2>&1
    make -s -j"$(nproc)" >>"$work/build.log" 2>&1
    make -s install >>"$work/build.log" 2>&1
) || { log "build failed:"; tail -n 20 "$work/build.log" >&2; exit 1; }
echo "$stamp" > "$out/.stamp"
log "built in $(( $(date +%s) - start )) s"
echo "fabtests: $out/bin"
