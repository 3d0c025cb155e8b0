#!/usr/bin/env bash
# Install what the QEMU VFIO harness needs and cache a guest kernel.
#
#   scripts/qemu/setup.sh            # idempotent; prints the cache paths it settled on
#
# - apt packages: qemu-system-x86 (bookworm-backports when on Debian 12), busybox-static,
#   cpio, kmod, xz-utils, zstd, ubuntu-keyring (to verify the Ubuntu archive);
# - a guest kernel, downloaded with `apt-get download` through a private apt list under the
#   cache (the host's apt sources are not touched) and unpacked with `dpkg -x` into
#   scripts/.cache/kernels/NAME/ — never installed on the host. scripts/.cache/kernel is a
#   symlink to the one the QEMU test boots:
#     ubuntu  Ubuntu 24.04 (noble-updates) linux-image-generic → linux-image-6.8.0-N-generic
#             + linux-modules-6.8.0-N-generic: legacy VFIO container AND iommufd + the VFIO
#             device cdev (CONFIG_IOMMUFD=m, CONFIG_VFIO_DEVICE_CDEV=y), so the test runs both;
#     debian  bookworm-backports linux-image-amd64 (6.12): legacy container only (Debian builds
#             without CONFIG_IOMMUFD); the test then reports the iommufd path as skipped.
#   The default tries ubuntu and falls back to debian when the Ubuntu archive is unreachable.
# - the uncompressed vmlinux extracted from the bzImage (boots faster under TCG), the kernel
#   config (KERNEL_DIR/config: the test reads it to know which VFIO paths must pass) and
#   KERNEL_DIR/source (package names, versions, archive).
#
# Environment: NEURON_VFIO_CACHE (default: <repo>/scripts/.cache),
#              NEURON_VFIO_KERNEL (ubuntu (default, falls back to debian) | debian),
#              NEURON_VFIO_UBUNTU_MIRROR, NEURON_VFIO_UBUNTU_SUITE, NEURON_VFIO_UBUNTU_PKG (default
#              http://archive.ubuntu.com/ubuntu, noble-updates,
#              linux-image-generic), NEURON_VFIO_KERNEL_SUITE / NEURON_VFIO_KERNEL_PKG (Debian;
#              default bookworm-backports / linux-image-amd64).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache=${NEURON_VFIO_CACHE:-$here/../.cache}
mkdir -p "$cache"
cache=$(cd "$cache" && pwd)

log() { echo "setup: $*" >&2; }

as_root() {
    if [ "$(id -u)" -eq 0 ]; then "$@"; elif command -v sudo >/dev/null; then sudo "$@"; else
        log "need root for: $*"; return 1; fi
}

codename=$(. /etc/os-release 2>/dev/null && echo "${VERSION_CODENAME:-}")
bpo=""
if [ "$codename" = bookworm ]; then
    bpo=bookworm-backports
    if ! grep -rqs "bookworm-backports" /etc/apt/sources.list /etc/apt/sources.list.d/; then
        log "adding bookworm-backports to apt sources"
        as_root tee /etc/apt/sources.list.d/bookworm-backports.sources >/dev/null <<SRC
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
        need_update=1
    fi
fi

have_tools() {
    command -v qemu-system-x86_64 >/dev/null && [ -x /bin/busybox ] && busybox --list 2>/dev/null | grep -qx modprobe \
        && command -v cpio >/dev/null && command -v depmod >/dev/null && command -v xz >/dev/null \
        && command -v zstd >/dev/null
}

apt_updated=""
apt_update() {
    if [ -z "$apt_updated" ]; then as_root apt-get update -qq; apt_updated=1; fi
}

if [ -n "${need_update:-}" ]; then apt_update; fi

if ! have_tools; then
    apt_update
    target=()
    # QEMU from backports (10.x) matches the qemu-utils these machines carry; its
    # dependencies come from backports too.
    if [ -n "$bpo" ]; then target=(-t "$bpo"); fi
    log "installing qemu-system-x86 busybox-static cpio kmod xz-utils zstd"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${target[@]}" \
        qemu-system-x86 busybox-static cpio kmod xz-utils zstd >&2
fi
# The Ubuntu archive's signing keys (a Debian package). Without them the Ubuntu kernel
# cannot be verified and setup falls back to Debian's kernel.
ubuntu_keyring=/usr/share/keyrings/ubuntu-archive-keyring.gpg
if [ ! -s "$ubuntu_keyring" ] && [ "${NEURON_VFIO_KERNEL:-ubuntu}" = ubuntu ]; then
    apt_update
    target=()
    if [ -n "$bpo" ]; then target=(-t "$bpo"); fi
    log "installing ubuntu-keyring"
    as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${target[@]}" \
        ubuntu-keyring >&2 || log "ubuntu-keyring unavailable"
fi

# ---- guest kernel ---------------------------------------------------------------------
kernels=$cache/kernels
mkdir -p "$kernels"
# Older caches held the Debian kernel directly in $cache/kernel.
if [ -d "$cache/kernel" ] && [ ! -L "$cache/kernel" ]; then
    rm -rf "$kernels/debian"; mv "$cache/kernel" "$kernels/debian"
fi

# fetch_kernel NAME ARCHIVE_URL SUITE COMPONENT KEYRING META: resolve META's kernel image and
# module packages in SUITE, download and unpack them into $kernels/NAME. Returns non-zero
# (leaving nothing behind) when the archive cannot be reached or has no such kernel.
fetch_kernel() {
    local name=$1 url=$2 suite=$3 comp=$4 keyring=$5 meta=$6
    local kdir=$kernels/$name apt_dir=$cache/apt-$name
    if [ -s "$kdir/vmlinux" ] && [ -d "$kdir/modules" ] && [ -s "$kdir/config" ]; then return 0; fi
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
    echo "deb [arch=amd64 signed-by=$keyring] $url $suite $comp" > "$apt_dir/sources.list"
    local apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o Dir::State::Status=/dev/null
        -o APT::Architecture=amd64 -o APT::Architectures::=amd64 -o APT::Sandbox::User=root
        -o Acquire::IndexTargets::deb::DEP-11::DefaultEnabled=false
        -o Acquire::IndexTargets::deb::DEP-11-icons::DefaultEnabled=false
        -o Acquire::IndexTargets::deb::DEP-11-icons-small::DefaultEnabled=false
        -o Acquire::IndexTargets::deb::CNF::DefaultEnabled=false
        -o Acquire::http::Timeout=30 -o Acquire::Retries=2)
    if ! apt-get "${apt_opts[@]}" update -qq >&2; then
        log "$name: cannot update the package lists of $url $suite"; return 1
    fi
    # meta -> linux-image-KVER -> linux-modules-KVER (Ubuntu) / linux-binary-KVER (newer Debian).
    # linux-modules-extra-* (not needed: VFIO and iommufd are in linux-modules) is not followed.
    deps() { apt-cache "${apt_opts[@]}" depends "$1" 2>/dev/null \
        | awk '/^ *Depends: linux-(image|binary|modules)-[0-9]/ {print $2}'; }
    local pkgs=() p q
    for p in $(deps "$meta"); do pkgs+=("$p"); for q in $(deps "$p"); do pkgs+=("$q"); done; done
    if [ ${#pkgs[@]} -eq 0 ]; then log "$name: cannot resolve $meta in $suite"; return 1; fi
    mapfile -t pkgs < <(printf '%s\n' "${pkgs[@]}" | sort -u)
    log "$name: downloading ${pkgs[*]} ($url $suite)"
    rm -rf "$kdir.tmp"; mkdir -p "$kdir.tmp/root"
    if ! (cd "$kdir.tmp" && apt-get "${apt_opts[@]}" download "${pkgs[@]}" >&2); then
        log "$name: download failed"; rm -rf "$kdir.tmp"; return 1
    fi
    : > "$kdir.tmp/source"
    local deb
    for deb in "$kdir.tmp"/*.deb; do
        echo "$(dpkg-deb -f "$deb" Package) $(dpkg-deb -f "$deb" Version) $url $suite" >> "$kdir.tmp/source"
        dpkg -x "$deb" "$kdir.tmp/root"
    done
    rm -f "$kdir.tmp"/*.deb
    local vmlinuz moddir config kver
    vmlinuz=$(ls "$kdir.tmp"/root/boot/vmlinuz-* "$kdir.tmp"/root/usr/lib/modules/*/vmlinuz 2>/dev/null | head -n1 || true)
    moddir=$(ls -d "$kdir.tmp"/root/lib/modules/*/ "$kdir.tmp"/root/usr/lib/modules/*/ 2>/dev/null | head -n1 || true)
    config=$(ls "$kdir.tmp"/root/boot/config-* "$kdir.tmp"/root/usr/lib/modules/*/config 2>/dev/null | head -n1 || true)
    if [ -z "$vmlinuz" ] || [ -z "$moddir" ]; then
        log "$name: no kernel image or modules in ${pkgs[*]}"; rm -rf "$kdir.tmp"; return 1
    fi
    kver=$(basename "$moddir")
    mv "$vmlinuz" "$kdir.tmp/vmlinuz"
    mv "$moddir" "$kdir.tmp/modules"
    if [ -n "$config" ]; then mv "$config" "$kdir.tmp/config"; else : > "$kdir.tmp/config"; fi
    rm -rf "$kdir.tmp/root"
    mkdir -p "$kdir.tmp/depmod/lib/modules"; ln -s "$kdir.tmp/modules" "$kdir.tmp/depmod/lib/modules/$kver"
    depmod -b "$kdir.tmp/depmod" "$kver" 2>/dev/null; rm -rf "$kdir.tmp/depmod"
    echo "$kver" > "$kdir.tmp/version"
    # The uncompressed ELF vmlinux (PVH entry) boots faster under TCG than the bzImage
    # (Ubuntu's is a signed bzImage with a zstd payload; the signature is irrelevant here).
    "$here/extract-vmlinux.sh" "$kdir.tmp/vmlinuz" > "$kdir.tmp/vmlinux" || rm -f "$kdir.tmp/vmlinux"
    rm -rf "$kdir"; mv "$kdir.tmp" "$kdir"
}

fetch_ubuntu() {
    if [ ! -s "$ubuntu_keyring" ] && [ ! -s "$kernels/ubuntu/config" ]; then log "ubuntu: no $ubuntu_keyring"; return 1; fi
    fetch_kernel ubuntu "${NEURON_VFIO_UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu}" \
        "${NEURON_VFIO_UBUNTU_SUITE:-noble-updates}" main "$ubuntu_keyring" "${NEURON_VFIO_UBUNTU_PKG:-linux-image-generic}"
}
fetch_debian() {
    fetch_kernel debian http://deb.debian.org/debian "${NEURON_VFIO_KERNEL_SUITE:-bookworm-backports}" main \
        /usr/share/keyrings/debian-archive-keyring.gpg "${NEURON_VFIO_KERNEL_PKG:-linux-image-amd64}"
}

chosen=""
case ${NEURON_VFIO_KERNEL:-ubuntu} in
    ubuntu)
        if fetch_ubuntu; then chosen=ubuntu
        else
            log "Ubuntu kernel unavailable: falling back to Debian's (no iommufd: that path will be skipped)"
            fetch_debian && chosen=debian
        fi ;;
    debian) fetch_debian && chosen=debian ;;
    *) log "NEURON_VFIO_KERNEL must be ubuntu or debian"; exit 2 ;;
esac
if [ -z "$chosen" ]; then log "no guest kernel could be fetched"; exit 1; fi
ln -sfn "kernels/$chosen" "$cache/kernel"

kdir=$cache/kernel
log "kernel $(cat "$kdir/version") ($chosen) in $(cd "$kdir" && pwd -P)"
sed 's/^/setup:   /' "$kdir/source" >&2 || true
grep -E '^CONFIG_(IOMMUFD|VFIO_DEVICE_CDEV|VFIO_CONTAINER|INTEL_IOMMU)=' "$kdir/config" | sed 's/^/setup:   /' >&2 || true
echo "NEURON_VFIO_CACHE=$cache"
