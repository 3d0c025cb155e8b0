#!/usr/bin/env bash
# Install what the QEMU VFIO harness needs and cache a guest kernel.
#
#   scripts/qemu/setup.sh            # idempotent; prints the cache paths it settled on
#
# - apt packages: qemu-system-x86 (bookworm-backports when on Debian 12), busybox-static,
#   cpio, kmod, xz-utils, zstd;
# - a Debian kernel (bookworm-backports 6.12: it has both the legacy VFIO container and the
#   VFIO device cdev + iommufd) downloaded with `apt-get download` and unpacked with
#   `dpkg -x` into scripts/.cache/kernel/ — never installed on the host;
# - the uncompressed vmlinux extracted from the bzImage (boots faster under TCG).
#
# Environment: NEURON_VFIO_CACHE (default: <repo>/scripts/.cache),
#              NEURON_VFIO_KERNEL_PKG (default: linux-image-amd64 from bookworm-backports).
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

# ---- guest kernel ---------------------------------------------------------------------
# Default: bookworm-backports' 6.12 (legacy VFIO container; Debian builds its kernels,
# 6.12 and 7.x alike, without CONFIG_IOMMUFD, so the iommufd/cdev path needs a kernel set
# with NEURON_VFIO_KERNEL_SUITE/NEURON_VFIO_KERNEL_PKG that has it; the test reports which
# paths the booted kernel offers). The kernel is fetched through a private apt list under
# the cache (the host's apt sources are not touched) and only unpacked, never installed.
suite=${NEURON_VFIO_KERNEL_SUITE:-bookworm-backports}
meta=${NEURON_VFIO_KERNEL_PKG:-linux-image-amd64}
kdir=$cache/kernel
if [ ! -s "$kdir/vmlinux" ] || [ ! -d "$kdir/modules" ]; then
    apt_dir=$cache/apt
    mkdir -p "$apt_dir/lists/partial" "$apt_dir/cache/archives/partial"
    echo "deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian $suite main" \
        > "$apt_dir/sources.list"
    apt_opts=(-o "Dir::Etc::SourceList=$apt_dir/sources.list" -o Dir::Etc::SourceParts=/dev/null
        -o "Dir::State::Lists=$apt_dir/lists" -o "Dir::Cache=$apt_dir/cache" -o APT::Sandbox::User=root)
    apt-get "${apt_opts[@]}" update -qq >&2
    # linux-image-amd64 -> linux-image-KVER -> (newer layouts) linux-binary-KVER, linux-modules-KVER
    deps() { apt-cache "${apt_opts[@]}" depends "$1" 2>/dev/null \
        | awk '/^ *Depends: linux-(image|binary|modules)-[0-9]/ {print $2}'; }
    pkgs=()
    for p in $(deps "$meta"); do pkgs+=("$p"); for q in $(deps "$p"); do pkgs+=("$q"); done; done
    if [ ${#pkgs[@]} -eq 0 ]; then log "cannot resolve $meta in $suite"; exit 1; fi
    log "downloading ${pkgs[*]} ($suite)"
    rm -rf "$kdir.tmp"; mkdir -p "$kdir.tmp/root"
    (cd "$kdir.tmp" && apt-get "${apt_opts[@]}" download "${pkgs[@]}" >&2)
    for deb in "$kdir.tmp"/*.deb; do dpkg -x "$deb" "$kdir.tmp/root"; done
    rm -f "$kdir.tmp"/*.deb
    vmlinuz=$(ls "$kdir.tmp"/root/boot/vmlinuz-* "$kdir.tmp"/root/usr/lib/modules/*/vmlinuz 2>/dev/null | head -n1 || true)
    moddir=$(ls -d "$kdir.tmp"/root/lib/modules/*/ "$kdir.tmp"/root/usr/lib/modules/*/ 2>/dev/null | head -n1 || true)
    if [ -z "$vmlinuz" ] || [ -z "$moddir" ]; then log "no kernel image or modules in ${pkgs[*]}"; exit 1; fi
    kver=$(basename "$moddir")
    mv "$vmlinuz" "$kdir.tmp/vmlinuz"
    mv "$moddir" "$kdir.tmp/modules"
    rm -rf "$kdir.tmp/root"
    mkdir -p "$kdir.tmp/depmod/lib/modules"; ln -s "$kdir.tmp/modules" "$kdir.tmp/depmod/lib/modules/$kver"
    depmod -b "$kdir.tmp/depmod" "$kver" 2>/dev/null; rm -rf "$kdir.tmp/depmod"
    echo "$kver" > "$kdir.tmp/version"
    # The uncompressed ELF vmlinux (PVH entry) boots faster under TCG than the bzImage.
    "$here/extract-vmlinux.sh" "$kdir.tmp/vmlinuz" > "$kdir.tmp/vmlinux" || rm -f "$kdir.tmp/vmlinux"
    rm -rf "$kdir"; mv "$kdir.tmp" "$kdir"
fi

log "kernel $(cat "$kdir/version") in $kdir"
echo "NEURON_VFIO_CACHE=$cache"
