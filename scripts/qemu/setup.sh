#!/usr/bin/env bash
# Provision what the QEMU VFIO test (cli/tests/qemu.rs) needs, from Debian's archive alone.
#
#   scripts/qemu/setup.sh        # idempotent; the first run on a machine pays, later runs reuse
#
# 1. Host packages, installed only when missing (`dpkg-query` check), without recommends and
#    without upgrading anything already installed: busybox-static and cpio (the initramfs), and
#    the kernel build dependencies flex bison bc make gcc libc6-dev libelf-dev libssl-dev
#    xz-utils.
# 2. A guest kernel built from Debian's source package linux-source-6.12 (NEURON_VFIO_KERNEL_SRC)
#    with `make tinyconfig` + scripts/qemu/guest-kernel.config, everything built in (no
#    modules). The package is fetched with `apt-get download` through a private apt list
#    (the host's own Debian mirror URIs, read from /etc/apt/sources.list{,.d/*.list,.d/*.sources};
#    the security suite's URI derived from the main one when the host lists none) and is never
#    installed. Cached under CACHE/kernels/VERSION-FRAGMENTHASH/ (vmlinux, bzImage, config,
#    version, source); CACHE/kernel links to the one in use.
# 3. QEMU 11.x with the vfio-user client, from Debian 13's trixie-backports (same mirror URI):
#    downloaded with its dependencies through another private apt list and unpacked with
#    `dpkg -x` into CACHE/qemu-11/root; scripts/qemu/qemu-vfio-user runs it through its own
#    loader. Checked: `-device help` must list vfio-user-pci. The QEMU test boots with it.
#    Should this fail, setup says so and installs the host's qemu-system-x86 instead.
#
# Package lists of the private apt dirs are refreshed at most once a day; a run in between
# needs no network. All apt/dpkg/make output goes to CACHE/setup.log, shown on failure.
#
# Environment: NEURON_VFIO_CACHE (default /var/cache/neuron-vfio), NEURON_VFIO_KERNEL_SRC
# (default linux-source-6.12), NEURON_VFIO_DEBIAN_MIRROR (the Debian archive URI; default:
# the host's), NEURON_VFIO_QEMU_SUITE (default trixie-backports), NEURON_VFIO_SKIP_QEMU11=1
# (do not provision QEMU 11).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${NEURON_VFIO_CACHE:-/var/cache/neuron-vfio}
t0=$(date +%s)

log() { echo "setup: $*" >&2; }
die() { log "$*"; exit 1; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        log "need root for: $*"; return 1; fi
}

if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
    as_root mkdir -p "$cache" && as_root chown "$(id -u):$(id -g)" "$cache"
fi
cache=$(cd "$cache" && pwd)
logf=$cache/setup.log
: > "$logf"
# One setup at a time per machine cache.
exec 9>"$cache/.lock"
flock 9

# quiet DESC CMD...: run CMD with its output in the log; on failure show the log's tail.
quiet() {
    local what=$1; shift
    echo "== $(date +%T) $what" >> "$logf"
    if ! "$@" >> "$logf" 2>&1; then
        log "$what failed; the end of $logf:"
        tail -n 30 "$logf" | sed 's/^/setup:   | /' >&2
        return 1
    fi
}

installed=() reused=() built=() notes=()

# ---- 1. host packages ------------------------------------------------------------------
host_pkgs=(busybox-static cpio flex bison bc make gcc libc6-dev libelf-dev libssl-dev xz-utils)
missing() {
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || echo "$p"
    done
}
apt_install() {
    quiet "apt-get update" as_root apt-get update -qq
    quiet "apt-get install $*" as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
        --no-install-recommends --no-upgrade "$@"
    installed+=("$@")
}
mapfile -t need < <(missing "${host_pkgs[@]}")
if [ ${#need[@]} -gt 0 ]; then apt_install "${need[@]}"; fi

# ---- the host's Debian mirror ------------------------------------------------------------
# shellcheck source=../lib/apt-sources.sh
. "$here/../lib/apt-sources.sh"

codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
[ -n "$codename" ] || die "cannot tell the host's Debian release (VERSION_CODENAME in /etc/os-release)"
mirror=${NEURON_VFIO_DEBIAN_MIRROR:-$(mirror_for "$codename")}
mirror=${mirror%/}
[ -n "$mirror" ] || die "no Debian mirror for '$codename' in the host's apt sources; set NEURON_VFIO_DEBIAN_MIRROR"
# Debian publishes the security suites next to the archive, as ARCHIVE-security.
security=$(mirror_for "$codename-security")
security=${security:-$mirror-security}
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -s "$keyring" ] || die "no $keyring (package debian-archive-keyring)"
arch=$(dpkg --print-architecture)

# ---- private apt dirs ----------------------------------------------------------------------
# papt_init NAME SOURCE_LINE...: an apt state of its own under CACHE/apt/NAME (lists, cache,
# an empty dpkg status); papt NAME ARGS...: apt-get with it; papt_update, papt_cache, candidate.
# The host's apt sources, lists and status are neither read nor written; its apt.conf (proxies)
# still applies.
# shellcheck source=../lib/private-apt.sh
. "$here/../lib/private-apt.sh"

# ---- 2. guest kernel -----------------------------------------------------------------------
src_pkg=${NEURON_VFIO_KERNEL_SRC:-linux-source-6.12}
fragment=$here/guest-kernel.config
frag_hash=$(sha256sum "$fragment" | cut -c1-12)
kernels=$cache/kernels
mkdir -p "$kernels"
papt_init kernel "deb [signed-by=$keyring] $mirror $codename main" \
    "deb [signed-by=$keyring] $mirror $codename-updates main" \
    "deb [signed-by=$keyring] $security $codename-security main"
kver_src=""
if papt_update kernel; then kver_src=$(candidate kernel "$src_pkg"); fi
if [ -z "$kver_src" ]; then
    # Offline with no lists, or no such package: the newest build of this fragment, if any.
    key=$(cd "$kernels" && ls -td -- *-"$frag_hash" 2>/dev/null | head -n1 || true)
    [ -n "$key" ] || die "cannot resolve $src_pkg in $mirror $codename{,-updates} / $security $codename-security, and no kernel of this config is cached"
    log "$src_pkg not resolvable; reusing the cached build $key"
else
    key=${kver_src//[:~]/_}-$frag_hash
fi
kdir=$kernels/$key

build_kernel() {
    local d=$cache/apt/kernel tmp=$kdir.tmp deb tree t
    tree=$(ls -d "$tmp"/src/linux-source-* 2>/dev/null | head -n1 || true)
    if [ -n "$tree" ] && [ -f "$tmp/unpacked" ]; then
        # An earlier run of this key failed part way: make resumes where it stopped.
        log "resuming the build in $tmp"
    else
        rm -rf "$tmp"; mkdir -p "$tmp/src"
        rm -f "$d/debs/${src_pkg}_"*.deb.partial
        deb=$(ls "$d/debs/${src_pkg}_${kver_src//:/%3a}_"*.deb 2>/dev/null | head -n1 || true)
        if [ -z "$deb" ]; then
            rm -f "$d/debs/${src_pkg}_"*.deb
            log "downloading $src_pkg $kver_src"
            (cd "$d/debs" && quiet "apt-get download $src_pkg" papt kernel download -qq "$src_pkg") || return 1
            deb=$(ls "$d/debs/${src_pkg}_"*.deb | head -n1)
        fi
        log "unpacking $(basename "$deb")"
        # Documentation, other architectures and the perf/selftest sources are never compiled
        # (Kconfig files and Makefiles are kept: Kconfig reads the whole tree).
        local skip=() dir ext
        for dir in Documentation tools/perf tools/testing 'arch/[a-wy-z]*' 'arch/x[a-z]*'; do
            for ext in c h S rst txt yaml dts dtsi json py; do skip+=("--exclude=linux-source-*/$dir/*.$ext"); done
        done
        dpkg-deb --fsys-tarfile "$deb" | tar -xO --wildcards './usr/src/linux-source-*.tar.*' > "$tmp/src.tar.xz" || return 1
        quiet "unpack $(basename "$deb")" tar -xJf "$tmp/src.tar.xz" -C "$tmp/src" "${skip[@]}" || return 1
        rm -f "$tmp/src.tar.xz"
        touch "$tmp/unpacked"
        tree=$(ls -d "$tmp"/src/linux-source-* | head -n1)
    fi
    t=$(date +%s)
    log "building the guest kernel (tinyconfig + guest-kernel.config, make -j$(nproc), nice 10; ~3 min on 2 cores)"
    rm -f "$tree/.config"
    quiet "make tinyconfig" nice -n 10 make -C "$tree" -s tinyconfig || return 1
    quiet "merge guest-kernel.config" "$tree/scripts/kconfig/merge_config.sh" -m -O "$tree" "$tree/.config" "$fragment" || return 1
    quiet "make olddefconfig" nice -n 10 make -C "$tree" -s olddefconfig || return 1
    # Every line of the fragment must have survived (an unmet dependency drops it silently).
    local want lost=()
    while read -r want; do
        grep -qxF "$want" "$tree/.config" || lost+=("$want")
    done < <(grep -E '^CONFIG_[A-Z0-9_]+=' "$fragment")
    if [ ${#lost[@]} -gt 0 ]; then log "guest-kernel.config: not in the resulting .config: ${lost[*]}"; return 1; fi
    quiet "make bzImage" nice -n 10 make -C "$tree" -s -j"$(nproc)" bzImage || return 1
    cp "$tree/vmlinux" "$tmp/vmlinux"
    cp "$tree/arch/x86/boot/bzImage" "$tmp/vmlinuz"
    cp "$tree/.config" "$tmp/config"
    if [ -f "$tree/modules.builtin" ]; then cp "$tree/modules.builtin" "$tmp/modules.builtin"; fi
    make -C "$tree" -s kernelrelease > "$tmp/version"
    echo "$src_pkg $kver_src $mirror $security; guest-kernel.config $frag_hash; built in $(( $(date +%s) - t )) s" > "$tmp/source"
    rm -rf "$tmp/src" "$tmp/unpacked"
    rm -rf "$kdir"; mv "$tmp" "$kdir"
}
if [ -s "$kdir/vmlinux" ] && [ -s "$kdir/config" ] && [ -s "$kdir/version" ]; then
    reused+=("kernel $(cat "$kdir/version") ($key)")
else
    if ! build_kernel; then die "the guest kernel could not be built (a rerun resumes the build in $kdir.tmp)"; fi
    built+=("kernel $(cat "$kdir/version") ($key; $(awk '{print $(NF-1)}' "$kdir/source") s)")
fi
ln -sfn "kernels/$key" "$cache/kernel"

# ---- 3. QEMU 11 with the vfio-user client --------------------------------------------------
qroot=$cache/qemu-11/root
qsuite=${NEURON_VFIO_QEMU_SUITE:-trixie-backports}
qemu11_ok() {
    local help
    help=$(NEURON_VFIO_CACHE=$cache "$here/qemu-vfio-user" -device help 2>&1) || { echo "$help" >> "$logf"; return 1; }
    grep -q '"vfio-user-pci"' <<< "$help"
}
provision_qemu11() {
    local d=$cache/apt/qemu-11 tmp=$cache/qemu-11/root.tmp deb l target ver
    papt_init qemu-11 "deb [signed-by=$keyring] $mirror ${qsuite%-backports} main" \
        "deb [signed-by=$keyring] $mirror $qsuite main"
    papt_update qemu-11 || return 1
    ver=$(papt_cache qemu-11 -t "$qsuite" policy qemu-system-x86 2>/dev/null | awk '/Candidate:/ {print $2}')
    [ -n "$ver" ] && [ "$ver" != "(none)" ] || { log "no qemu-system-x86 in $mirror $qsuite"; return 1; }
    if [ -s "$cache/qemu-11/version" ] && [ "$(cat "$cache/qemu-11/version")" = "$ver" ] && qemu11_ok; then
        reused+=("QEMU $ver"); return 0
    fi
    log "downloading qemu-system-x86 $ver ($qsuite) and its dependencies"
    quiet "apt-get install --download-only qemu-system-x86 ($qsuite)" \
        papt qemu-11 install -y -qq --download-only -t "$qsuite" qemu-system-x86 || return 1
    rm -rf "$tmp"; mkdir -p "$tmp"
    for deb in "$d/cache/archives"/*.deb; do
        quiet "dpkg -x $(basename "$deb")" dpkg -x "$deb" "$tmp" || return 1
    done
    # Absolute links (e.g. QEMU's firmware names into /usr/share/seabios) must stay in the root.
    find "$tmp" -type l | while read -r l; do
        target=$(readlink "$l")
        case $target in /*) ln -sfn "$qroot$target" "$l" ;; esac
    done
    rm -rf "$qroot"; mv "$tmp" "$qroot"
    echo "$ver" > "$cache/qemu-11/version"
    # The downloaded .debs are not needed once unpacked.
    rm -f "$d/cache/archives"/*.deb
    qemu11_ok || { log "QEMU $ver from $qsuite does not list vfio-user-pci (see $logf)"; return 1; }
    built+=("QEMU $ver")
}
# The root boots the tests' guest machine on its own: QEMU runs with the host's firmware
# directories (the ones compiled into Debian's QEMU, and the other usual ones) hidden under
# empty tmpfs mounts in a private mount namespace, so a firmware file the root lacks makes it
# fail here, whatever the host carries. The machine is the tests' (q35, intel-iommu, an
# e1000e for its option ROM, -kernel for the linuxboot ROM); it must reach the kernel.
qemu_boots_alone() {
    local out=$cache/qemu-11/selfcheck.log stamp=$cache/qemu-11/selfcheck.ok hide="" d
    for d in /usr/share/qemu /usr/share/seabios /usr/lib/ipxe /usr/share/ipxe /usr/share/qemu-efi \
        /usr/share/ovmf /usr/share/OVMF /usr/share/vgabios /usr/share/qemu-efi-aarch64; do
        if [ -d "$d" ]; then hide="$hide $d"; fi
    done
    if [ -n "$hide" ] && [ "$(id -u)" -ne 0 ]; then
        log "qemu self-check: not root, cannot hide the host's firmware ($hide); booting with it visible"
        hide=""
    fi
    # Once per QEMU version and set of hidden directories.
    if [ -s "$stamp" ] && [ "$(cat "$stamp")" = "$(cat "$cache/qemu-11/version") hidden:$hide" ]; then
        return 0
    fi
    rm -f "$out" "$stamp"
    local qemu_cmd=(timeout 180 env NEURON_VFIO_CACHE="$cache" "$here/qemu-vfio-user"
        -machine q35,accel=tcg,kernel-irqchip=split -cpu max -m 256 -smp 1
        -device intel-iommu,intremap=on,caching-mode=on
        -device pcie-root-port,id=rp0,chassis=1,slot=1 -device e1000e,bus=rp0
        -kernel "$cache/kernel/vmlinuz" -append "console=ttyS0 panic=-1"
        -nographic -no-reboot -nic none -serial "file:$out" -monitor none)
    # shellcheck disable=SC2016 # expanded by the inner shell
    local hider='for d in $1; do mount -t tmpfs -o ro,size=4k none "$d" || exit 125; done; shift; exec "$@"'
    if [ -z "$hide" ]; then
        # Nothing of the host's to hide (a fresh machine): no mount namespace needed.
        "${qemu_cmd[@]}" </dev/null >> "$logf" 2>&1 || true
    elif unshare --mount --propagation private true 2>/dev/null; then
        unshare --mount --propagation private sh -c "$hider" qemu-selfcheck "$hide" "${qemu_cmd[@]}" \
            </dev/null >> "$logf" 2>&1 || true
    else
        # In a chroot "/" is no mount point and cannot be made private by unshare: make the
        # tree private inside the namespace, or refuse to mount (the tmpfs must not propagate).
        # shellcheck disable=SC2016
        unshare --mount --propagation unchanged sh -c "mount --make-rprivate / || exit 125; $hider" \
            qemu-selfcheck "$hide" "${qemu_cmd[@]}" </dev/null >> "$logf" 2>&1 || true
    fi
    if grep -q "Linux version" "$out" 2>/dev/null; then
        echo "$(cat "$cache/qemu-11/version") hidden:$hide" > "$stamp"
        log "QEMU 11 boots the guest machine from its root alone (host firmware hidden:${hide:- none})"
        return 0
    fi
    log "QEMU 11 from its root alone did not reach the guest kernel (host firmware hidden:${hide:- none}); its output:"
    tail -n 5 "$logf" | sed 's/^/setup:   | /' >&2
    return 1
}
qemu=""
if [ "${NEURON_VFIO_SKIP_QEMU11:-0}" != 1 ] && provision_qemu11; then
    qemu_boots_alone || die "QEMU 11's root is incomplete (see $logf and $cache/qemu-11/selfcheck.log)"
    qemu="$here/qemu-vfio-user ($(cat "$cache/qemu-11/version"), vfio-user-pci)"
else
    rm -rf "$cache/qemu-11"
    notes+=("QEMU 11 (vfio-user client) NOT provisioned: the QEMU test uses the host's qemu-system-x86; a vfio-user test cannot run")
    log "WARNING: QEMU 11 from $qsuite could not be provisioned; falling back to the host's qemu-system-x86"
    mapfile -t need < <(missing qemu-system-x86)
    if [ ${#need[@]} -gt 0 ]; then apt_install qemu-system-x86; fi
    qemu="$(command -v qemu-system-x86_64) ($(qemu-system-x86_64 --version | head -n1))"
fi

# ---- summary -------------------------------------------------------------------------------
join() { local IFS=','; echo "${*:-none}" | sed 's/,/, /g'; }
log "done in $(( $(date +%s) - t0 )) s; installed: $(join "${installed[@]}"); built: $(join "${built[@]}"); reused: $(join "${reused[@]}"); qemu: $qemu"
for n in "${notes[@]}"; do log "NOTE: $n"; done
echo "NEURON_VFIO_CACHE=$cache"
