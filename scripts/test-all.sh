#!/bin/sh
# Runs every test of the workspace on a fresh machine (Debian, root, Rust toolchain only).
# Installs what the tests need, cached machine-wide under /var/cache/neuron-vfio so only the
# first run on a machine pays:
# - the QEMU VFIO test (scripts/qemu/setup.sh, docs/qemu.md): busybox, a guest kernel built
#   from Debian's linux-source-6.12, QEMU 11 from trixie-backports;
# - libfabric 2.1 for the fabric crate (scripts/fabric/setup.sh, docs/fabric.md);
# - valgrind for the C ABI tests (they run the C programs under it when it is installed).
set -eu
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/qemu/setup.sh
scripts/fabric/setup.sh
if ! command -v valgrind >/dev/null 2>&1; then
    echo "test-all: installing valgrind" >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends valgrind >/dev/null
fi
if ! cargo fmt --version >/dev/null 2>&1; then
    rustup component add rustfmt
fi
cargo fmt --all -- --check
# libnrt.so without the simulator links no sim crate (a dependency-graph check: no second
# compile; `cargo test -p select --no-default-features` exercises the no-simulator build).
if cargo tree -p capi --no-default-features -e normal | grep -q ' sim v'; then
    echo "test-all: capi --no-default-features still links the sim crate" >&2
    exit 1
fi
# The libfabric transport and `bench collectives` are cargo features (off by default so a
# fresh machine builds without libfabric); CI tests them in the same single invocation.
cargo test --workspace --no-fail-fast --features fabric/ofi,cli/fabric,capi/fabric
echo "test-all: done in $(( $(date +%s) - start )) s"
