#!/bin/sh
# Runs every test of the workspace on a fresh machine (Debian, root, Rust toolchain only).
# Installs what the tests need for the QEMU VFIO test (scripts/qemu/setup.sh, docs/qemu.md):
# busybox, a guest kernel built from Debian's linux-source-6.12, QEMU 11 from trixie-backports;
# cached machine-wide under /var/cache/neuron-vfio, so only the first run pays.
set -eu
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/qemu/setup.sh
if cargo fmt --version >/dev/null 2>&1; then
    cargo fmt --all -- --check
else
    echo "test-all: rustfmt is not installed; skipping the format check" >&2
fi
# libnrt.so without the simulator links no sim crate, and the select crate builds and passes
# its tests without it.
if cargo tree -p capi --no-default-features -e normal | grep -q ' sim v'; then
    echo "test-all: capi --no-default-features still links the sim crate" >&2
    exit 1
fi
cargo test -p select --no-default-features
cargo test --workspace --no-fail-fast
echo "test-all: done in $(( $(date +%s) - start )) s"
