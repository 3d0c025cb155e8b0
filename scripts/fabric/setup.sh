#!/usr/bin/env bash
# Provide libfabric 2.1 for the `fabric` crate's transport, which opens libfabric.so.1 at run
# time and looks in this prefix after the EFA installer's directory (fabric/src/ofi/dl.rs);
# Debian's libfabric1 (1.17 on Debian 12) works too, this build is the newer tcp provider and
# the headers the ABI check (fabric/tests/abi.rs) and scripts/fabric/fabtests.sh use. Builds
# Debian 13's own upstream source tarball (libfabric_2.1.0.orig.tar.xz) into a machine-wide
# cache prefix and reuses it afterwards.
#
#   scripts/fabric/setup.sh        # idempotent; last line: "fabric-setup: libfabric 2.1.0 at PREFIX"
#
# - build dependencies (autoconf automake libtool make gcc pkg-config, and
#   libibverbs-dev with --efa) are installed with apt only when `dpkg -s` says they are missing;
# - the tarball comes from `apt-get source --download-only` through a PRIVATE apt list and
#   state directory under the cache (the host's apt sources are not touched); its deb-src line
#   uses the Debian mirror the host's own apt configuration points at (apt-get indextargets);
# - configure: tcp, shm, rxm, udp, sockets on; verbs/efa/psm2/psm3/usnic/opx/cxi/ucx/lpp off.
#   NEURON_VFIO_FABRIC_EFA=1 (or --efa) also builds the efa provider (needs rdma-core's
#   libibverbs-dev) for EC2 hosts;
# - the prefix's stamp holds the tarball's sha256 and the configure flags: a change of either
#   rebuilds, otherwise nothing is done.
#
# Environment: NEURON_VFIO_FABRIC_PREFIX (default /var/cache/neuron-vfio/libfabric-2.1),
#              NEURON_VFIO_FABRIC_EFA=1, NEURON_VFIO_FABRIC_SUITE (default trixie),
#              NEURON_VFIO_FABRIC_VERSION (default 2.1.0-1.1, the Debian source version).
# The transport finds the prefix at run time (NEURON_VFIO_FABRIC_PREFIX, default above); the
# build needs nothing from it.
set -euo pipefail

prefix=${NEURON_VFIO_FABRIC_PREFIX:-/var/cache/neuron-vfio/libfabric-2.1}
suite=${NEURON_VFIO_FABRIC_SUITE:-trixie}
srcver=${NEURON_VFIO_FABRIC_VERSION:-2.1.0-1.1}
efa=${NEURON_VFIO_FABRIC_EFA:-0}
for a in "$@"; do
    case $a in
        --efa) efa=1 ;;
        -h|--help) sed -n '2,26p' "$0"; exit 0 ;;
        *) echo "fabric-setup: unknown argument $a" >&2; exit 2 ;;
    esac
done

log() { echo "fabric-setup: $*" >&2; }
as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        log "need root for: $*"; return 1; fi
}

flags=(--disable-verbs --disable-psm2 --disable-psm3 --disable-usnic --disable-opx --disable-cxi
    --disable-ucx --disable-lpp --enable-tcp --enable-shm --enable-rxm --enable-udp --enable-sockets
    --disable-static)
deps=(autoconf automake libtool make gcc pkg-config xz-utils)
if [ "$efa" = 1 ]; then flags+=(--enable-efa); deps+=(libibverbs-dev); else flags+=(--disable-efa); fi

cache=$(dirname "$prefix")
as_root mkdir -p "$cache"
if [ ! -w "$cache" ]; then as_root chown "$(id -u)" "$cache" 2>/dev/null || true; fi
# One setup at a time on the machine (CI jobs and helpers share the cache).
exec 9>"$cache/.libfabric.lock"
flock 9

stamp_of() { printf 'sha256=%s\nconfigure=%s\n' "$1" "${flags[*]}"; }

# Fast path: a complete prefix whose stamp matches the flags (the tarball hash is in the stamp;
# it is re-checked only when the tarball has to be fetched again).
if [ -s "$prefix/.stamp" ] && [ -s "$prefix/lib/pkgconfig/libfabric.pc" ] \
    && [ "$(sed -n 2p "$prefix/.stamp")" = "configure=${flags[*]}" ]; then
    missing=()
    for p in pkg-config; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
    if [ ${#missing[@]} -eq 0 ]; then
        echo "fabric-setup: libfabric $(PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --modversion libfabric) at $prefix (cached)"
        exit 0
    fi
fi

missing=()
for p in "${deps[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if [ ${#missing[@]} -gt 0 ]; then
    log "installing ${missing[*]}"
    as_root apt-get update -qq
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
        "${missing[@]}" >/dev/null
fi

# The Debian mirror of the host's own apt configuration.
mirror=$(apt-get indextargets --format '$(REPO_URI)' 'Label: Debian' 'Component: main' 2>/dev/null \
    | sort -u | head -n1)
if [ -z "$mirror" ]; then
    log "no Debian archive in the host's apt configuration (apt-get indextargets 'Label: Debian')"
    exit 1
fi

work=$cache/libfabric-src
apt_dir=$work/apt
mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial" "$work/dl"
echo "deb-src [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] $mirror $suite main" \
    > "$apt_dir/sources.list"
apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o Dir::State::Status=/dev/null
    -o APT::Sandbox::User=root -o Acquire::http::Timeout=30 -o Acquire::Retries=2)
upver=${srcver%%-*}
tarball=$work/dl/libfabric_${upver}.orig.tar.xz
if [ ! -s "$tarball" ]; then
    log "fetching libfabric_${upver}.orig.tar.xz ($suite source, host mirror)"
    apt-get "${apt_opts[@]}" update -qq >&2
    # The .dsc is not always served; the orig tarball is what is needed.
    (cd "$work/dl" && apt-get "${apt_opts[@]}" source --download-only -qq "libfabric=$srcver" \
        >"$work/download.log" 2>&1) || true
    if [ ! -s "$tarball" ]; then
        log "download of $tarball failed:"; cat "$work/download.log" >&2; exit 1
    fi
fi
sha=$(sha256sum "$tarball" | cut -d' ' -f1)
if [ -s "$prefix/.stamp" ] && [ "$(cat "$prefix/.stamp")" = "$(stamp_of "$sha")" ] \
    && [ -s "$prefix/lib/pkgconfig/libfabric.pc" ]; then
    echo "fabric-setup: libfabric $upver at $prefix (cached)"
    exit 0
fi

start=$(date +%s)
build=$work/build
rm -rf "$build" "$prefix.tmp"
mkdir -p "$build"
tar -C "$build" -xJf "$tarball"
src=$(find "$build" -mindepth 1 -maxdepth 1 -type d | head -n1)
log "building libfabric $upver (${flags[*]})"
(
    cd "$src"
    ./autogen.sh >"$work/build.log" 2>&1
    ./configure -q --prefix="$prefix" "${flags[@]}" >>"$work/build.log" 2>&1
    make -s -j"$(nproc)" >>"$work/build.log" 2>&1
    make -s install >>"$work/build.log" 2>&1
) || { log "build failed; see $work/build.log"; tail -n 20 "$work/build.log" >&2; exit 1; }
stamp_of "$sha" > "$prefix/.stamp"
rm -rf "$build"
echo "fabric-setup: libfabric $upver built in $(( $(date +%s) - start )) s at $prefix"
