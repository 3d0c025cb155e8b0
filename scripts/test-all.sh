#!/bin/sh
# Runs every test of the workspace on a fresh machine (Debian, root, Rust toolchain only).
# Installs what the tests need: QEMU, busybox and a guest kernel for the VFIO test
# (scripts/qemu/setup.sh; Ubuntu's kernel for the iommufd and no-IOMMU paths when its archive
# is reachable, else Debian's), and libfabric 2.1 for the fabric crate (scripts/fabric/setup.sh).
set -eu
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/qemu/setup.sh
scripts/fabric/setup.sh
if cargo fmt --version >/dev/null 2>&1; then
    cargo fmt --all -- --check
else
    echo "test-all: rustfmt is not installed; skipping the format check" >&2
fi
# The libfabric transport and `bench collectives` are cargo features (off by default so a
# fresh machine builds without libfabric); CI tests them in the same single invocation.
cargo test --workspace --no-fail-fast --features fabric/ofi,cli/fabric
echo "test-all: done in $(( $(date +%s) - start )) s"
