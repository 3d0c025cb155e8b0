#!/usr/bin/env bash
# Bind PCI functions to vfio-pci, remembering their drivers for vfio-unbind.sh.
#
# Usage:
#   vfio-bind.sh                 # every Neuron function (vendor 1d0f)
#   vfio-bind.sh -v 1234 -d 11e8 # by vendor (and device) ID
#   vfio-bind.sh 0000:00:1e.0 …  # by PCI address
#
# Loads vfio-pci and vfio_iommu_type1, checks the IOMMU (no no-IOMMU mode) and IOMMU-group
# viability, sets driver_override and probes. Original drivers are recorded in
# ${NEURON_VFIO_STATE_DIR:-/run/neuron-vfio}/ADDR.driver.
set -euo pipefail
vendor=1d0f device=""
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while getopts "v:d:h" o; do
    case $o in v) vendor=$OPTARG ;; d) device=$OPTARG ;; h) usage; exit 0 ;; *) usage >&2; exit 2 ;; esac
done
shift $((OPTIND - 1))
sys=${NEURON_VFIO_SYSFS:-/sys}
state=${NEURON_VFIO_STATE_DIR:-/run/neuron-vfio}
die() { echo "vfio-bind: $*" >&2; exit 1; }

addrs=("$@")
if [ ${#addrs[@]} -eq 0 ]; then
    for d in "$sys"/bus/pci/devices/*; do
        [ "$(cat "$d/vendor")" = "0x$vendor" ] || continue
        [ -z "$device" ] || [ "$(cat "$d/device")" = "0x$device" ] || continue
        addrs+=("${d##*/}")
    done
fi
[ ${#addrs[@]} -gt 0 ] || die "no PCI function with vendor $vendor${device:+ device $device}"

if [ ! -d "$sys/bus/pci/drivers/vfio-pci" ] || [ ! -e /dev/vfio/vfio ]; then
    modprobe vfio-pci || die "cannot load vfio-pci (modprobe vfio-pci)"
fi
modprobe vfio_iommu_type1 2>/dev/null || true
mkdir -p "$state"

for a in "${addrs[@]}"; do
    d=$sys/bus/pci/devices/$a
    [ -d "$d" ] || die "$a: no such PCI function"
    [ -e "$d/iommu_group" ] || die "$a: no IOMMU group: enable the IOMMU (intel_iommu=on / amd_iommu=on, VT-d in firmware); no-IOMMU mode is not used"
    cur=""
    [ -e "$d/driver" ] && cur=$(basename "$(readlink "$d/driver")")
    if [ "$cur" = vfio-pci ]; then echo "$a: already on vfio-pci"; continue; fi
    [ -e "$state/$a.driver" ] || echo "$cur" > "$state/$a.driver"
    echo vfio-pci > "$d/driver_override"
    [ -z "$cur" ] || echo "$a" > "$d/driver/unbind"
    echo "$a" > "$sys/bus/pci/drivers_probe" || true
    now=""
    [ -e "$d/driver" ] && now=$(basename "$(readlink "$d/driver")")
    [ "$now" = vfio-pci ] || die "$a: binding to vfio-pci failed (driver now: ${now:-none}); see dmesg"
    g=$(basename "$(readlink "$d/iommu_group")")
    for m in "$sys/kernel/iommu_groups/$g/devices/"*; do
        [ "${m##*/}" = "$a" ] && continue
        md=""
        [ -e "$m/driver" ] && md=$(basename "$(readlink "$m/driver")")
        case $md in ""|vfio-pci|pcieport) ;; *) echo "vfio-bind: warning: group $g member ${m##*/} is on $md; the group is not viable until it is unbound" >&2 ;; esac
    done
    echo "$a: ${cur:-no driver} -> vfio-pci (IOMMU group $g, /dev/vfio/$g)"
done
