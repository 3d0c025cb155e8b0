#!/usr/bin/env bash
# Boot the appliance built by scripts/appliance/build.sh under QEMU, with virtual Neuron
# devices: one `neuron-vfio sim-serve` per device (the simulator over vfio-user,
# docs/virtual-device.md), handed to the guest by QEMU's vfio-user-pci behind an emulated
# IOMMU. The serial console is this terminal (Ctrl-A X quits QEMU).
#
#   scripts/appliance/boot.sh [-d DIR] [-n DEVICES] [-a ARCH] [-m MIB] [-p PORT] [-s] [-- QEMU ARGS]
#
#   -d  the build directory (default target/appliance)
#   -n  served devices (default 1; 0: none, for a DEVICE=sim appliance)
#   -a  their arch: sunda | cayman | mariana (default sunda)
#   -m  guest RAM in MiB (default 1024)
#   -p  forward host port PORT to the guest's PORT (service mode's /metrics; needs a guest
#       kernel with TCP/IP and NET_ADDR=10.0.2.15/24 in the config)
#   -s  `appliance.shell` on the kernel command line: a shell on the console after the steps
#
# Environment: NEURON_VFIO_QEMU (a QEMU with vfio-user-pci; default scripts/qemu/qemu-vfio-user
# when scripts/qemu/setup.sh provisioned it, else qemu-system-x86_64), NEURON_VFIO_QEMU_ACCEL
# (default tcg), NEURON_VFIO_BIN (the neuron-vfio that serves; default the newest of
# target/{release,debug}/neuron-vfio, else neuron-vfio on PATH).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
usage() { sed -n '2,22p' "$0" >&2; exit 2; }
dir=$repo/target/appliance ndev=1 arch=sunda mem=1024 port="" shell=0
while [ $# -gt 0 ]; do
    case $1 in
        -d) dir=${2:?}; shift 2 ;; -n) ndev=${2:?}; shift 2 ;; -a) arch=${2:?}; shift 2 ;;
        -m) mem=${2:?}; shift 2 ;; -p) port=${2:?}; shift 2 ;; -s) shell=1; shift ;;
        --) shift; break ;; *) usage ;;
    esac
done
die() { echo "boot: $*" >&2; exit 1; }
kernel=""
for k in "$dir/vmlinux" "$dir/kernel"; do [ -f "$k" ] && { kernel=$k; break; }; done
[ -n "$kernel" ] && [ -f "$dir/initramfs" ] || die "no kernel/initramfs in $dir (scripts/appliance/build.sh -o $dir)"
cmdline=$(cat "$dir/cmdline")
[ "$shell" = 1 ] && cmdline="$cmdline appliance.shell"

qemu=${NEURON_VFIO_QEMU:-}
if [ -z "$qemu" ]; then
    if [ -x "${NEURON_VFIO_CACHE:-/var/cache/neuron-vfio}/qemu-11/root/usr/bin/qemu-system-x86_64" ]; then
        qemu=$repo/scripts/qemu/qemu-vfio-user
    else
        qemu=$(command -v qemu-system-x86_64) || die "no QEMU (scripts/qemu/setup.sh)"
    fi
fi
nv=${NEURON_VFIO_BIN:-}
[ -n "$nv" ] || nv=$(ls -t "$repo"/target/release/neuron-vfio "$repo"/target/debug/neuron-vfio 2>/dev/null | head -n1 || true)
[ -n "$nv" ] || nv=$(command -v neuron-vfio) || die "no neuron-vfio (cargo build -p cli)"

run=$(mktemp -d)
pids=()
cleanup() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
    rm -rf "$run"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
socks=()
for ((i = 0; i < ndev; i++)); do
    s=$run/neuron$i.sock
    "$nv" sim-serve --arch "$arch" --socket "$s" --control "$run/neuron$i.ctl" >&2 &
    pids+=($!)
    socks+=("$s")
done
for s in "${socks[@]}"; do
    for _ in $(seq 300); do [ -S "$s" ] && break; sleep 0.1; done
    [ -S "$s" ] || die "sim-serve did not create $s"
done
vdev=()
[ "$ndev" -gt 0 ] && mapfile -t vdev < <("$repo/scripts/qemu/vdev-args.sh" -m "$mem" "${socks[@]}")
net=(-nic none)
[ -n "$port" ] && net=(-nic "user,model=e1000e,hostfwd=tcp::$port-:$port")
"$qemu" -machine "q35,accel=${NEURON_VFIO_QEMU_ACCEL:-tcg},kernel-irqchip=split" -cpu max -m "$mem" -smp 2 \
    "${vdev[@]}" -kernel "$kernel" -initrd "$dir/initramfs" -append "$cmdline" \
    -nographic -no-reboot "${net[@]}" -serial mon:stdio "$@"
