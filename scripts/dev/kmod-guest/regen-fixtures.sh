#!/usr/bin/env bash
# Turn the MMIO traces of the last scripts/dev/kmod-guest/run.sh into the fixtures
# hal/tests/kmod-guest/<arch>/*.trace: the vendor kmod's live register traffic on the served
# device, per operation, filtered small.
#
#   KMOD_DIR=... KMOD_V4_DIR=... scripts/dev/kmod-guest/run.sh   # writes OUT/<arch>/mmio.trace
#   scripts/dev/kmod-guest/regen-fixtures.sh [OUT]                # OUT default: as run.sh's
#
# Each fixture is the accesses between two marks of the trace (the check group that made
# them), timestamps dropped, as `R|W <bar> <offset> <value> <register>` (the oracle's line
# format plus the register's csr-maps name), a run of identical reads (a poll) as one line
# ending `(xN)`. Filters: engine registers only of engine 0 and of the engine a check used
# (the kmod programs every engine; the others are left out to keep the fixtures small).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
root=$(cd "$here/../../.." && pwd)
oracle=$root/scripts/dev/kmod-oracle
target=${CARGO_TARGET_DIR:-$root/target}
OUT=${1:-${OUT:-$target/kmod-guest}}

# extract TRACE MARK KEEP_ENGINES: the accesses of MARK, engines filtered to KEEP_ENGINES
# (a regex of engine indices), in fixture lines.
extract() {
    awk -v want="$2" -v keep="^($3)$" '
        /^# / { if ($3 == "mark") m = $4; next }
        m != want { next }
        {
            acc = $3; split($4, b, "+"); bar = substr(b[1], 4); off = b[2]; val = $6; name = $7
            if (match(name, /^(udma|sdma)\[[0-9]+\]/)) {
                e = substr(name, RSTART, RLENGTH); sub(/^[a-z]+\[/, "", e); sub(/\]$/, "", e)
                if (e !~ keep) next
            }
            line = substr(acc, 1, 1) " " bar " " off " " val " " name
            if (line == prev && acc ~ /^R/) { n++; next }
            if (prev != "") print prev (n > 1 ? " (x" n ")" : "")
            prev = line; n = 1
        }
        END { if (prev != "") print prev (n > 1 ? " (x" n ")" : "") }' "$1"
}

for arch in sunda cayman mariana; do
    t=$OUT/$arch/mmio.trace
    [ -s "$t" ] || { echo "regen-fixtures: no $t (run run.sh --arch $arch first); $arch left as committed" >&2; continue; }
    case $arch in
        mariana) src="wombelix/aws-neuron-driver@$(cat "$oracle/KMOD_V4_COMMIT") src/ = aws-neuronx-dkms 2.25.4.0 (v4)" ;;
        sunda) src="aws-neuron/aws-neuron-driver@$(cat "$oracle/KMOD_COMMIT") (v2)" ;;
        *) src="aws-neuron/aws-neuron-driver@$(cat "$oracle/KMOD_COMMIT") (v3)" ;;
    esac
    dest=$root/hal/tests/kmod-guest/$arch
    rm -rf "$dest"; mkdir -p "$dest"
    # name mark engines description
    while read -r name mark engines what; do
        {
            echo "# kmod: $src, unmodified, loaded in a QEMU guest (Debian 6.12.118+deb12) against neuron-vfio sim-serve --arch $arch"
            echo "# regenerate: KMOD_DIR=<checkout> KMOD_V4_DIR=<checkout> scripts/dev/kmod-guest/run.sh && scripts/dev/kmod-guest/regen-fixtures.sh"
            echo "# op $name: $what (guest-check mark '$mark'; engines kept: $engines)"
            extract "$t" "$mark" "$engines"
        } > "$dest/$name.trace"
    done <<'LIST'
probe probe 0 insmod: device id, device reset through misc RAM, every engine's init (engine 0 kept), H2T rings
nq_init notifications 0 NOTIFICATIONS_INIT_V2: NC0 and NC1 error NQ in host memory, NC0 engine 1 trace NQ in device memory
queue_init dma-queues-host-rings 1 DMA_QUEUE_INIT + DMA_QUEUE_COPY_START + GET_STATE + ACK of NC0 engine 1 queue 2, rings in host memory (other NCs' engines left out)
semaphores semaphores-events 0 SEMAPHORE_WRITE/READ/INCREMENT/DECREMENT, EVENT_SET/GET on every NC
nc_reset nc-reset 0 NC_RESET + NC_RESET_READY of each NC in turn (engine 0 kept)
device_reset device-reset 0 NC_RESET of the whole device + NC_RESET_READY, then the deprecated DEVICE_RESET + DEVICE_READY (engine 0 kept)
LIST
    echo "$arch: $(cat "$dest"/*.trace | grep -vc '^#') lines in $(ls "$dest" | wc -l) fixtures in $dest"
done
