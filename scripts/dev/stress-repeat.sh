#!/usr/bin/env bash
# Run the concurrency stress suites (runtime churn + sharing) N times in a row, optionally
# with CPU noise (one busy process per core at the same priority), and print one summary line
# per suite: runs, failures, hangs (a run over its time limit), slowest run.
# usage: scripts/dev/stress-repeat.sh [-n RUNS] [--noise] [-t LIMIT_S]
set -euo pipefail
runs=20 noise=0 limit=300
while [ $# -gt 0 ]; do
    case "$1" in
        -n) runs="$2"; shift 2 ;;
        --noise) noise=1; shift ;;
        -t) limit="$2"; shift 2 ;;
        -h|--help) sed -n '2,5p' "$0"; exit 0 ;;
        *) echo "unknown argument $1" >&2; exit 2 ;;
    esac
done
cd "$(dirname "$0")/../.."
suites=(churn sharing)
declare -A bin
for s in "${suites[@]}"; do
    bin[$s]=$(cargo test -p runtime --test "$s" --no-run --message-format=json 2>/dev/null \
        | python3 -c 'import json,sys
for l in sys.stdin:
    m=json.loads(l)
    if m.get("reason")=="compiler-artifact" and m.get("executable") and m["target"]["kind"]==["test"]:
        print(m["executable"])' | tail -1)
    [ -x "${bin[$s]}" ] || { echo "no test binary for $s" >&2; exit 1; }
done
pids=()
if [ "$noise" = 1 ]; then
    for _ in $(seq "$(nproc)"); do ( while :; do :; done ) & pids+=($!); done
    trap 'kill "${pids[@]}" 2>/dev/null' EXIT
fi
fail_total=0
for s in "${suites[@]}"; do
    fails=0 hangs=0 slowest=0
    for i in $(seq "$runs"); do
        t0=$(date +%s.%N)
        if timeout "$limit" "${bin[$s]}" -q >"/tmp/stress-$s-$i.log" 2>&1; then
            rm -f "/tmp/stress-$s-$i.log"
        else
            rc=$?
            if [ "$rc" = 124 ]; then hangs=$((hangs + 1)); else fails=$((fails + 1)); fi
            echo "$s run $i failed (exit $rc): /tmp/stress-$s-$i.log" >&2
        fi
        dt=$(echo "$(date +%s.%N) - $t0" | bc)
        slowest=$(echo "if ($dt > $slowest) $dt else $slowest" | bc)
    done
    echo "stress $s: runs $runs, failed $fails, hung $hangs, slowest ${slowest}s, noise $noise"
    fail_total=$((fail_total + fails + hangs))
done
[ "$fail_total" = 0 ]
