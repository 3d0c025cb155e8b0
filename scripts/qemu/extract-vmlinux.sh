#!/usr/bin/env bash
# Print the uncompressed ELF vmlinux held in a bzImage (xz, zstd or gzip payload).
#   extract-vmlinux.sh /boot/vmlinuz-X > vmlinux
set -euo pipefail
img=$1
tmp=$(mktemp); trap 'rm -f "$tmp"' EXIT
is_elf() { [ "$(head -c 4 "$1" | od -An -tx1 | tr -d ' \n')" = 7f454c46 ]; }
try() { # magic (grep -P form), decompressor
    local off
    for off in $(LC_ALL=C grep -aboP "$1" "$img" | cut -d: -f1); do
        tail -c +"$((off + 1))" "$img" | $2 > "$tmp" 2>/dev/null || true
        if [ -s "$tmp" ] && is_elf "$tmp"; then cat "$tmp"; return 0; fi
    done
    return 1
}
try '\xfd7zXZ\x00' 'xz -dc' || try '\x28\xb5\x2f\xfd' 'zstd -dc' || try '\x1f\x8b\x08' 'gzip -dc' || {
    echo "extract-vmlinux: no known payload in $img" >&2; exit 1; }
