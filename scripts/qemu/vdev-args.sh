#!/bin/sh
# Print the QEMU arguments (one per line) that give a guest virtual Neuron devices served by
# `neuron-vfio sim-serve` (docs/virtual-device.md): guest RAM as a shareable memfd (the server
# maps it to DMA into the guest), an emulated Intel IOMMU in front of the devices, and one
# vfio-user-pci device per socket.
#
#   scripts/qemu/vdev-args.sh [-m MIB] [-n] [-b BUS] SOCKET...
#
#   -m  guest RAM in MiB (default 1024; the same -m must be given to QEMU)
#   -n  leave out the IOMMU (when the command line already has one)
#   -b  the PCI bus of the devices (default pcie.0: root-complex integrated endpoints)
#
# Use with QEMU 11 (scripts/qemu/qemu-vfio-user), e.g.
#   scripts/qemu/qemu-vfio-user -machine q35,kernel-irqchip=split -m 1024 \
#       $(scripts/qemu/vdev-args.sh /tmp/neuron0.sock) -kernel … -append 'intel_iommu=on …'
set -eu
mem=1024 iommu=1 bus=pcie.0
while getopts "m:nb:" opt; do
    case $opt in
        m) mem=$OPTARG ;; n) iommu=0 ;; b) bus=$OPTARG ;;
        *) sed -n '2,16p' "$0" >&2; exit 2 ;;
    esac
done
shift $((OPTIND - 1))
[ $# -gt 0 ] || { sed -n '2,16p' "$0" >&2; exit 2; }
echo "-object"
echo "memory-backend-memfd,id=vdev-ram,share=on,size=${mem}M"
echo "-machine"
echo "memory-backend=vdev-ram"
if [ "$iommu" = 1 ]; then
    echo "-device"
    echo "intel-iommu,intremap=on,caching-mode=on"
fi
for s in "$@"; do
    case $s$bus in *'"'*|*'\'*) echo "vdev-args: socket path with a quote or backslash: $s" >&2; exit 2 ;; esac
    echo "-device"
    echo "{\"driver\":\"vfio-user-pci\",\"bus\":\"$bus\",\"socket\":{\"path\":\"$s\",\"type\":\"unix\"}}"
done
