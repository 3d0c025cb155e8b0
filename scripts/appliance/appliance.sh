#!/bin/sh
# The appliance's boot script (installed as /etc/boot.d/50-appliance by
# scripts/appliance/build.sh, run by the image's /init): VFIO modules, hugepages, the device
# broker, bind every configured Neuron device to vfio-pci, `ls`, each configured model on the
# devices found (or on the simulator), one JSON line per step on the console and a summary
# line; then it stops the broker and returns (/init powers off), or stays up in service mode
# (the broker then stops at shutdown: /init runs /etc/shutdown.d). Configuration:
# /etc/appliance.conf, written by build.sh from the user's config (docs/appliance.md
# documents every key and line).
. /etc/appliance.conf
N=/bin/neuron-vfio
t0=$(date +%s)
steps=0 failed=0 runs=0 exact=0

# A JSON string from arbitrary text: escapes, control characters dropped, one line, bounded.
jstr() {
    printf '"%s"' "$(printf '%s' "$1" | tr '\n\t' '  ' | tr -d '\000-\037' | cut -c1-400 |
        sed 's/\\/\\\\/g; s/"/\\"/g')"
}
# The first line of a command's JSON output, or the text as a JSON string.
jval() {
    first=$(printf '%s\n' "$1" | head -n1)
    case $first in
        '{'*'}' | '['*']') printf '%s' "$first" ;;
        *) jstr "$1" ;;
    esac
}
# step NAME OK REST: one line `{"step":NAME,"ok":OK,REST}`.
step() {
    steps=$((steps + 1))
    [ "$2" = true ] || failed=$((failed + 1))
    echo "{\"step\":\"$1\",\"ok\":$2${3:+,$3}}"
}
bool() { if [ "$1" = 0 ]; then echo true; else echo false; fi; }

export NEURON_VFIO_BACKEND=${BACKEND:-auto}
[ "${ALLOW_MODELED:-0}" = 1 ] && export NEURON_VFIO_ALLOW_MODELED=1
# Shared memory for the runtime counters that `monitor` reads.
mkdir -p /dev/shm && mount -t tmpfs -o mode=1777 tmpfs /dev/shm 2>/dev/null
# libnrt's SONAME, the name programs linked with -lnrt load (the image holds the library once).
[ -e /usr/lib/libnrt.so.1 ] || ln -s libnrt.so /usr/lib/libnrt.so.1 2>/dev/null || true

# 1. VFIO modules: /init loaded /etc/modules (a modular kernel); check vfio-pci is there.
if [ -d /sys/bus/pci/drivers/vfio-pci ]; then rc=0; else rc=1; fi
step modules "$(bool $rc)" "\"modular\":$([ -s /etc/modules ] && echo true || echo false),\"loaded\":$(jstr "$(cat /etc/modules 2>/dev/null)"),\"vfio_pci\":$(bool $rc)"

# 2. Hugepages (2 MiB) for DMA buffers.
hp=/proc/sys/vm/nr_hugepages
echo "${HUGEPAGES:-0}" > $hp 2>/dev/null
got=$(cat $hp 2>/dev/null || echo 0)
[ "$got" -ge "${HUGEPAGES:-0}" ] && rc=0 || rc=1
step hugepages "$(bool $rc)" "\"requested\":${HUGEPAGES:-0},\"reserved\":$got"

# 3. The device broker (docs/sharing.md), for the processes that share a device: started
# before any workload, persistent (it does not exit when idle), on the documented default
# socket for root (/tmp/neuron-vfio-0/broker.sock here: no XDG_RUNTIME_DIR, no /run/user/0)
# unless the config sets BROKER_SOCKET, which then is every process's NEURON_VFIO_BROKER_SOCKET.
[ -n "${BROKER_SOCKET:-}" ] && export NEURON_VFIO_BROKER_SOCKET=$BROKER_SOCKET
uid=$(id -u 2>/dev/null || echo 0)
if [ -n "${NEURON_VFIO_BROKER_SOCKET:-}" ]; then bsock=$NEURON_VFIO_BROKER_SOCKET
elif [ -n "${XDG_RUNTIME_DIR:-}" ]; then bsock=$XDG_RUNTIME_DIR/neuron-vfio/broker.sock
elif [ -d "/run/user/$uid" ]; then bsock=/run/user/$uid/neuron-vfio/broker.sock
else bsock=/tmp/neuron-vfio-$uid/broker.sock
fi
$N broker --persist --socket "$bsock" </dev/null >/dev/null 2>/tmp/broker.err &
bpid=$!
# Up when its socket is there (10 s at most), or gone if it failed.
i=0
while [ ! -S "$bsock" ] && kill -0 $bpid 2>/dev/null && [ $i -lt 100 ]; do
    sleep 0.1 2>/dev/null || sleep 1
    i=$((i + 1))
done
[ -S "$bsock" ] && kill -0 $bpid 2>/dev/null && rc=0 || rc=1
step broker "$(bool $rc)" "\"pid\":$bpid,\"socket\":$(jstr "$bsock"),\"persist\":true$([ $rc = 0 ] || echo ",\"error\":$(jstr "$(cat /tmp/broker.err)")")"
# Stop it: SIGTERM, on which it cleans up its clients, removes its socket and exits 0 (after
# 10 s a watchdog kills it, and that is a failure).
stop_broker() {
    kill -TERM $bpid 2>/dev/null
    (sleep 10; kill -KILL $bpid 2>/dev/null) &
    watchdog=$!
    wait $bpid
    st=$?
    kill $watchdog 2>/dev/null
    [ "$st" = 0 ] && [ ! -e "$bsock" ]
}

# 4. Bind every Neuron device with a configured PCI id to vfio-pci (the project's bind code).
if [ -n "${PCI_IDS:-}" ]; then sel="--ids $PCI_IDS"; else sel=--all; fi
out=$($N --json bind $sel 2>/tmp/bind.err); rc=$?
nbound=$(printf '%s' "$out" | head -n1 | grep -o '"driver":"vfio-pci"' | wc -l)
step bind "$(bool $rc)" "\"ids\":$(jstr "$PCI_IDS"),\"bound\":$nbound,\"devices\":$(jval "$out")$([ $rc = 0 ] || echo ",\"error\":$(jstr "$(cat /tmp/bind.err)")")"

# 5. ls: the devices on vfio-pci are where the models run (DEVICE=sim…: the simulated ones).
case ${DEVICE:-vfio} in vfio) lsdev="" ;; *) lsdev="--device $DEVICE" ;; esac
out=$($N --json $lsdev ls 2>/tmp/ls.err); rc=$?
bdfs=$(printf '%s' "$out" | head -n1 | tr '}' '\n' | grep '"driver":"vfio-pci"' |
    sed -n 's/.*"bdf":"\([^"]*\)".*/\1/p')
ndev=$(echo $bdfs | wc -w)
case ${DEVICE:-vfio} in
    vfio) targets=$bdfs; [ "$ndev" -gt 0 ] || rc=1 ;;
    *) targets=$DEVICE ;;
esac
step ls "$(bool $rc)" "\"vfio_devices\":$ndev,\"devices\":$(jval "$out")"

# 6. Each model on each target: exact outputs where the config gives them.
i=1
while [ "$i" -le "${MODEL_COUNT:-0}" ]; do
    eval "model=\$MODEL$i inputs=\$MODEL${i}_INPUTS expect=\$MODEL${i}_EXPECT"
    for dev in $targets; do
        o=/tmp/out/$i-$(echo "$dev" | tr ':.' '__')
        rm -rf "$o"
        args=""
        for in in $inputs; do args="$args --input $in"; done
        out=$($N --json --device "$dev" run "$model" $args --output-dir "$o" --timeout "${EXEC_TIMEOUT:-60}" 2>/tmp/run.err)
        rc=$?
        checks="" match=true
        for e in $expect; do
            name=${e%%=*} file=${e#*=}
            if cmp -s "$o/$name.bin" "$file"; then ok=true; else ok=false; match=false; rc=1; fi
            checks="$checks${checks:+,}\"$name\":$ok"
        done
        runs=$((runs + 1))
        [ -n "$expect" ] && [ "$match" = true ] && [ "$rc" = 0 ] && exact=$((exact + 1))
        err=""; [ "$rc" = 0 ] || err=",\"stderr\":$(jstr "$(tail -n3 /tmp/run.err)")"
        step run "$(bool $rc)" "\"model\":$(jstr "${model##*/}"),\"device\":$(jstr "$dev"),\"expected\":{$checks},\"result\":$(jval "$out")$err"
    done
    i=$((i + 1))
done

after=${AFTER:-poweroff}
# 7. Powering off: the broker stops before the summary. Staying up: it serves the service and
# /init stops it at shutdown (its /etc/shutdown.d, after the console shell).
if [ "$after" = stay ]; then
    mkdir -p /etc/shutdown.d
    # It is /init's child by then: done when its socket is gone (it removes it last).
    printf '#!/bin/sh\n# Written by the appliance: stop the device broker (pid %s).\nkill -TERM %s 2>/dev/null\ni=0\nwhile [ -e %s ] && [ $i -lt 100 ]; do sleep 0.1 2>/dev/null || sleep 1; i=$((i + 1)); done\n' \
        "$bpid" "$bpid" "'$bsock'" > /etc/shutdown.d/50-broker
    chmod 755 /etc/shutdown.d/50-broker
else
    stop_broker && rc=0 || rc=1
    step broker_stop "$(bool $rc)" "\"pid\":$bpid,\"socket_removed\":$([ -e "$bsock" ] && echo false || echo true)"
fi
echo "{\"step\":\"summary\",\"ok\":$([ $failed = 0 ] && echo true || echo false),\"steps\":$steps,\"failed\":$failed,\"devices\":$ndev,\"runs\":$runs,\"exact\":$exact,\"seconds\":$(($(date +%s) - t0)),\"after\":\"$after\"}"
[ "$after" = stay ] || exit 0

# Service mode: every device runs its models in a loop (each `run --repeat` keeps its model
# loaded for SERVICE_REPEAT executions), and `monitor` reports the counters: JSON lines on the
# console every MONITOR_PERIOD_MS, and Prometheus /metrics on SERVICE_PORT when the kernel has
# TCP/IP.
if [ -n "${NET_ADDR:-}" ] && [ -d /sys/class/net/eth0 ]; then
    ip link set lo up; ip link set eth0 up && ip addr add "$NET_ADDR" dev eth0
    [ -n "${NET_GW:-}" ] && ip route add default via "$NET_GW"
fi
for dev in $targets; do
    (
        while :; do
            i=1
            while [ "$i" -le "${MODEL_COUNT:-0}" ]; do
                eval "model=\$MODEL$i inputs=\$MODEL${i}_INPUTS"
                args=""
                for in in $inputs; do args="$args --input $in"; done
                $N --json --device "$dev" run "$model" $args --repeat "${SERVICE_REPEAT:-1000}" \
                    --timeout "${EXEC_TIMEOUT:-60}" >>/tmp/service.log 2>&1 || sleep 1
                i=$((i + 1))
            done
        done
    ) &
done
prom=""
[ -n "${SERVICE_PORT:-}" ] && [ -e /proc/net/tcp ] && prom="--prometheus 0.0.0.0:$SERVICE_PORT"
$N --json monitor --period-ms "${MONITOR_PERIOD_MS:-10000}" $prom &
mpid=$!
sleep 1
kill -0 $mpid 2>/dev/null && rc=0 || rc=1
echo "{\"step\":\"service\",\"ok\":$(bool $rc),\"devices\":$(jstr "$targets"),\"models\":${MODEL_COUNT:-0},\"metrics\":$(if [ -n "$prom" ]; then jstr "http://${NET_ADDR%%/*}:$SERVICE_PORT/metrics"; else echo null; fi)}"
# A shell on the console (appliance.shell) with the service running behind it; else stay up.
grep -qw appliance.shell /proc/cmdline && exit 0
while :; do sleep 3600; done
