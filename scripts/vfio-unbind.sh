#!/usr/bin/env bash
# Give functions bound by vfio-bind.sh back to the drivers they had.
#
# Usage:
#   vfio-unbind.sh                 # every Neuron function (vendor 1d0f) on vfio-pci
#   vfio-unbind.sh -v 1234 -d 11e8
#   vfio-unbind.sh 0000:00:1e.0 …
set -euo pipefail
vendor=1d0f device=""
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
while getopts "v:d:h" o; do
    case $o in v) vendor=$OPTARG ;; d) device=$OPTARG ;; h) usage; exit 0 ;; *) usage >&2; exit 2 ;; esac
done
shift $((OPTIND - 1))
sys=${NEURON_VFIO_SYSFS:-/sys}
state=${NEURON_VFIO_STATE_DIR:-/run/neuron-vfio}

addrs=("$@")
if [ ${#addrs[@]} -eq 0 ]; then
    for d in "$sys"/bus/pci/devices/*; do
        [ "$(cat "$d/vendor")" = "0x$vendor" ] || continue
        [ -z "$device" ] || [ "$(cat "$d/device")" = "0x$device" ] || continue
        addrs+=("${d##*/}")
    done
fi

for a in "${addrs[@]}"; do
    d=$sys/bus/pci/devices/$a
    [ -d "$d" ] || { echo "vfio-unbind: $a: no such PCI function" >&2; exit 1; }
    cur=""
    [ -e "$d/driver" ] && cur=$(basename "$(readlink "$d/driver")")
    orig=""
    [ -f "$state/$a.driver" ] && orig=$(cat "$state/$a.driver")
    echo > "$d/driver_override"
    if [ "$cur" = vfio-pci ]; then echo "$a" > "$d/driver/unbind"; fi
    if [ -n "$orig" ]; then
        echo "$a" > "$sys/bus/pci/drivers/$orig/bind" 2>/dev/null || echo "$a" > "$sys/bus/pci/drivers_probe" || true
    fi
    rm -f "$state/$a.driver"
    now=""
    [ -e "$d/driver" ] && now=$(basename "$(readlink "$d/driver")")
    echo "$a: ${cur:-no driver} -> ${now:-no driver}"
done
