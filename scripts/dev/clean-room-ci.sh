#!/usr/bin/env bash
# Run CI (`CI=true bash .ci/run`) on a clean clone of REV inside a fresh, minimal Debian 12
# root — a fresh machine on this host — and print CI's summary and the wall time.
#
#   scripts/dev/clean-room-ci.sh [REV] [--keep] [--jobs N]     # REV default HEAD; as root
#
# Run it after any change to setup, install or CI scripts, and before resolving an issue
# (README, Contributing). A green `.ci/run` on a machine that keeps earlier runs' caches and
# host packages proves little: this root has nothing but Debian's minbase, the Rust toolchain
# and the clone, so a test that needs a file, package or cache the project's scripts do not
# install fails here.
#
# 1. The root: `debootstrap --variant=minbase bookworm` from the host's own Debian mirror (its
#    apt configuration; scripts/lib/apt-sources.sh), made once and cached as a tarball
#    (NEURON_VFIO_CLEAN_ROOM_CACHE, default /var/cache/neuron-vfio-clean-room/; delete the
#    tarball to make a new one). Each run unpacks it afresh under /var/tmp.
# 2. The host's apt sources and apt.conf.d (proxies) and its extra CA certificates
#    (/usr/local/share/ca-certificates: crates.io and PyPI may chain to a CA only the host
#    trusts) are copied in; ca-certificates is installed in the root.
# 3. The Rust toolchain (~/.cargo/bin, ~/.rustup) is bind-mounted read-only; CARGO_HOME's
#    registry starts empty (crates come from crates.io again). No host cache is mounted:
#    /var/cache/neuron-vfio is the root's own, empty.
# 4. A clean clone of REV at /src/main, the steering repo's shared/ (if beside the repo) at
#    /src/shared; the root bound onto itself (a mount point, as a machine's / is), /proc,
#    /sys, /dev bound; everything inside a private mount namespace (`unshare -m`), so nothing
#    stays mounted if the run dies.
# 5. Inside: `CI=true bash .ci/run` with HOME=/root and a plain PATH.
#
# Prints the test summary (passed/failed/ignored over all binaries, the failed tests' names),
# `.ci/run`'s exit status and the wall time; exits with `.ci/run`'s status. The whole log is
# kept at ROOT's parent as ci.log. --keep leaves the root for inspection.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
rev=HEAD keep=0
while [ $# -gt 0 ]; do
    case $1 in
        --keep) keep=1 ;;
        -h|--help) sed -n '2,31p' "$0"; exit 0 ;;
        -*) echo "clean-room: unknown option $1" >&2; exit 2 ;;
        *) rev=$1 ;;
    esac
    shift
done

log() { echo "clean-room: $*" >&2; }
die() { log "$*"; exit 1; }
[ "$(id -u)" -eq 0 ] || die "run as root (debootstrap, chroot, mounts)"

commit=$(git -C "$repo" rev-parse --verify "$rev^{commit}") || die "no commit $rev in $repo"
cache=${NEURON_VFIO_CLEAN_ROOM_CACHE:-/var/cache/neuron-vfio-clean-room}
suite=bookworm
tarball=$cache/$suite-minbase.tar.gz
mkdir -p "$cache"
t0=$(date +%s)

# shellcheck source=../lib/apt-sources.sh
. "$here/../lib/apt-sources.sh"

# ---- 1. the minimal root, cached ----------------------------------------------------------
if [ ! -s "$tarball" ]; then
    mirror=$(mirror_for "$suite")
    [ -n "$mirror" ] || die "no Debian mirror for $suite in the host's apt sources"
    command -v debootstrap >/dev/null || {
        log "installing debootstrap"
        DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap >/dev/null
    }
    tmp=$(mktemp -d /var/tmp/clean-room-bootstrap.XXXXXX)
    log "debootstrap --variant=minbase $suite from the host's mirror (once; cached as $tarball)"
    if ! debootstrap --variant=minbase "$suite" "$tmp/root" "$mirror" > "$tmp/debootstrap.log" 2>&1; then
        tail -n 20 "$tmp/debootstrap.log" >&2
        rm -rf "$tmp"
        die "debootstrap failed"
    fi
    tar -C "$tmp/root" -czf "$tarball.tmp" .
    mv "$tarball.tmp" "$tarball"
    rm -rf "$tmp"
fi

work=$(mktemp -d /var/tmp/clean-room.XXXXXX)
root=$work/root
cleanup() {
    local rc=$?
    if [ "$keep" = 1 ]; then log "root kept at $root"; else rm -rf "$root"; fi
    exit "$rc"
}
trap cleanup EXIT
mkdir -p "$root"
tar -C "$root" -xzf "$tarball"

# ---- 2. apt sources, proxies, certificates -----------------------------------------------
rm -f "$root/etc/apt/sources.list"
for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources; do
    [ -f "$f" ] && cp "$f" "$root$f"
done
for f in /etc/apt/apt.conf.d/*; do
    [ -f "$f" ] && cp "$f" "$root/etc/apt/apt.conf.d/"
done
cp /etc/resolv.conf "$root/etc/resolv.conf" 2>/dev/null || true
mkdir -p "$root/usr/local/share/ca-certificates"
cp /usr/local/share/ca-certificates/*.crt "$root/usr/local/share/ca-certificates/" 2>/dev/null || true

# ---- 3./4. toolchain, clone, shared --------------------------------------------------------
mkdir -p "$root/root/.cargo/bin" "$root/root/.rustup" "$root/src"
git clone -q --no-local --no-checkout "$repo" "$root/src/main"
git -C "$root/src/main" checkout -q --detach "$commit"
shared=$(cd "$repo/.." && pwd)/shared
if [ -d "$shared" ]; then cp -a "$shared" "$root/src/shared"; fi
rustup_home=${RUSTUP_HOME:-$HOME/.rustup}
cargo_bin=${CARGO_HOME:-$HOME/.cargo}/bin
[ -x "$cargo_bin/cargo" ] || die "no cargo in $cargo_bin"

inner='set -e
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends ca-certificates >/dev/null
update-ca-certificates >/dev/null 2>&1
cd /src/main
echo "clean-room: inside: $(. /etc/os-release; echo "$PRETTY_NAME"), $(dpkg-query -W -f "." | wc -c) packages, commit $(cat /src/commit)"
start=$(date +%s)
set +e
CI=true bash .ci/run
rc=$?
echo "clean-room: .ci/run exited $rc after $(( $(date +%s) - start )) s"
exit $rc'
echo "$commit" > "$root/src/commit"

log "commit $commit; root $root; running CI inside (a first run builds the guest kernel, QEMU 11's root, libfabric: 15-25 min on 2 cores)"
set +e
unshare --mount --propagation private bash -c '
    set -e
    root=$1 rustup_home=$2 cargo_bin=$3 inner=$4
    # The root is a mount point, as / is on a machine (`ip -n NS` makes / a slave mount in
    # the namespace it enters, which fails with EINVAL on a directory that is not one).
    mount --bind "$root" "$root"
    mount --rbind /dev "$root/dev"
    mount -t proc proc "$root/proc"
    mount --rbind /sys "$root/sys"
    mount --bind -o ro "$rustup_home" "$root/root/.rustup"
    mount --bind -o ro "$cargo_bin" "$root/root/.cargo/bin"
    exec chroot "$root" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
        PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
        SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
        bash -c "$inner"
' clean-room "$root" "$rustup_home" "$cargo_bin" "$inner" 2>&1 | tee "$work/ci.log"
rc=${PIPESTATUS[0]}
set -e

# ---- summary -------------------------------------------------------------------------------
passed=$(grep -E '^test result:' "$work/ci.log" | grep -oE '[0-9]+ passed' | awk '{s += $1} END {print s + 0}')
failed=$(grep -E '^test result:' "$work/ci.log" | grep -oE '[0-9]+ failed' | awk '{s += $1} END {print s + 0}')
ignored=$(grep -E '^test result:' "$work/ci.log" | grep -oE '[0-9]+ ignored' | awk '{s += $1} END {print s + 0}')
binaries=$(grep -cE '^test result:' "$work/ci.log" || true)
echo "== clean-room CI of $commit =="
echo "test binaries: $binaries; passed: $passed; failed: $failed; ignored: $ignored"
grep -E '^test .* \.\.\. FAILED$' "$work/ci.log" | sort -u | sed 's/^/  /' || true
echo ".ci/run exit status: $rc; wall time $(( $(date +%s) - t0 )) s (log: $work/ci.log)"
exit "$rc"
