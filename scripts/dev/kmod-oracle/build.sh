#!/usr/bin/env bash
# Build the kmod oracle: the public Neuron kernel module's register-programming files,
# compiled unmodified as a userspace program against this folder's shim (shim/kshim.h,
# shim/kshim.c) and driven by oracle.c. See README.md.
#
#   KMOD_DIR=/path/to/aws-neuron-driver scripts/dev/kmod-oracle/build.sh   # -> $OUT/oracle-v2, oracle-v3
#
# KMOD_DIR must be a git checkout of aws-neuron/aws-neuron-driver at $KMOD_COMMIT (the pin
# below); OUT defaults to target/kmod-oracle. Nothing of the kmod is copied into this tree.
set -euo pipefail

here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../../.." && pwd)"
KMOD_COMMIT_PIN="$(cat "$here/KMOD_COMMIT")"
: "${KMOD_DIR:?set KMOD_DIR to a checkout of aws-neuron/aws-neuron-driver (README.md)}"
OUT="${OUT:-$root/target/kmod-oracle}"
CC="${CC:-gcc}"

got="$(git -C "$KMOD_DIR" rev-parse HEAD 2>/dev/null || true)"
if [ "$got" != "$KMOD_COMMIT_PIN" ]; then
	echo "KMOD_DIR $KMOD_DIR is at '${got:-not a git checkout}', the oracle is pinned to $KMOD_COMMIT_PIN" >&2
	echo "  git -C \$KMOD_DIR checkout $KMOD_COMMIT_PIN   (or set KMOD_COMMIT_PIN in $here/KMOD_COMMIT after regenerating)" >&2
	exit 1
fi
if [ -n "$(git -C "$KMOD_DIR" status --porcelain --untracked-files=no)" ]; then
	echo "KMOD_DIR has local modifications: the oracle compiles the kmod files unmodified" >&2
	exit 1
fi

# The kernel headers the kmod files include, each a one-line file that includes kshim.h.
inc="$OUT/include"
rm -rf "$inc"
mkdir -p "$inc"
for h in $(cd "$KMOD_DIR" && grep -ho '^#include <\(linux\|asm\|trace\)/[^>]*>' $(git ls-files '*.c' '*.h') | sed 's/.*<\(.*\)>/\1/' | sort -u); do
	mkdir -p "$inc/$(dirname "$h")"
	echo '#include "kshim.h"' > "$inc/$h"
done

# Files compiled per arch. v2 and v3 each define their own address map, so each arch is
# one program.
common=(udma/udma_main.c udma/udma_m2m.c udma/udma_iofic.c neuron_ring.c neuron_dma.c neuron_nq.c neuron_core.c vc/neuron_dhal_vc.c
	neuron_reset.c neuron_fw_io.c neuron_topsp.c neuron_dhal.c neuron_reg_access.c neuron_arch.c)
declare -A arch_files=(
	[v2]="v2/neuron_dhal_v2.c v2/notific.c"
	[v3]="v3/neuron_dhal_v3.c v3/notific.c"
)
cflags=(-std=gnu11 -fgnu89-inline -O0 -g -w -fno-strict-aliasing -fcommon -D__KERNEL__ -include "$here/shim/kshim.h"
	-I"$here/shim" -I"$inc" -I"$KMOD_DIR" -I"$KMOD_DIR/udma")

for arch in v2 v3; do
	obj="$OUT/$arch"
	rm -rf "$obj"
	mkdir -p "$obj"
	objs=()
	for f in "${common[@]}" ${arch_files[$arch]}; do
		o="$obj/$(echo "$f" | tr / _).o"
		dir="$(dirname "$f")"
		"$CC" "${cflags[@]}" -I"$KMOD_DIR/$dir" -c "$KMOD_DIR/$f" -o "$o"
		objs+=("$o")
	done
	# The kmod's queue reset (udma_q_reset) is static, reached only inside udma_q_init: its
	# symbol is made global in the compiled object so that oracle.c can trace it on its own.
	# The machine code is the unmodified file's; only the symbol's binding changes.
	objcopy --globalize-symbol=udma_q_reset "$obj/udma_udma_main.c.o"
	"$CC" -std=gnu11 -O0 -g -Wall -Wextra -Werror -c "$here/shim/kshim.c" -o "$obj/kshim.o"
	"$CC" "${cflags[@]}" -DORACLE_ARCH_$arch -I"$KMOD_DIR/$arch" -c "$here/oracle.c" -o "$obj/oracle.o"
	# Functions of kmod files outside this list that the compiled files reference: each
	# becomes a function that stops the oracle with its name if a traced path ever calls it.
	"$here/unresolved.sh" "$obj" "${objs[@]}" "$obj/kshim.o" "$obj/oracle.o" > "$obj/unresolved.c"
	"$CC" -std=gnu11 -c "$obj/unresolved.c" -o "$obj/unresolved.o"
	"$CC" -o "$OUT/oracle-$arch" "${objs[@]}" "$obj/kshim.o" "$obj/oracle.o" "$obj/unresolved.o"
done
echo "built $OUT/oracle-v2 $OUT/oracle-v3 from $KMOD_DIR@$KMOD_COMMIT_PIN"
