#!/bin/sh
# Runs every test of the workspace on a fresh machine (Debian, root, Rust toolchain only).
# Installs what the tests need (QEMU, busybox, a Debian kernel for the VFIO guest test).
set -eu
cd "$(dirname "$0")/.."
start=$(date +%s)
if [ -x scripts/qemu/setup.sh ]; then
    scripts/qemu/setup.sh
fi
cargo fmt --all -- --check
cargo test --workspace --no-fail-fast
echo "test-all: done in $(( $(date +%s) - start )) s"
