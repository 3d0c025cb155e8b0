#!/usr/bin/env bash
# Build the kmod oracle: the public Neuron kernel module's register-programming files,
# compiled unmodified as a userspace program against this folder's shim (shim/kshim.h,
# shim/kshim.c) and driven by oracle.c. See README.md.
#
#   KMOD_DIR=/path/to/aws-neuron-driver [KMOD_V4_DIR=/path/to/wombelix-aws-neuron-driver] \
#       scripts/dev/kmod-oracle/build.sh        # -> $OUT/oracle-v2, oracle-v3 [, oracle-v4]
#
# KMOD_DIR must be a git checkout of aws-neuron/aws-neuron-driver at $KMOD_COMMIT (v2, v3).
# KMOD_V4_DIR (optional) must be a git checkout of wombelix/aws-neuron-driver at
# $KMOD_V4_COMMIT, the aws-neuronx-dkms 2.25.4.0 release, whose kmod is under src/ (v4: the
# only public tree with v4/; README.md). OUT defaults to target/kmod-oracle. Nothing of the
# kmod is copied into this tree.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
: "${KMOD_DIR:?set KMOD_DIR to a checkout of aws-neuron/aws-neuron-driver (README.md)}"
OUT="${OUT:-$root/target/kmod-oracle}"
CC="${CC:-gcc}"

# pinned <checkout> <pin file>: the checkout is a clean git checkout at the pinned commit.
pinned() {
	local dir="$1" pin got
	pin="$(cat "$here/$2")"
	got="$(git -C "$dir" rev-parse HEAD 2>/dev/null || true)"
	if [ "$got" != "$pin" ]; then
		echo "$dir is at '${got:-not a git checkout}', the oracle is pinned to $pin ($2)" >&2
		echo "  git -C $dir checkout $pin   (or move $here/$2 after regenerating)" >&2
		exit 1
	fi
	if [ -n "$(git -C "$dir" status --porcelain --untracked-files=no)" ]; then
		echo "$dir has local modifications: the oracle compiles the kmod files unmodified" >&2
		exit 1
	fi
}

# The kmod source of each arch: v2 and v3 from aws-neuron/aws-neuron-driver, v4 from the
# 2.25.4.0 release tree (its src/ folder).
declare -A src=([v2]="$KMOD_DIR" [v3]="$KMOD_DIR")
pinned "$KMOD_DIR" KMOD_COMMIT
arches=(v2 v3)
if [ -n "${KMOD_V4_DIR:-}" ]; then
	pinned "$KMOD_V4_DIR" KMOD_V4_COMMIT
	src[v4]="$KMOD_V4_DIR/src"
	arches+=(v4)
fi

# Files compiled per arch. Each arch defines its own address map, so each arch is one
# program. The v4 kmod is "v3 plus overrides" (neuron_dhal.c registers v3, then v4), so v4
# compiles the v3 files too.
common=(udma/udma_main.c udma/udma_m2m.c udma/udma_iofic.c neuron_ring.c neuron_dma.c neuron_nq.c neuron_core.c vc/neuron_dhal_vc.c
	neuron_reset.c neuron_fw_io.c neuron_topsp.c neuron_dhal.c neuron_reg_access.c neuron_arch.c)
declare -A arch_files=(
	[v2]="v2/neuron_dhal_v2.c v2/notific.c"
	[v3]="v3/neuron_dhal_v3.c v3/notific.c"
	[v4]="v3/neuron_dhal_v3.c v3/notific.c v4/neuron_dhal_v4.c"
)

for arch in "${arches[@]}"; do
	k="${src[$arch]}"
	obj="$OUT/$arch"
	rm -rf "$obj"
	mkdir -p "$obj"
	# The kernel headers the kmod files include, each a one-line file that includes kshim.h.
	inc="$obj/include"
	mkdir -p "$inc"
	for h in $(cd "$k" && grep -ho '^#include <\(linux\|asm\|trace\)/[^>]*>' $(git ls-files '*.c' '*.h') | sed 's/.*<\(.*\)>/\1/' | sort -u); do
		mkdir -p "$inc/$(dirname "$h")"
		echo '#include "kshim.h"' > "$inc/$h"
	done
	cflags=(-std=gnu11 -fgnu89-inline -O0 -g -w -fno-strict-aliasing -fcommon -D__KERNEL__ -include "$here/shim/kshim.h"
		-I"$here/shim" -I"$inc" -I"$k" -I"$k/udma")
	objs=()
	for f in "${common[@]}" ${arch_files[$arch]}; do
		o="$obj/$(echo "$f" | tr / _).o"
		dir="$(dirname "$f")"
		"$CC" "${cflags[@]}" -I"$k/$dir" -c "$k/$f" -o "$o"
		objs+=("$o")
	done
	# The kmod's queue reset (udma_q_reset) is static, reached only inside udma_q_init: its
	# symbol is made global in the compiled object so that oracle.c can trace it on its own.
	# The machine code is the unmodified file's; only the symbol's binding changes.
	objcopy --globalize-symbol=udma_q_reset "$obj/udma_udma_main.c.o"
	"$CC" -std=gnu11 -O0 -g -Wall -Wextra -Werror -c "$here/shim/kshim.c" -o "$obj/kshim.o"
	"$CC" "${cflags[@]}" -DORACLE_ARCH_$arch -I"$k/$arch" -c "$here/oracle.c" -o "$obj/oracle.o"
	# Functions of kmod files outside this list that the compiled files reference: each
	# becomes a function that stops the oracle with its name if a traced path ever calls it.
	"$here/unresolved.sh" "$obj" "${objs[@]}" "$obj/kshim.o" "$obj/oracle.o" > "$obj/unresolved.c"
	"$CC" -std=gnu11 -c "$obj/unresolved.c" -o "$obj/unresolved.o"
	"$CC" -o "$OUT/oracle-$arch" "${objs[@]}" "$obj/kshim.o" "$obj/oracle.o" "$obj/unresolved.o"
	echo "built $OUT/oracle-$arch from $k"
done
