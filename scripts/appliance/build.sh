#!/usr/bin/env bash
# Build the appliance: a kernel and an initramfs that boot a Neuron host with no kmod — VFIO,
# hugepages, every configured device bound to vfio-pci, `ls`, the configured models run, one
# JSON line per step on the serial console, then power off or stay up (docs/appliance.md).
#
#   scripts/appliance/build.sh -o DIR [-c CONFIG] [-b NEURON_VFIO] [-l LIBNRT_SO] [--static] [-z]
#
#   -o  output directory: DIR/kernel (bzImage), DIR/vmlinux (the same kernel as an ELF with a
#       PVH entry: boots faster under QEMU TCG), DIR/initramfs (uncompressed cpio), DIR/cmdline,
#       DIR/appliance.conf (the configuration as the guest reads it) and, where syslinux,
#       mkfs.vfat and mtools are installed, DIR/disk.img (a raw FAT disk with syslinux)
#   -c  configuration (default scripts/appliance/appliance.conf; every key in docs/appliance.md)
#   -b  the neuron-vfio binary to pack (default: the newest of target/{release,debug}/neuron-vfio;
#       a dynamic binary goes in with exactly the libraries ldd names)
#   -l  libnrt.so (default: next to the binary, else the newest of target/{release,debug})
#   --static  build neuron-vfio for x86_64-unknown-linux-musl (`rustup target add
#       x86_64-unknown-linux-musl` first), release profile: no libraries in the image
#   -z  gzip the initramfs (smaller file; boots slower under emulation)
#
# Debug info is stripped from copies of the binary and libnrt.so (strip --strip-debug). Needs
# busybox-static and cpio (scripts/image/mkinitramfs.sh) and a kernel from scripts/qemu/setup.sh.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
usage() { sed -n '2,22p' "$0" >&2; exit 2; }

out="" conf="$here/appliance.conf" bin="" lib="" static=0 gz=()
while [ $# -gt 0 ]; do
    case $1 in
        -o) out=${2:?}; shift 2 ;; -c) conf=${2:?}; shift 2 ;;
        -b) bin=${2:?}; shift 2 ;; -l) lib=${2:?}; shift 2 ;;
        --static) static=1; shift ;; -z) gz=(-z); shift ;;
        *) usage ;;
    esac
done
[ -n "$out" ] || usage
die() { echo "appliance: $*" >&2; exit 1; }
[ -f "$conf" ] || die "no config $conf"
abs() { case $1 in /*) echo "$1" ;; *) echo "$repo/$1" ;; esac; }

# The configuration, with the defaults docs/appliance.md lists.
PCI_IDS="" HUGEPAGES=64 DEVICE=vfio BACKEND=auto ALLOW_MODELED=0 EXEC_TIMEOUT=60 AFTER=poweroff BROKER_SOCKET=""
SERVICE_REPEAT=1000 MONITOR_PERIOD_MS=10000 SERVICE_PORT=9100 NET_ADDR="" NET_GW=""
KERNEL_DIR=/var/cache/neuron-vfio/kernel MODULES="vfio vfio_iommu_type1 vfio-pci iommufd"
# shellcheck disable=SC1090
. "$conf"
case $AFTER in poweroff | stay) ;; *) die "AFTER=$AFTER: expected poweroff or stay" ;; esac
case $DEVICE in vfio | sim | sim:*) ;; *) die "DEVICE=$DEVICE: expected vfio or sim[:ARCH[:N]]" ;; esac
case $BACKEND in auto | container | iommufd) ;; *) die "BACKEND=$BACKEND: expected auto, container or iommufd" ;; esac
for k in HUGEPAGES EXEC_TIMEOUT SERVICE_REPEAT MONITOR_PERIOD_MS; do
    case ${!k} in '' | *[!0-9]*) die "$k=${!k}: expected a number" ;; esac
done
case $BROKER_SOCKET in
    *[[:space:]\'\"]*) die "BROKER_SOCKET=$BROKER_SOCKET: no spaces or quotes" ;;
    '' | /*) ;; *) die "BROKER_SOCKET=$BROKER_SOCKET: expected an absolute path" ;;
esac

# PCI ids: the configured ones, else every arch's Neuron ids from csr-maps' arch data.
if [ -z "$PCI_IDS" ]; then
    for t in "$repo"/csr-maps/arch/*.toml; do
        v=$(sed -n 's/^pci_vendor *= *0x\([0-9a-fA-F]*\).*/\1/p' "$t")
        for d in $(sed -n 's/^pci_devices *= *\[\(.*\)\].*/\1/p' "$t" | tr ',' ' '); do
            PCI_IDS="$PCI_IDS${PCI_IDS:+,}$v:${d#0x}"
        done
    done
    [ -n "$PCI_IDS" ] || die "no pci_vendor/pci_devices in csr-maps/arch/*.toml"
fi
PCI_IDS=$(echo "$PCI_IDS" | tr ' ' ',' | tr -s ',' | sed 's/^,//; s/,$//' | tr 'A-F' 'a-f')
for id in ${PCI_IDS//,/ }; do
    [[ $id =~ ^[0-9a-f]{4}:[0-9a-f]{4}$ ]] || die "PCI_IDS: bad id $id (expected VVVV:DDDD)"
done

# neuron-vfio: static (musl), the given binary, or the newest build in target/.
newest() { ls -t "$@" 2>/dev/null | head -n1 || true; }
if [ "$static" = 1 ]; then
    musl=x86_64-unknown-linux-musl
    case " $(rustup target list --installed 2>/dev/null | tr '\n' ' ') " in
        *" $musl "*) ;; *) die "--static needs the $musl target: rustup target add $musl" ;;
    esac
    (cd "$repo" && cargo build --release -p cli --bin neuron-vfio --target "$musl") >&2
    bin="$repo/target/$musl/release/neuron-vfio"
fi
[ -n "$bin" ] || bin=$(newest "$repo"/target/release/neuron-vfio "$repo"/target/debug/neuron-vfio)
[ -n "$bin" ] && [ -x "$bin" ] || die "no neuron-vfio binary (cargo build -p cli, or -b PATH)"
[ -n "$lib" ] || lib=$(newest "$(dirname "$bin")/libnrt.so")
[ -n "$lib" ] || lib=$(newest "$repo"/target/release/libnrt.so "$repo"/target/debug/libnrt.so)
[ -n "$lib" ] && [ -f "$lib" ] || die "no libnrt.so (cargo build -p capi, or -l PATH)"

stage=$(mktemp -d); trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$out"
cp "$bin" "$stage/bin/neuron-vfio"
cp "$lib" "$stage/libnrt.so"
if command -v strip >/dev/null; then
    strip --strip-debug "$stage/bin/neuron-vfio" "$stage/libnrt.so"
else
    echo "appliance: strip not found: debug info stays in the image" >&2
fi
files=(-f "$stage/libnrt.so:/usr/lib/libnrt.so")
# libnrt.so's own libraries (the ones ldd names, as for the binary), for programs that load it.
while IFS= read -r l; do
    files+=(-f "$(readlink -f "$l"):$l")
done < <(ldd "$stage/libnrt.so" 2>/dev/null | grep -oE '/[^ ]+' | sort -u)
while IFS= read -r h; do
    files+=(-f "$h:/usr/include/${h#"$repo/capi/include/"}")
done < <(find "$repo/capi/include" -type f | sort)

# Models, inputs and expected outputs, under /opt/appliance/models/N/.
gconf=$stage/appliance.conf
n=0
{
    echo "# Written by scripts/appliance/build.sh from $(basename "$conf") (docs/appliance.md)."
    for k in PCI_IDS HUGEPAGES DEVICE BACKEND ALLOW_MODELED EXEC_TIMEOUT AFTER SERVICE_REPEAT \
        MONITOR_PERIOD_MS SERVICE_PORT NET_ADDR NET_GW BROKER_SOCKET; do
        printf '%s=%q\n' "$k" "${!k}"
    done
} > "$gconf"
while :; do
    i=$((n + 1)); mv="MODEL$i"; iv="MODEL${i}_INPUTS"; ev="MODEL${i}_EXPECT"
    [ -n "${!mv:-}" ] || break
    m=$(abs "${!mv}"); [ -f "$m" ] || die "$mv: no file $m"
    g=/opt/appliance/models/$i
    files+=(-f "$m:$g/$(basename "$m")")
    gin="" gexp=""
    for spec in ${!iv:-}; do
        name=${spec%%=*} f=$(abs "${spec#*=}")
        [ "$name" != "$spec" ] && [ -f "$f" ] || die "$iv: bad NAME=FILE \`$spec\` (or no such file)"
        files+=(-f "$f:$g/in/$name/$(basename "$f")"); gin="$gin${gin:+ }$name=$g/in/$name/$(basename "$f")"
    done
    for spec in ${!ev:-}; do
        name=${spec%%=*} f=$(abs "${spec#*=}")
        [ "$name" != "$spec" ] && [ -f "$f" ] || die "$ev: bad NAME=FILE \`$spec\` (or no such file)"
        files+=(-f "$f:$g/expect/$name"); gexp="$gexp${gexp:+ }$name=$g/expect/$name"
    done
    printf 'MODEL%d=%q\nMODEL%d_INPUTS=%q\nMODEL%d_EXPECT=%q\n' "$i" "$g/$(basename "$m")" "$i" "$gin" "$i" "$gexp" >> "$gconf"
    n=$i
done
echo "MODEL_COUNT=$n" >> "$gconf"
files+=(-f "$gconf:/etc/appliance.conf")
cp "$here/appliance.sh" "$stage/50-appliance"

[ -f "$KERNEL_DIR/version" ] || die "no kernel in $KERNEL_DIR (scripts/qemu/setup.sh)"
mods=()
for m in $MODULES; do mods+=(-m "$m"); done
"$repo/scripts/image/mkinitramfs.sh" -k "$KERNEL_DIR" -o "$out/initramfs" "${mods[@]}" \
    -b "$stage/bin/neuron-vfio" -s "$stage/50-appliance" "${files[@]}" "${gz[@]}"

rm -f "$out/kernel" "$out/vmlinux" "$out/disk.img"
[ -f "$KERNEL_DIR/vmlinuz" ] && cp "$KERNEL_DIR/vmlinuz" "$out/kernel"
[ -f "$KERNEL_DIR/vmlinux" ] && cp "$KERNEL_DIR/vmlinux" "$out/vmlinux"
[ -f "$out/kernel" ] || [ -f "$out/vmlinux" ] || die "no vmlinuz or vmlinux in $KERNEL_DIR"
cmdline="console=ttyS0 intel_iommu=on iommu=nopt panic=-1 quiet loglevel=4"
echo "$cmdline" > "$out/cmdline"
cp "$gconf" "$out/appliance.conf"

# A raw disk with a bootloader, where the tools exist: FAT + syslinux (the bzImage).
if [ -f "$out/kernel" ] && command -v syslinux >/dev/null && command -v mkfs.vfat >/dev/null &&
    command -v mcopy >/dev/null; then
    kib=$(( ($(stat -c %s "$out/kernel") + $(stat -c %s "$out/initramfs")) / 1024 + 4096 ))
    truncate -s "${kib}K" "$out/disk.img"
    mkfs.vfat -n APPLIANCE "$out/disk.img" >/dev/null
    printf 'DEFAULT appliance\nLABEL appliance\n  KERNEL /kernel\n  INITRD /initramfs\n  APPEND %s\n' \
        "$cmdline" > "$stage/syslinux.cfg"
    mcopy -i "$out/disk.img" "$out/kernel" "$out/initramfs" "$stage/syslinux.cfg" ::/
    syslinux --install "$out/disk.img"
    echo "appliance: $out/disk.img: raw FAT disk with syslinux" >&2
else
    echo "appliance: no disk image (needs syslinux, mkfs.vfat (dosfstools) and mcopy (mtools))" >&2
fi

size() { stat -c %s "$1" 2>/dev/null || echo 0; }
total=0
report=""
for f in kernel vmlinux initramfs; do
    [ -f "$out/$f" ] || continue
    s=$(size "$out/$f"); total=$((total + s)); report="$report $f $((s / 1024)) KiB,"
done
echo "appliance: $out:${report} total $((total / 1024)) KiB; neuron-vfio $(($(size "$stage/bin/neuron-vfio") / 1024)) KiB" \
    "($(case $(ldd "$stage/bin/neuron-vfio" 2>/dev/null || true) in *'=>'*) echo dynamic ;; *) echo static ;; esac)), libnrt.so $(($(size "$stage/libnrt.so") / 1024)) KiB," \
    "$n model(s), ids $PCI_IDS, device $DEVICE, after $AFTER" >&2
