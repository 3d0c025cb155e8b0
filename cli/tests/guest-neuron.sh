#!/bin/sh
# Runs in the QEMU guest of cli/tests/qemu.rs: the virtual Neuron device (the simulator served
# by `neuron-vfio sim-serve` over vfio-user) through the guest kernel's vfio-pci and IOMMU,
# driven by the real driver path (`neuron-vfio` over VfioPlatform). One line per check:
# `VFIO-CHECK ok|FAIL neuron.NAME: detail`. /etc/neuron-vdev.env sets ARCH (the served arch).
. /etc/neuron-vdev.env
N=/bin/neuron-vfio
E=/opt/neuron-vfio/examples
IN=$E/input_32xf32.bin
# The served device is the simulator: its modeled registers are what it implements.
export NEURON_VFIO_ALLOW_MODELED=1
export NEURON_RT_EXEC_TIMEOUT=60
check() { # NAME RC DETAIL
    if [ "$2" = 0 ]; then echo "VFIO-CHECK ok neuron.$1: $3"; else echo "VFIO-CHECK FAIL neuron.$1: $3"; fi
}
t0=$(date +%s)
oneline() { tr '\n' ' ' | cut -c1-300; }
msix_count() { # total MSI-X interrupts of the device's vfio vectors so far
    grep "vfio-msix" /proc/interrupts | grep "$bdf" | awk '{s=0; for (i=2;i<=NF;i++) if ($i ~ /^[0-9]+$/) s+=$i; else break; t+=s} END {print t+0}'
}

out=$($N ls 2>&1); rc=$?
bdf=$(echo "$out" | awk -v a="$ARCH" '$2 == a {print $1; exit}')
[ -n "$bdf" ] || rc=1
check ls "$rc" "$(echo "$out" | oneline)"
if [ -z "$bdf" ]; then echo "VFIO-EXIT neuron 1"; exit 0; fi

out=$($N bind "$bdf" 2>&1); rc=$?
drv=$(basename "$(readlink /sys/bus/pci/devices/$bdf/driver)")
[ "$drv" = vfio-pci ] || rc=1
check bind "$rc" "$out; driver $drv"

D="--device $bdf"
out=$($N $D info 2>&1); rc=$?
echo "$out" | grep -q "$ARCH" || rc=1
check info "$rc" "$(echo "$out" | head -3 | oneline)"

out=$($N $D csr read misc_ram.fw_api_version misc_ram.device_id 2>&1); rc=$?
echo "$out" | grep -q fw_api_version || rc=1
check csr_read "$rc" "$(echo "$out" | oneline)"

out=$($N $D nq dump 2>&1); rc=$?
check nq_dump "$rc" "$(echo "$out" | head -4 | oneline)"

out=$($N --json $D dma bench --size 1M --iters 2 2>&1); rc=$?
echo "$out" | grep -q ratio_vs_memcpy || rc=1
check dma_bench "$rc" "$(echo "$out" | cut -c1-200)"
[ "$rc" = 0 ] && echo "VFIO-BENCH neuron-dma $out"

# The example models with exact outputs, through both VFIO interfaces.
for b in container iommufd; do
    rm -rf /tmp/o1 /tmp/o2
    out=$(NEURON_VFIO_BACKEND=$b $N $D run $E/allreduce_1nc.neff --input input=$IN --output-dir /tmp/o1 2>&1); rc=$?
    cmp -s /tmp/o1/output.bin "$IN" || rc=1
    check "$b.run_1nc" "$rc" "$(echo "$out" | head -2 | oneline)"
    out=$(NEURON_VFIO_BACKEND=$b $N $D run $E/allreduce_2nc.neff --input input=$IN --output-dir /tmp/o2 2>&1); rc=$?
    cmp -s /tmp/o2/output.bin "$E/expected_2nc.bin" || rc=1
    check "$b.run_2nc" "$rc" "$(echo "$out" | head -2 | oneline)"
done

# The interrupt poll policy: the run completes, and the device's MSI-X vectors (counted in
# /proc/interrupts while `run --pause-after-exec` still holds them) fired.
rm -f /tmp/go; mkfifo /tmp/go
$N $D run $E/allreduce_1nc.neff --input input=$IN --poll interrupt --repeat 2 --output-dir /tmp/o3 \
    --pause-after-exec </tmp/go >/tmp/irq.out 2>/tmp/irq.err &
pid=$!
exec 3>/tmp/go
i=0
while ! grep -q "run: executed" /tmp/irq.err && kill -0 $pid 2>/dev/null && [ $i -lt 1200 ]; do
    sleep 0.1; i=$((i + 1))
done
grep "vfio-msix" /proc/interrupts | grep "$bdf" | sed 's/^ */VFIO-INFO interrupts /'
n=$(msix_count)
echo >&3; exec 3>&-
wait $pid; rc=$?
cmp -s /tmp/o3/output.bin "$IN" || rc=1
[ "$n" -gt 0 ] || rc=1
check irq_poll "$rc" "$n MSI-X interrupts; $(head -1 /tmp/irq.out | oneline)$(grep -v 'run: executed' /tmp/irq.err | head -2 | oneline)"

# A fault the host injects through sim-serve's control socket once the model is loaded (the
# host reads `run: loaded` on the serial console, injects, then sends a line to continue).
out=$($N --json $D run $E/allreduce_1nc.neff --input input=$IN --pause-before-exec --timeout 20 </dev/console 2>/dev/console); rc=$?
echo "$out" | grep -q '"status":"NRT_EXEC_COMPLETED_WITH_NUM_ERR"' && [ "$rc" != 0 ] && frc=0 || frc=1
check fault "$frc" "$(echo "$out" | grep status | cut -c1-200)"
# One device, several processes (docs/sharing.md): a broker owns the device through iommufd
# and hands each process the device's descriptors; each maps the BARs itself and drives only
# the NC it leased. Two processes on NC0 and NC1 at once, both exact; a third asking for a
# held NC is refused as libnrt refuses it; a process SIGKILLed while it runs gives its NC
# back and the next process takes it.
export NEURON_VFIO_BROKER_SOCKET=/tmp/nv-broker/broker.sock
$N broker --foreground --persist >/tmp/broker.log 2>&1 &
bpid=$!
i=0
while [ ! -S "$NEURON_VFIO_BROKER_SOCKET" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
rm -rf /tmp/s0 /tmp/s1 /tmp/s2
NEURON_RT_VISIBLE_CORES=0 $N $D run $E/allreduce_1nc.neff --input input=$IN --repeat 3 --output-dir /tmp/s0 >/tmp/s0.out 2>&1 &
p0=$!
NEURON_RT_VISIBLE_CORES=1 $N $D run $E/allreduce_1nc.neff --input input=$IN --repeat 3 --output-dir /tmp/s1 >/tmp/s1.out 2>&1 &
p1=$!
wait $p0; rc0=$?
wait $p1; rc1=$?
rc=$((rc0 + rc1))
cmp -s /tmp/s0/output.bin "$IN" || rc=1
cmp -s /tmp/s1/output.bin "$IN" || rc=1
check shared.two_processes "$rc" "nc0 rc $rc0, nc1 rc $rc1; $(tail -n 2 /tmp/s0.out | oneline) | $(tail -n 2 /tmp/s1.out | oneline)"
# A long run on NC0, seen by ls through the broker, then killed mid-run.
NEURON_RT_VISIBLE_CORES=0 $N $D run $E/allreduce_1nc.neff --input input=$IN --repeat 1000000 >/tmp/long.out 2>&1 &
plong=$!
i=0 seen=1
while [ $i -lt 600 ]; do
    if $N --json ls 2>/dev/null | grep -q "\"pid\": *$plong"; then seen=0; break; fi
    sleep 0.1; i=$((i + 1))
done
check shared.ls_lists_processes "$seen" "$($N ls 2>&1 | oneline)"
out=$(NEURON_RT_VISIBLE_CORES=0 $N $D run $E/allreduce_1nc.neff --input input=$IN 2>&1); rc=$?
echo "$out" | grep -q "not available" && [ "$rc" != 0 ] && rrc=0 || rrc=1
check shared.held_core_refused "$rrc" "$(echo "$out" | tail -n 2 | oneline)"
sleep 1
kill -9 $plong; wait $plong 2>/dev/null
t1=$(date +%s)
rc=1 tries=0
while [ $tries -lt 20 ]; do
    rm -rf /tmp/s2
    out=$(NEURON_RT_VISIBLE_CORES=0 $N $D run $E/allreduce_1nc.neff --input input=$IN --output-dir /tmp/s2 2>&1) && cmp -s /tmp/s2/output.bin "$IN" && { rc=0; break; }
    tries=$((tries + 1)); sleep 0.2
done
check shared.killed_core_taken "$rc" "after $tries retries, $(( $(date +%s) - t1 ))s; $(echo "$out" | tail -n 2 | oneline)"
# Syscalls per execute, through the broker and with the device opened by the process alone:
# strace -f -c over two repeat counts, the difference of calls over the difference of
# executes (what a run does once cancels out). The broker is not on the execute path, so the
# two must agree. sched_yield is the wait policy's (spin, then yield: how often depends on
# how long the device takes, under TCG a lot) and is reported apart, not compared.
calls() { # COMMAND...: the syscalls it made (all threads), sched_yield aside
    strace -f -c -o /tmp/st.out "$@" >/dev/null 2>&1 || { echo fail; return; }
    awk '$NF != "total" && $NF != "sched_yield" && $1 ~ /^[0-9.]+$/ {n += $4} END {print n + 0}' /tmp/st.out
}
per_exec() { # LABEL: syscalls per execute of `run` on NC0
    a=$(NEURON_RT_VISIBLE_CORES=0 calls $N $D run $E/allreduce_1nc.neff --input input=$IN --repeat 5)
    b=$(NEURON_RT_VISIBLE_CORES=0 calls $N $D run $E/allreduce_1nc.neff --input input=$IN --repeat 45)
    cp /tmp/st.out "/tmp/st.$1"
    case "$a$b" in *fail*|"") echo fail ;; *) awk -v a="$a" -v b="$b" 'BEGIN {printf "%.2f", (b - a) / 40}' ;; esac
}
shared_per=$(per_exec shared)
kill $bpid 2>/dev/null; wait $bpid 2>/dev/null
grep -E "cleaned up|VFIO device opened" /tmp/broker.log | sed 's/^/VFIO-INFO broker /' | cut -c1-240
unset NEURON_VFIO_BROKER_SOCKET
private_per=$(per_exec private)
case "$shared_per$private_per" in
    *fail*) rc=1 ;;
    *) awk -v s="$shared_per" -v p="$private_per" 'BEGIN {exit !(s <= p + 0.5)}'; rc=$? ;;
esac
top() { grep -vE '^(%|-|.* total$)' "/tmp/st.$1" | sort -k4 -n -r | head -n 3 | awk '{printf "%s %s, ", $NF, $4}'; }
check shared.syscalls_per_execute "$rc" "through the broker $shared_per, alone $private_per per execute; most called (45 runs): broker: $(top shared) alone: $(top private)"
echo "VFIO-BENCH shared-syscalls {\"through_broker_per_execute\":\"$shared_per\",\"alone_per_execute\":\"$private_per\"}"
# Time per execute through the broker against the device opened alone, interleaved pair by
# pair (the broker started for one and stopped for the other): `run`'s mean over 45
# executes. A figure, not a check (TCG's timing is not a device's); the ratio should be ~1.
mean_total() { sed -n 's/.*timings: mean total \([0-9]*\) ns.*/\1/p' | head -n 1; }
pairs=""
for k in 1 2 3 4 5; do
    export NEURON_VFIO_BROKER_SOCKET=/tmp/nv-broker/broker.sock
    $N broker --foreground --persist >/dev/null 2>&1 &
    bpid=$!
    i=0
    while [ ! -S "$NEURON_VFIO_BROKER_SOCKET" ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    sh_ns=$(NEURON_RT_VISIBLE_CORES=0 $N $D run $E/allreduce_1nc.neff --input input=$IN --repeat 45 2>&1 | mean_total)
    kill $bpid 2>/dev/null; wait $bpid 2>/dev/null
    unset NEURON_VFIO_BROKER_SOCKET
    al_ns=$(NEURON_RT_VISIBLE_CORES=0 $N $D run $E/allreduce_1nc.neff --input input=$IN --repeat 45 2>&1 | mean_total)
    pairs="$pairs${pairs:+,}[${sh_ns:-null},${al_ns:-null}]"
done
echo "VFIO-BENCH shared-exec {\"mean_ns_through_broker_vs_alone\":[$pairs]}"

# The broker dies while a client holds the device: the client runs on; a new broker adopts
# the device from it (the client re-registers its window, core and memory and hands over the
# device's descriptors: the kernel lets one opener bind a device cdev, and the client holds
# it), lists it, refuses its core to others, serves the free one, and takes its core back
# when it exits.
export NEURON_VFIO_BROKER_SOCKET=/tmp/nv-broker/broker.sock
wait_broker() { i=0; while ! $N ls >/dev/null 2>&1 || [ ! -S "$NEURON_VFIO_BROKER_SOCKET" ]; do
    [ $i -lt 300 ] || break; sleep 0.1; i=$((i + 1)); done; }
$N broker --foreground --persist >/tmp/broker1.log 2>&1 &
b1=$!
wait_broker
rm -rf /tmp/s5 /tmp/s6 /tmp/s7 /tmp/go5; mkfifo /tmp/go5
NEURON_RT_VISIBLE_CORES=0 $N $D run $E/allreduce_1nc.neff --input input=$IN --output-dir /tmp/s5 \
    --pause-before-exec </tmp/go5 >/tmp/s5.out 2>/tmp/s5.err &
pc=$!
exec 4>/tmp/go5
i=0
while ! grep -q "run: loaded" /tmp/s5.err && kill -0 $pc 2>/dev/null && [ $i -lt 600 ]; do sleep 0.1; i=$((i + 1)); done
# Centiseconds since boot (busybox's date has no %N).
now_cs() { read -r up _ </proc/uptime; echo "${up%.*}${up#*.}"; }
kill -9 $b1; wait $b1 2>/dev/null
t_kill=$(now_cs)
$N broker --foreground --persist >/tmp/broker2.log 2>&1 &
b2=$!
i=0 seen=1
while [ $i -lt 300 ]; do
    if $N --json ls 2>/dev/null | grep -q "\"pid\": *$pc"; then seen=0; break; fi
    sleep 0.1; i=$((i + 1))
done
adopt_ms=$(( ($(now_cs) - t_kill) * 10 ))
check shared.broker_restart_adopted "$seen" "the new broker lists the running client (pid $pc) ${adopt_ms} ms after the old one died; $($N ls 2>&1 | oneline)"
echo "VFIO-BENCH shared-adopt {\"broker_killed_to_client_listed_ms\":$adopt_ms}"
out=$(NEURON_RT_VISIBLE_CORES=0 $N $D run $E/allreduce_1nc.neff --input input=$IN 2>&1); held_rc=$?
echo "$out" | grep -q "not available" && echo "$out" | grep -q "pid $pc" && [ "$held_rc" != 0 ] && hrc=0 || hrc=1
check shared.broker_restart_held "$hrc" "its core asked for under the new broker: rc $held_rc $(echo "$out" | tail -n 1 | oneline)"
out=$(NEURON_RT_VISIBLE_CORES=1 $N $D run $E/allreduce_1nc.neff --input input=$IN --output-dir /tmp/s7 2>&1); rc=$?
cmp -s /tmp/s7/output.bin "$IN" || rc=1
check shared.broker_restart_free_core "$rc" "the free core under the new broker: $(echo "$out" | tail -n 1 | oneline)"
echo >&4; exec 4>&-
wait $pc; crc=$?
cmp -s /tmp/s5/output.bin "$IN" || crc=1
check shared.broker_restart_client_exact "$crc" "the client that outlived its broker: $(tail -n 2 /tmp/s5.out | oneline) $(grep -i "broker" /tmp/s5.err | tail -n 2 | oneline)"
out=$(NEURON_RT_VISIBLE_CORES=0 $N $D run $E/allreduce_1nc.neff --input input=$IN --output-dir /tmp/s6 2>&1); rc=$?
cmp -s /tmp/s6/output.bin "$IN" || rc=1
check shared.broker_restart_serves "$rc" "its core after it exited: $(echo "$out" | tail -n 2 | oneline)"
kill $b2 2>/dev/null; wait $b2 2>/dev/null
unset NEURON_VFIO_BROKER_SOCKET

echo "VFIO-INFO neuron checks took $(( $(date +%s) - t0 ))s"
echo "VFIO-EXIT neuron 0"
