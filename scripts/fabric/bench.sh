#!/usr/bin/env bash
# Our all-reduce next to libfabric's own benchmarks, in one run, on one provider (tcp by default,
# FI_PROVIDER to change), on this host's loopback:
#
#   scripts/fabric/bench.sh [SIZES] [ITERS]       # default SIZES=8,64K,1M,4M,16M ITERS=20
#
# - ours: `neuron-vfio bench collectives --ranks 4 --op all-reduce` (release build), bus
#   bandwidth as NCCL-tests defines it (algbw × 2(n−1)/n) and, at the smallest size, the time
#   of one all-reduce;
# - libfabric's: fabtests' `fi_rdm_tagged_bw` (the endpoint type and tagged messages our
#   transport uses) and `fi_msg_bw` (connected endpoints), server and client on 127.0.0.1, at
#   the same sizes; `fi_pingpong` (RDM) at the smallest size for the latency.
# fabtests come from scripts/fabric/fabtests.sh (built from setup.sh's libfabric tarball).
# Prints a markdown table (GB/s = 1e9 bytes per second) and `uptime` before and after.
set -euo pipefail
cd "$(dirname "$0")/../.."
sizes=${1:-8,64K,1M,4M,16M}
iters=${2:-20}
prov=${FI_PROVIDER:-tcp}
prefix=${NEURON_VFIO_FABRIC_PREFIX:-/var/cache/neuron-vfio/libfabric-2.1}
ft=$(scripts/fabric/fabtests.sh | sed -n 's/^fabtests: \(.*\/bin\).*/\1/p')
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
cargo build -q --release -p cli
nv=target/release/neuron-vfio
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

bytes_of() { python3 -c "import sys;s=sys.argv[1];m={'K':1<<10,'M':1<<20,'G':1<<30};print(int(s[:-1])*m[s[-1]] if s[-1] in m else int(s))" "$1"; }

# A fabtests server/client pair on loopback (PROG: a path); prints the client's header and last
# result line, joined by '|'.
pair() {
    local prog=$1; shift
    local port
    port=$(python3 -c 'import socket;s=socket.socket();s.bind(("127.0.0.1",0));print(s.getsockname()[1])')
    "$prog" -p "$prov" -B "$port" "$@" >"$work/server.out" 2>&1 &
    local srv=$!
    sleep 0.5
    "$prog" -p "$prov" -P "$port" "$@" 127.0.0.1 >"$work/client.out" 2>&1 || true
    wait "$srv" || true
    printf '%s|%s\n' "$(grep -E '^bytes' "$work/client.out" | tail -n1)" \
        "$(grep -E '^[[:space:]]*[0-9]' "$work/client.out" | tail -n1)"
}

echo "uptime before: $(uptime)"
FI_PROVIDER=$prov "$nv" --json bench collectives --ranks 4 --op all-reduce --sizes "$sizes" --iters "$iters" \
    >"$work/ours.json" || true
first=1
{
    for s in ${sizes//,/ }; do
        b=$(bytes_of "$s")
        rdm=$(pair "$ft/fi_rdm_tagged_bw" -e rdm -S "$b" -I "$iters" -W 16)
        msg=$(pair "$ft/fi_msg_bw" -e msg -S "$b" -I "$iters" -W 16)
        lat=""
        if [ $first = 1 ]; then lat=$(pair "$prefix/bin/fi_pingpong" -e rdm -S "$b" -I 1000); first=0; fi
        printf '%s\t%s\t%s\t%s\n' "$b" "$rdm" "$msg" "$lat"
    done
} >"$work/fabtests.tsv"
echo "uptime after: $(uptime)"
python3 - "$work/ours.json" "$work/fabtests.tsv" "$prov" <<'PY'
import json, sys
ours = {r["bytes"]: r for r in json.load(open(sys.argv[1]))}
def mbps(cell):
    # "header|values": fabtests print MB/sec (1e6 bytes/s) and usec/xfer columns.
    head, _, vals = cell.partition("|")
    h, v = head.split(), vals.split()
    try:
        return float(v[h.index("MB/sec")]) / 1e3, float(v[h.index("usec/xfer")])
    except (ValueError, IndexError):
        return float("nan"), float("nan")
print(f"\nprovider {sys.argv[3]}, 4 rank processes (ours) / one server-client pair (fabtests), loopback\n")
print("| bytes | all-reduce busbw GB/s | fi_rdm_tagged_bw GB/s | fi_msg_bw GB/s | busbw / rdm_tagged_bw | correct |")
print("|---|---|---|---|---|---|")
lat_rows = []
for line in open(sys.argv[2]):
    b, rdm, msg, lat = (line.rstrip("\n").split("\t") + ["", "", "", ""])[:4]
    b = int(b)
    r = ours.get(b, {})
    bus = r.get("busbw_gbps") or float("nan")
    (rbw, _), (mbw, _) = mbps(rdm), mbps(msg)
    print(f"| {b} | {bus:.4f} | {rbw:.4f} | {mbw:.4f} | {bus / rbw if rbw else float('nan'):.2f} | {r.get('correct')} |")
    if lat:
        alg = r.get("algbw_gbps") or 0.0
        us = b / (alg * 1e9) * 1e6 if alg else float("nan")
        lat_rows.append((b, us, mbps(lat)[1]))
for b, us, pp in lat_rows:
    print(f"\nlatency at {b} B: our all-reduce (4 ranks) {us:.1f} us per collective; fi_pingpong {pp:.1f} us per message")
PY
