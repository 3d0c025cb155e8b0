#!/usr/bin/env bash
# Regenerate the golden traces hal/tests/kmod-oracle/<arch>/*.trace from the kmod itself.
#
#   KMOD_DIR=/path/to/aws-neuron-driver [KMOD_V4_DIR=/path/to/wombelix-aws-neuron-driver] \
#       scripts/dev/kmod-oracle/regen.sh
#
# Builds the oracle (build.sh), runs it per arch into a fresh folder, stamps each trace with
# the kmod source and this command, and replaces the fixtures: sunda and cayman from
# KMOD_DIR, mariana from KMOD_V4_DIR (left as committed when KMOD_V4_DIR is not set). Review the diff: every changed
# line is a change in how the kmod programs the device (`cargo test -p hal --test kmod_oracle`
# then says which hal sequences it touches).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
OUT="${OUT:-$root/target/kmod-oracle}"
export OUT
"$here/build.sh"
commit="$(cat "$here/KMOD_COMMIT")"
v4_commit="$(cat "$here/KMOD_V4_COMMIT")"
pairs=(v2:sunda v3:cayman)
if [ -n "${KMOD_V4_DIR:-}" ]; then
	pairs+=(v4:mariana)
else
	echo "KMOD_V4_DIR not set: mariana's traces are left as committed (README.md)" >&2
fi
for pair in "${pairs[@]}"; do
	arch="${pair%%:*}"
	name="${pair##*:}"
	if [ "$arch" = v4 ]; then
		source_line="wombelix/aws-neuron-driver@$v4_commit src/ = aws-neuronx-dkms 2.25.4.0 ($arch)"
		regen_line="KMOD_DIR=<aws-neuron checkout> KMOD_V4_DIR=<wombelix checkout at that commit> scripts/dev/kmod-oracle/regen.sh"
	else
		source_line="aws-neuron/aws-neuron-driver@$commit ($arch)"
		regen_line="KMOD_DIR=<checkout at that commit> scripts/dev/kmod-oracle/regen.sh"
	fi
	tmp="$OUT/traces-$arch"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	"$OUT/oracle-$arch" "$tmp" 2> "$OUT/oracle-$arch.log"
	dest="$root/hal/tests/kmod-oracle/$name"
	rm -rf "$dest"
	mkdir -p "$dest"
	for t in "$tmp"/*.trace; do
		{
			echo "# kmod: $source_line, compiled unmodified by scripts/dev/kmod-oracle"
			echo "# regenerate: $regen_line"
			cat "$t"
		} > "$dest/$(basename "$t")"
	done
	echo "$name: $(ls "$dest" | wc -l) traces in $dest"
done
