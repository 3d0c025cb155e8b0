#!/bin/sh
# Boot script of the kmod guest (scripts/dev/kmod-guest/run.sh): load the vendor's neuron.ko
# on the virtual device, run guest-check and every probe, print the kernel log, power off.
# Each `KMOD-GUEST-MARK NAME` line waits for run.sh's answer on the console (run.sh marks the
# served device's MMIO trace in between).
arch=$(sed -n 's/.*kmod_guest\.arch=\([a-z]*\).*/\1/p' /proc/cmdline)
mark() { echo "KMOD-GUEST-MARK $1"; read -r _; }
ntest() { echo "NTEST $*"; }

mark probe
t0=$(cut -d' ' -f1 /proc/uptime)
# The real-hardware path (PCI revision 0); no metrics posts (legacy FW-IO every 150 s); a host
# mempool that fits a small guest.
if insmod /lib/neuron/neuron.ko nmetric_log_posts=0 mempool_host_memory_size=8388608; then
    i=0
    while [ ! -e /dev/neuron0 ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
    t1=$(cut -d' ' -f1 /proc/uptime)
    if [ -e /dev/neuron0 ] && [ -d /sys/class/neuron_device/neuron0 ]; then
        ntest ok insmod "neuron.ko probed in $(echo "$t0 $t1" | awk '{printf "%.2f", $2 - $1}')s: /dev/neuron0, /sys/class/neuron_device/neuron0"
    else
        ntest FAIL insmod "no /dev/neuron0 after 30 s"
    fi
else
    ntest FAIL insmod "insmod failed"
fi
if [ -e /dev/neuron0 ]; then
    /bin/guest-check "$arch" || true
    for p in $(cat /etc/kmod-guest/probes 2>/dev/null); do
        mark "$p"
        "/bin/$p" "$arch" || ntest FAIL "$p" "exit status $?"
    done
fi
mark rmmod
if rmmod neuron; then ntest ok rmmod "neuron.ko unloaded"; else ntest FAIL rmmod "rmmod failed"; fi
mark end
echo "KMOD-GUEST kernel log:"
dmesg | sed 's/^/KLOG /'
echo "KMOD-GUEST done"
