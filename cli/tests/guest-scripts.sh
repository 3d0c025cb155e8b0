#!/bin/sh
# Boot script of the QEMU VFIO test (cli/tests/qemu.rs), run after vfio-guest: the operator
# scripts (scripts/vfio-bind.sh, vfio-unbind.sh, hugepages.sh) against a real kernel.
# Prints `VFIO-CHECK ok|FAIL script.NAME: detail` like vfio-guest.
export NEURON_VFIO_STATE_DIR=/tmp/neuron-vfio
S=/opt/neuron-vfio/scripts

report() { # name status detail
    if [ "$2" = 0 ]; then echo "VFIO-CHECK ok script.$1: $3"; else echo "VFIO-CHECK FAIL script.$1: $3"; fi
}
driver_of() {
    if [ -e "/sys/bus/pci/devices/$1/driver" ]; then basename "$(readlink "/sys/bus/pci/devices/$1/driver")"; else echo none; fi
}

nic=""
for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor")" = 0x8086 ] && [ "$(cat "$d/device")" = 0x10d3 ] && nic=${d##*/}
done
if [ -z "$nic" ]; then
    report bind 1 "no e1000e (8086:10d3) to bind"
    exit 0
fi
before=$(driver_of "$nic")

# Bind by vendor/device ID: the function moves to vfio-pci, its group node appears.
out=$(bash "$S/vfio-bind.sh" -v 8086 -d 10d3 2>&1); rc=$?
now=$(driver_of "$nic")
g=$(basename "$(readlink "/sys/bus/pci/devices/$nic/iommu_group")")
st=1; [ "$rc" = 0 ] && [ "$now" = vfio-pci ] && [ -e "/dev/vfio/$g" ] && [ -f "$NEURON_VFIO_STATE_DIR/$nic.driver" ] && st=0
report bind "$st" "rc $rc, driver $before -> $now, /dev/vfio/$g: $(echo "$out" | tail -n 1)"

# Binding again is a no-op that says so.
out=$(bash "$S/vfio-bind.sh" "$nic" 2>&1); rc=$?
st=1; [ "$rc" = 0 ] && echo "$out" | grep -q "already on vfio-pci" && st=0
report rebind "$st" "rc $rc: $out"

# Unbind restores what it had (no driver here) and forgets the record.
out=$(bash "$S/vfio-unbind.sh" -v 8086 -d 10d3 2>&1); rc=$?
now=$(driver_of "$nic")
ovr=$(cat "/sys/bus/pci/devices/$nic/driver_override")
st=1; [ "$rc" = 0 ] && [ "$now" = "$before" ] && [ "$ovr" = "(null)" ] && [ ! -e "$NEURON_VFIO_STATE_DIR/$nic.driver" ] && st=0
report unbind "$st" "rc $rc, driver now $now, override $ovr: $out"

# A function no IOMMU translates is refused (the no-IOMMU edu), with the reason.
out=$(bash "$S/vfio-bind.sh" -v 1234 -d 11e8 2>&1); rc=$?
st=1; [ "$rc" != 0 ] && echo "$out" | grep -q "no IOMMU group" && st=0
report refuse_noiommu "$st" "rc $rc: $(echo "$out" | tail -n 1)"
for d in /sys/bus/pci/devices/*; do
    [ "$(cat "$d/vendor")" = 0x1234 ] && [ "$(driver_of "${d##*/}")" = vfio-pci ] && bash "$S/vfio-unbind.sh" "${d##*/}" >/dev/null 2>&1
done

# Hugepages: reserves what it is asked for (a count the earlier boot script did not set) and
# reports it.
want=96
out=$(bash "$S/hugepages.sh" "$want" 2>&1); rc=$?
got=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages)
line=$(echo "$out" | grep "^2048kB: ")
st=1; [ "$rc" = 0 ] && [ "$got" = "$want" ] && echo "$line" | grep -q "^2048kB: total $want " && st=0
report hugepages "$st" "rc $rc, nr_hugepages $got: $line"
