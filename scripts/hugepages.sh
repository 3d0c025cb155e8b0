#!/usr/bin/env bash
# Reserve hugepages for DMA buffers and show what is reserved.
#
#   hugepages.sh [COUNT_2M] [COUNT_1G]   # default: 512 × 2 MiB (1 GiB), 0 × 1 GiB
#
# 1 GiB pages can usually only be reserved at boot (hugepagesz=1G hugepages=N); the script
# tries at run time and reports what it got. Also mounts hugetlbfs on /dev/hugepages.
set -euo pipefail
n2m=${1:-512} n1g=${2:-0}
sys=${NEURON_VFIO_SYSFS:-/sys}/kernel/mm/hugepages
set_pages() { # dir count
    local f=$sys/$1/nr_hugepages
    [ -w "$f" ] || { echo "hugepages: $1 not supported here" >&2; return 0; }
    echo "$2" > "$f"
    local got; got=$(cat "$f")
    [ "$got" -ge "$2" ] || echo "hugepages: asked for $2 × $1, got $got (fragmented memory? reserve at boot)" >&2
}
set_pages hugepages-2048kB "$n2m"
[ "$n1g" = 0 ] || set_pages hugepages-1048576kB "$n1g"
if ! grep -qs ' /dev/hugepages hugetlbfs' /proc/mounts; then
    mkdir -p /dev/hugepages && mount -t hugetlbfs hugetlbfs /dev/hugepages 2>/dev/null || true
fi
for d in "$sys"/hugepages-*; do
    echo "${d##*/hugepages-}: total $(cat "$d/nr_hugepages") free $(cat "$d/free_hugepages")"
done
echo "RLIMIT_MEMLOCK: $(ulimit -l) KiB (DMA pins count against it unless CAP_IPC_LOCK)"
