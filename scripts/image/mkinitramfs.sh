#!/usr/bin/env bash
# Build a minimal bootable initramfs (the appliance image's root): busybox, kernel modules
# with their dependencies, programs with the shared libraries they need, and a boot script.
#
#   mkinitramfs.sh -k KERNEL_DIR -o OUT.cpio [-m MODULE]... [-b PROGRAM]... [-s BOOT_SCRIPT]...
#                  [-f SRC:DEST]... [-z]
#
#   -k  a kernel prepared by scripts/qemu/setup.sh: KERNEL_DIR/version, and KERNEL_DIR/modules/
#       for a modular kernel (the guest kernel setup.sh builds has everything built in and no
#       modules/ directory)
#   -m  a module to include with everything it depends on; it is loaded at boot in the
#       order given (listed in /etc/modules). For a kernel without modules/ the name must be
#       built in (KERNEL_DIR/modules.builtin, when present, is checked) and nothing is added
#   -b  a dynamically or statically linked program, copied to /bin with the libraries
#       ldd reports and the dynamic loader
#   -s  a shell script run at boot (copied to /etc/boot.d/, run in name order by /init)
#   -f  any other file
#   -z  gzip the archive (default: uncompressed, which boots faster under emulation)
#
# /init (scripts/image/init) mounts the pseudo file systems, loads /etc/modules (if any), runs the
# boot scripts, gives a shell on the console when the kernel command line says
# `appliance.shell`, runs the shutdown scripts the boot scripts left in /etc/shutdown.d, and
# powers the machine off.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

kdir="" out="" gzip=0
mods=() bins=() scripts=() files=()
while getopts "k:o:m:b:s:f:z" opt; do
    case $opt in
        k) kdir=$OPTARG ;; o) out=$OPTARG ;; m) mods+=("$OPTARG") ;; b) bins+=("$OPTARG") ;;
        s) scripts+=("$OPTARG") ;; f) files+=("$OPTARG") ;; z) gzip=1 ;;
        *) sed -n '2,20p' "$0" >&2; exit 2 ;;
    esac
done
[ -n "$kdir" ] && [ -n "$out" ] || { sed -n '2,20p' "$0" >&2; exit 2; }
kver=$(cat "$kdir/version")
busybox=$(command -v busybox || true)
[ -n "$busybox" ] || { echo "mkinitramfs: busybox not found (apt-get install busybox-static)" >&2; exit 1; }
if ldd "$busybox" >/dev/null 2>&1; then
    echo "mkinitramfs: $busybox is dynamically linked; install busybox-static" >&2; exit 1
fi

stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage"/{bin,sbin,dev,proc,sys,tmp,run,etc/boot.d,lib/modules/"$kver"}
cp "$busybox" "$stage/bin/busybox"
for applet in $("$busybox" --list); do
    [ -e "$stage/bin/$applet" ] || ln -s busybox "$stage/bin/$applet"
done
cp "$here/init" "$stage/init"; chmod 755 "$stage/init"

# A kernel without modules: each requested module must be built in.
if [ ${#mods[@]} -gt 0 ] && [ ! -d "$kdir/modules" ]; then
    for m in "${mods[@]}"; do
        if [ -f "$kdir/modules.builtin" ]; then
            # modules.builtin lists kernel/DIR/NAME.ko, with - and _ interchangeable in NAME.
            if ! sed 's|.*/||; s|\.ko$||; s|-|_|g' "$kdir/modules.builtin" | grep -qxF "${m//-/_}"; then
                echo "mkinitramfs: $m: neither a module nor built into kernel $kver" >&2; exit 1
            fi
        fi
    done
    echo "mkinitramfs: kernel $kver has no modules: ${mods[*]} built in" >&2
    mods=()
fi

# Modules: resolve dependencies against the unpacked tree, store them uncompressed.
if [ ${#mods[@]} -gt 0 ]; then
    kroot=$(mktemp -d); trap 'rm -rf "$stage" "$kroot"' EXIT
    mkdir -p "$kroot/lib/modules"
    ln -s "$(cd "$kdir/modules" && pwd)" "$kroot/lib/modules/$kver"
    [ -s "$kdir/modules/modules.dep" ] || depmod -b "$kroot" "$kver" 2>/dev/null
    for m in "${mods[@]}"; do
        # A module built into the kernel (absent from the tree) needs nothing.
        if ! modprobe -d "$kroot" -S "$kver" --show-depends "$m" >/dev/null 2>&1; then
            echo "mkinitramfs: $m: not a module of $kver (built in?)" >&2; continue
        fi
        modprobe -d "$kroot" -S "$kver" --show-depends "$m" | awk '$1 == "insmod" {print $2}' | while read -r ko; do
            rel=${ko#"$kroot/lib/modules/$kver/"}; dst="$stage/lib/modules/$kver/${rel%.xz}"; dst=${dst%.zst}; dst=${dst%.gz}
            mkdir -p "$(dirname "$dst")"
            case $ko in
                *.xz) xz -dc "$ko" > "$dst" ;; *.zst) zstd -qdc "$ko" > "$dst" ;; *.gz) gzip -dc "$ko" > "$dst" ;;
                *) cp "$ko" "$dst" ;;
            esac
        done
        echo "$m" >> "$stage/etc/modules"
    done
    depmod -b "$stage" "$kver" 2>/dev/null
fi

# Programs and their shared libraries (same paths as on the build host).
for b in "${bins[@]}"; do
    rm -f "$stage/bin/$(basename "$b")"; cp "$b" "$stage/bin/$(basename "$b")"
    ldd "$b" 2>/dev/null | grep -oE '/[^ ]+' | while read -r lib; do
        [ -e "$stage$lib" ] && continue
        mkdir -p "$stage$(dirname "$lib")"; cp -L "$lib" "$stage$lib"
    done || true
done
[ -e "$stage/lib64" ] || [ ! -d "$stage/usr/lib64" ] || ln -s usr/lib64 "$stage/lib64"

for s in "${scripts[@]}"; do cp "$s" "$stage/etc/boot.d/$(basename "$s")"; chmod 755 "$stage/etc/boot.d/$(basename "$s")"; done
for f in "${files[@]}"; do
    src=${f%%:*}; dst=${f#*:}; mkdir -p "$stage$(dirname "$dst")"; cp "$src" "$stage$dst"
done

mkdir -p "$(dirname "$out")"
if [ "$gzip" = 1 ]; then
    (cd "$stage" && find . -print0 | cpio --null -o -H newc --quiet | gzip -1) > "$out.tmp"
else
    (cd "$stage" && find . -print0 | cpio --null -o -H newc --quiet) > "$out.tmp"
fi
mv "$out.tmp" "$out"
echo "mkinitramfs: $out ($(du -h "$out" | cut -f1), kernel $kver)" >&2
