#!/usr/bin/env bash
# The vendor's Neuron kmod, unmodified, in a QEMU guest against `neuron-vfio sim-serve`: the
# whole driver as a client of the virtual device (docs/kmod-guest.md, README.md here).
#
#   KMOD_DIR=/path/to/aws-neuron-driver [KMOD_V4_DIR=/path/to/wombelix-aws-neuron-driver] \
#       scripts/dev/kmod-guest/run.sh [--arch sunda|cayman|mariana]... [--probe FILE.c]... \
#       [--trace-dir DIR]
#
# For each arch (default: sunda, cayman, mariana in turn):
#  1. Debian's stock kernel (one pinned version, KVER below): the image (its vmlinuz only),
#     headers and kbuild, fetched with `apt-get download` through a private apt state built
#     from the host's own apt sources (scripts/lib/apt-sources.sh, scripts/lib/private-apt.sh)
#     and unpacked with `dpkg -x` under CACHE/kmod-guest/ (nothing is installed).
#  2. neuron.ko built from KMOD_DIR (sunda, cayman; pinned to ../kmod-oracle/KMOD_COMMIT) or
#     KMOD_V4_DIR/src (mariana; ../kmod-oracle/KMOD_V4_COMMIT), copied to OUT first.
#  3. guest-check.c (ours) and every --probe FILE.c compiled -static -Wall -Werror against the
#     checkout's neuron_ioctl.h.
#  4. `neuron-vfio --mmio-trace sim-serve` serves the arch; QEMU 11 (scripts/qemu/setup.sh)
#     boots the kernel with an initramfs that loads neuron.ko (the real-hardware path: no
#     vIOMMU) and runs the checks. Every check line is printed, then the device's stats.
#
# Exit status: non-zero when a KMOD_DIR is missing or at another commit, a build fails, any
# check says FAIL, the guest did not finish, or the kernel log shows an oops, a BUG or a
# WARNING. The kmod, its header and everything built from them stay under OUT (never commit
# them: GPL-2.0).
#
# Environment: KMOD_DIR, KMOD_V4_DIR; NEURON_VFIO_CACHE (default /var/cache/neuron-vfio);
# CARGO_TARGET_DIR (where `cargo build -p cli` goes; default <repo>/target); OUT (default
# $CARGO_TARGET_DIR/kmod-guest); NEURON_VFIO_QEMU (a QEMU to use instead of
# scripts/qemu/qemu-vfio-user); KMOD_GUEST_TIMEOUT (seconds per guest, default 300);
# NEURON_VFIO_DEBIAN_MIRROR (override the host's mirror URI).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
oracle=$root/scripts/dev/kmod-oracle

# The one kernel the harness builds for and boots (Debian 12's 6.12 from bookworm-security).
KVER=6.12.118+deb12
KFLAVOUR=$KVER-amd64
KPKGS=(linux-image-$KFLAVOUR-unsigned linux-headers-$KFLAVOUR linux-headers-$KVER-common linux-kbuild-$KVER)
KSUITE=bookworm

log() { echo "kmod-guest: $*" >&2; }
die() { log "$*"; exit 1; }
usage() { sed -n '2,8p' "$0" >&2; exit 2; }

arches=() probes=() trace_dir=""
while [ $# -gt 0 ]; do
    case $1 in
        --arch) [ $# -ge 2 ] || usage; arches+=("$2"); shift 2 ;;
        --probe) [ $# -ge 2 ] || usage; probes+=("$(cd "$(dirname "$2")" && pwd)/$(basename "$2")"); shift 2 ;;
        --trace-dir) [ $# -ge 2 ] || usage; trace_dir=$2; shift 2 ;;
        -h|--help) usage ;;
        *) log "unknown argument: $1"; usage ;;
    esac
done
[ ${#arches[@]} -gt 0 ] || arches=(sunda cayman mariana)
for a in "${arches[@]}"; do
    case $a in sunda|cayman|mariana) ;; *) die "unknown arch '$a' (sunda, cayman or mariana)" ;; esac
done
for p in "${probes[@]}"; do [ -f "$p" ] || die "probe $p: no such file"; done

# ---- the kmod checkouts --------------------------------------------------------------------
# pinned DIR PINFILE: DIR is a clean git checkout at the commit PINFILE names (as the oracle's
# build.sh checks it).
pinned() {
    local dir=$1 pin got
    pin=$(cat "$oracle/$2")
    got=$(git -C "$dir" rev-parse HEAD 2>/dev/null || true)
    if [ "$got" != "$pin" ]; then
        log "$dir is at '${got:-not a git checkout}', the harness is pinned to $pin (scripts/dev/kmod-oracle/$2)"
        die "  git -C $dir checkout $pin"
    fi
    if [ -n "$(git -C "$dir" status --porcelain --untracked-files=no)" ]; then
        die "$dir has local modifications: the harness builds the kmod unmodified"
    fi
}
need_v3=0 need_v4=0
for a in "${arches[@]}"; do case $a in mariana) need_v4=1 ;; *) need_v3=1 ;; esac; done
if [ $need_v3 = 1 ]; then
    [ -n "${KMOD_DIR:-}" ] && [ -d "${KMOD_DIR:-}" ] || die "KMOD_DIR is not set or not a directory: it must be a checkout of aws-neuron/aws-neuron-driver at $(cat "$oracle/KMOD_COMMIT") (scripts/dev/kmod-oracle/README.md) for sunda and cayman"
    pinned "$KMOD_DIR" KMOD_COMMIT
fi
if [ $need_v4 = 1 ]; then
    [ -n "${KMOD_V4_DIR:-}" ] && [ -d "${KMOD_V4_DIR:-}/src" ] || die "KMOD_V4_DIR is not set or has no src/: it must be a checkout of wombelix/aws-neuron-driver at $(cat "$oracle/KMOD_V4_COMMIT") (scripts/dev/kmod-oracle/README.md) for mariana"
    pinned "$KMOD_V4_DIR" KMOD_V4_COMMIT
fi
kmod_src() { case $1 in mariana) echo "$KMOD_V4_DIR/src" ;; *) echo "$KMOD_DIR" ;; esac; }
kmod_tree() { case $1 in mariana) echo v4 ;; *) echo v3 ;; esac; }
kmod_commit() { case $1 in mariana) cat "$oracle/KMOD_V4_COMMIT" ;; *) cat "$oracle/KMOD_COMMIT" ;; esac; }

# ---- caches and output ---------------------------------------------------------------------
cache=${NEURON_VFIO_CACHE:-/var/cache/neuron-vfio}
mkdir -p "$cache" 2>/dev/null || die "cannot create the cache $cache (run scripts/qemu/setup.sh first, or set NEURON_VFIO_CACHE)"
cache=$(cd "$cache" && pwd)
target=${CARGO_TARGET_DIR:-$root/target}
OUT=${OUT:-$target/kmod-guest}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
logf=$OUT/build.log
: > "$logf"
quiet() {
    local what=$1; shift
    echo "== $(date +%T) $what" >> "$logf"
    if ! "$@" >> "$logf" 2>&1; then
        log "$what failed; the end of $logf:"
        tail -n 40 "$logf" | sed 's/^/kmod-guest:   | /' >&2
        return 1
    fi
}

qemu=${NEURON_VFIO_QEMU:-$root/scripts/qemu/qemu-vfio-user}
if [ -z "${NEURON_VFIO_QEMU:-}" ] && [ ! -x "$cache/qemu-11/root/usr/bin/qemu-system-x86_64" ]; then
    die "no QEMU 11 in $cache/qemu-11 (vfio-user-pci): run scripts/qemu/setup.sh first"
fi
command -v busybox >/dev/null || die "busybox not found: run scripts/qemu/setup.sh (it installs busybox-static and cpio)"

# ---- 1. Debian's stock kernel ----------------------------------------------------------------
kdir=$cache/kmod-guest/linux-$KFLAVOUR
fetch_kernel() {
    local arch codename mirror security keyring d tmp deb p
    # shellcheck source=../../lib/apt-sources.sh
    . "$root/scripts/lib/apt-sources.sh"
    arch=$(dpkg --print-architecture)
    [ "$arch" = amd64 ] || die "the harness boots Debian's amd64 kernel; this host is $arch"
    codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
    mirror=${NEURON_VFIO_DEBIAN_MIRROR:-$(mirror_for "$codename")}
    mirror=${mirror%/}
    [ -n "$mirror" ] || die "no Debian mirror for '$codename' in the host's apt sources; set NEURON_VFIO_DEBIAN_MIRROR"
    security=$(mirror_for "$codename-security")
    security=${security:-$mirror-security}
    keyring=/usr/share/keyrings/debian-archive-keyring.gpg
    [ -s "$keyring" ] || die "no $keyring (package debian-archive-keyring)"
    # shellcheck source=../../lib/private-apt.sh
    . "$root/scripts/lib/private-apt.sh"
    # The pinned kernel is Debian 12's (bookworm-security), whatever the host runs: the suites
    # are fixed, the URIs are the host's.
    papt_init kmod-guest "deb [signed-by=$keyring] $mirror $KSUITE main" \
        "deb [signed-by=$keyring] $security $KSUITE-security main"
    papt_update kmod-guest || die "cannot fetch the package lists of $mirror $KSUITE / $security $KSUITE-security"
    d=$cache/apt/kmod-guest/debs
    for p in "${KPKGS[@]}"; do
        if ! ls "$d/${p}_"*.deb >/dev/null 2>&1; then
            log "downloading $p"
            (cd "$d" && quiet "apt-get download $p" papt kmod-guest download -qq "$p") ||
                die "$p is not in $KSUITE{,-security} any more? (the harness pins $KVER; see $logf)"
        fi
    done
    tmp=$kdir.tmp
    rm -rf "$tmp"; mkdir -p "$tmp/root"
    # The image: its vmlinuz and config only (the modules are most of its 107 MB).
    deb=$(ls "$d/linux-image-$KFLAVOUR-unsigned_"*.deb | head -n1)
    dpkg-deb --fsys-tarfile "$deb" | tar -x -C "$tmp" "./boot/vmlinuz-$KFLAVOUR" "./boot/config-$KFLAVOUR"
    mv "$tmp/boot/vmlinuz-$KFLAVOUR" "$tmp/vmlinuz"; mv "$tmp/boot/config-$KFLAVOUR" "$tmp/config"; rmdir "$tmp/boot"
    for p in linux-headers-$KFLAVOUR linux-headers-$KVER-common linux-kbuild-$KVER; do
        quiet "dpkg -x $p" dpkg -x "$(ls "$d/${p}_"*.deb | head -n1)" "$tmp/root"
    done
    # Absolute links and the headers' Makefile name /usr/...: point them into the root.
    find "$tmp/root" -type l | while read -r l; do
        t=$(readlink "$l")
        case $t in /*) ln -sfn "$kdir/root$t" "$l" ;; esac
    done
    sed -i "s|/usr/src/|$kdir/root/usr/src/|g" "$tmp/root/usr/src/linux-headers-$KFLAVOUR/Makefile"
    echo "$KFLAVOUR" > "$tmp/version"
    {
        echo "Debian $KVER (${KPKGS[*]}) from $mirror $KSUITE / $security $KSUITE-security"
        for p in "${KPKGS[@]}"; do basename "$(ls "$d/${p}_"*.deb | head -n1)"; done
    } > "$tmp/source"
    rm -rf "$kdir"; mv "$tmp" "$kdir"
    # Only the unpacked files are used from now on.
    rm -f "$d"/*.deb
}
if [ -s "$kdir/vmlinuz" ] && [ -d "$kdir/root/usr/src/linux-headers-$KFLAVOUR" ]; then
    log "kernel $KFLAVOUR: cached in $kdir"
else
    mkdir -p "$cache/kmod-guest"
    fetch_kernel
    log "kernel $KFLAVOUR: fetched into $kdir"
fi
kbuild=$kdir/root/usr/src/linux-headers-$KFLAVOUR

# ---- 2. neuron.ko ----------------------------------------------------------------------------
# build_kmod TREE SRC: copy the checkout's tracked files to OUT/kmod-TREE and build there (the
# kmod's Kbuild writes its objects next to its sources; the checkout stays untouched).
build_kmod() {
    local tree=$1 src=$2 b=$OUT/kmod-$1 t
    if [ -s "$b/neuron.ko" ] && [ "$(cat "$b/.commit" 2>/dev/null)" = "$(git -C "$src" rev-parse HEAD) $KFLAVOUR" ]; then
        return 0
    fi
    rm -rf "$b"; mkdir -p "$b"
    (cd "$src" && git ls-files -z . | xargs -0 cp --parents -t "$b")
    t=$(date +%s)
    # pahole is not needed: no BTF for the module (CONFIG_DEBUG_INFO_BTF_MODULES off).
    quiet "build neuron.ko ($tree)" make -C "$kbuild" M="$b" -j"$(nproc)" modules CONFIG_DEBUG_INFO_BTF_MODULES= ||
        die "neuron.ko ($tree) did not build against $KFLAVOUR (see $logf)"
    echo "$(git -C "$src" rev-parse HEAD) $KFLAVOUR" > "$b/.commit"
    log "neuron.ko ($tree, $(git -C "$src" rev-parse --short HEAD)) built in $(( $(date +%s) - t )) s"
}

# ---- 3. the guest programs -------------------------------------------------------------------
# build_prog SRC OUTFILE KMOD_SRC: static, -Wall -Werror, against the checkout's header.
build_prog() {
    quiet "cc $(basename "$1")" gcc -std=gnu11 -O2 -Wall -Wextra -Werror -static -I"$3" -o "$2" "$1" -lpthread ||
        die "$(basename "$1") did not compile against $3/neuron_ioctl.h (see $logf)"
}

if [ $need_v3 = 1 ]; then build_kmod v3 "$KMOD_DIR"; fi
if [ $need_v4 = 1 ]; then build_kmod v4 "$KMOD_V4_DIR/src"; fi
if [ -n "${KMOD_GUEST_BUILD_ONLY:-}" ]; then log "KMOD_GUEST_BUILD_ONLY: stopping after the builds"; exit 0; fi

# ---- 4. the CLI (sim-serve) ------------------------------------------------------------------
log "building neuron-vfio (cargo build -p cli, $target)"
(cd "$root" && CARGO_TARGET_DIR=$target cargo build -q -p cli) || die "cargo build -p cli failed"
bin=$target/debug/neuron-vfio

# ---- 5. one guest per arch -------------------------------------------------------------------
timeout_s=${KMOD_GUEST_TIMEOUT:-300}
# Debian's LSM list (the kernel's CONFIG_LSM) without IPE: the v3 kmod reads
# /sys/class/dmi/id/product_name with kernel_read_file_from_path(..., READING_UNKNOWN)
# (ndhal_instance_type_pod), and IPE WARNs on every read id it has no rule for
# (security/ipe/hooks.c) — a kernel/kmod interaction of any IPE kernel, not the device's.
lsm=$(sed -n 's/^CONFIG_LSM="\(.*\)"$/\1/p' "$kdir/config" | tr ',' '\n' | grep -vx ipe | paste -sd, -)
mem=512
status=0
summary=()
for a in "${arches[@]}"; do
    tree=$(kmod_tree "$a"); src=$(kmod_src "$a")
    w=$OUT/$a
    rm -rf "$w"; mkdir -p "$w/progs"
    build_prog "$here/guest-check.c" "$w/progs/guest-check" "$src"
    progs=(-b "$w/progs/guest-check")
    : > "$w/probes.list"
    for p in "${probes[@]}"; do
        n=probe-$(basename "$p" .c)
        build_prog "$p" "$w/progs/$n" "$src"
        progs+=(-b "$w/progs/$n")
        echo "$n" >> "$w/probes.list"
    done
    quiet "mkinitramfs ($a)" bash "$root/scripts/image/mkinitramfs.sh" -k "$kdir" -o "$w/initramfs.cpio" \
        "${progs[@]}" -s "$here/guest-boot.sh" -f "$OUT/kmod-$tree/neuron.ko:/lib/neuron/neuron.ko" \
        -f "$w/probes.list:/etc/kmod-guest/probes" || die "mkinitramfs failed (see $logf)"

    sock=$w/neuron0.sock ctl=$w/neuron0.ctl trace=$w/mmio.trace
    rm -f "$sock" "$ctl"
    # BAR4 as the hardware has it, over all HBM (the kmod mmaps device memory through it,
    # nmmap_dm: mmap_get_bar4_offset), not sim-serve's default 64 MiB window; the guest's 64-bit
    # PCI hole is made large enough for it.
    "$bin" --mmio-trace "$trace" sim-serve --arch "$a" --socket "$sock" --control "$ctl" --bar4-window $((1 << 40)) \
        > "$w/sim-serve.log" 2>&1 &
    server=$!
    for _ in $(seq 100); do [ -S "$sock" ] && [ -S "$ctl" ] && break; sleep 0.1; done
    [ -S "$sock" ] || { cat "$w/sim-serve.log" >&2; die "sim-serve did not start"; }
    mapfile -t vdev < <(sh "$root/scripts/qemu/vdev-args.sh" -m "$mem" -n "$sock")

    log "$a: booting $KFLAVOUR with neuron.ko ($tree @ $(kmod_commit "$a" | cut -c1-7)) against sim-serve"
    t0=$(date +%s.%N)
    # The serial console is read live: each `KMOD-GUEST-MARK NAME` line of the guest becomes a
    # mark in the MMIO trace (through the control socket) before the guest, waiting for a line
    # on its console, goes on. So every check's register traffic is delimited in the trace.
    coproc GUEST { exec timeout "$timeout_s" env NEURON_VFIO_CACHE="$cache" "$qemu" \
        -machine q35,accel=tcg,kernel-irqchip=split -cpu max -m "$mem" -smp 2 "${vdev[@]}" \
        -kernel "$kdir/vmlinuz" -initrd "$w/initramfs.cpio" \
        -append "console=ttyS0 oops=panic panic=-1 loglevel=4 lsm=$lsm kmod_guest.arch=$a" \
        -global q35-pcihost.pci-hole64-size=512G \
        -display none -no-reboot -nic none -serial stdio -monitor none 2>&1; }
    gpid=$GUEST_PID
    : > "$w/console.log"
    while IFS= read -r line <&"${GUEST[0]}"; do
        line=${line%$'\r'}
        printf '%s\n' "$line" >> "$w/console.log"
        case $line in
            KMOD-GUEST-MARK\ *)
                "$bin" sim-control --control "$ctl" "mark ${line#KMOD-GUEST-MARK }" > /dev/null ||
                    log "mark failed: ${line#KMOD-GUEST-MARK }"
                printf '\n' >&"${GUEST[1]}"
                ;;
        esac
    done
    wait "$gpid" && qrc=0 || qrc=$?
    t1=$(date +%s.%N)
    # sim-serve prints the device's stats when its client (QEMU) disconnects, then exits.
    for _ in $(seq 50); do kill -0 "$server" 2>/dev/null || break; sleep 0.1; done
    kill "$server" 2>/dev/null || true
    wait "$server" 2>/dev/null || true
    stats=$(sed -n 's/^sim-serve: client disconnected; stats //p' "$w/sim-serve.log")
    stats=${stats:-"(none: sim-serve did not see the client disconnect; $w/sim-serve.log)"}
    wall=$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')

    # ---- the verdict ----
    grep -a '^NTEST ' "$w/console.log" | sed "s/^/$a: /" || true
    ok=$(grep -ac '^NTEST ok ' "$w/console.log" || true)
    bad=$(grep -ac '^NTEST FAIL ' "$w/console.log" || true)
    why=()
    [ "$bad" = 0 ] || why+=("$bad checks failed")
    [ "$qrc" = 0 ] || why+=("QEMU exit status $qrc$([ "$qrc" = 124 ] && echo " (timeout ${timeout_s}s)")")
    grep -aq '^KMOD-GUEST done' "$w/console.log" || why+=("the guest did not finish")
    if grep -aE 'Oops|BUG:|WARNING:|Kernel panic|Call Trace|general protection' "$w/console.log" > "$w/kernel-problems.log"; then
        why+=("kernel log: $(head -n1 "$w/kernel-problems.log")")
    fi
    echo "$a: stats $stats"
    line="$a: $ok ok, $bad FAIL, boot to result ${wall}s"
    if [ ${#why[@]} -gt 0 ]; then
        status=1
        line="$line — FAILED: $(IFS=';'; echo "${why[*]}") (console: $w/console.log)"
    fi
    echo "$line"
    summary+=("$line")
    if [ -n "$trace_dir" ]; then mkdir -p "$trace_dir/$a"; cp "$trace" "$trace_dir/$a/mmio.trace"; fi
done
printf '%s\n' "${summary[@]}"
exit $status
