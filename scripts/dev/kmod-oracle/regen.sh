#!/usr/bin/env bash
# Regenerate the golden traces hal/tests/kmod-oracle/<arch>/*.trace from the kmod itself.
#
#   KMOD_DIR=/path/to/aws-neuron-driver scripts/dev/kmod-oracle/regen.sh
#
# Builds the oracle (build.sh), runs it per arch into a fresh folder, stamps each trace with
# the kmod commit and this command, and replaces the fixtures. Review the diff: every changed
# line is a change in how the kmod programs the device (`cargo test -p hal --test kmod_oracle`
# then says which hal sequences it touches).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
OUT="${OUT:-$root/target/kmod-oracle}"
export OUT
"$here/build.sh"
commit="$(cat "$here/KMOD_COMMIT")"
for pair in v2:sunda v3:cayman; do
	arch="${pair%%:*}"
	name="${pair##*:}"
	tmp="$OUT/traces-$arch"
	rm -rf "$tmp"
	mkdir -p "$tmp"
	"$OUT/oracle-$arch" "$tmp" 2> "$OUT/oracle-$arch.log"
	dest="$root/hal/tests/kmod-oracle/$name"
	rm -rf "$dest"
	mkdir -p "$dest"
	for t in "$tmp"/*.trace; do
		{
			echo "# kmod: aws-neuron/aws-neuron-driver@$commit ($arch), compiled unmodified by scripts/dev/kmod-oracle"
			echo "# regenerate: KMOD_DIR=<checkout at that commit> scripts/dev/kmod-oracle/regen.sh"
			cat "$t"
		} > "$dest/$(basename "$t")"
	done
	echo "$name: $(ls "$dest" | wc -l) traces in $dest"
done
