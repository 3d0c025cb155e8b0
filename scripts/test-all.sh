#!/bin/sh
# Runs every test of the workspace on a fresh machine (Debian 12, root, Rust toolchain only).
# Installs what the tests need — nothing is assumed of the host beyond Debian's minimal base
# (scripts/dev/clean-room-ci.sh proves it in such a root) — cached machine-wide under
# /var/cache/neuron-vfio so only the first run on a machine pays:
# - the host tools the tests and scripts call, from the host's Debian archive, when missing:
#   the C toolchain (gcc, g++, libc6-dev, make, binutils: cc, c++, nm, strip), pkg-config,
#   python3 and python3-venv, strace, valgrind (the C ABI tests run their programs under it), git,
#   xz-utils, cmake (tests/tests/sdk_install.rs builds tests/cmake/ against an installed prefix),
#   openmpi-bin (capi/tests/launchers.rs starts a libnrt job with mpirun; it also brings
#   Debian's libfabric1, which fabric/tests/ranks.rs runs the transport on), iproute2 (the
#   two-host test's network namespaces) and crun (k8s/tests/containers.rs runs the device
#   plugin's pods in containers with it; docs/kubernetes.md);
# - the QEMU VFIO test (scripts/qemu/setup.sh, docs/qemu.md): busybox, a guest kernel built
#   from Debian's linux-source-6.12, QEMU 11 from trixie-backports in a private root that
#   finds its firmware only there;
# - libfabric 2.1 (scripts/fabric/setup.sh, docs/fabric.md): the transport opens it at run
#   time (the build needs no libfabric); its headers check the transport's ABI declarations;
# - rustfmt and clippy (rustup components), which CI runs before the tests;
# - for the nrtpy Python package's tests (docs/python.md), after the cargo tests: a virtual
#   environment in target/nrtpy-venv with maturin, numpy, ml_dtypes and pytest from PyPI.
set -eu
cd "$(dirname "$0")/.."
start=$(date +%s)
need=""
for p in gcc g++ libc6-dev make binutils pkg-config python3 python3-venv strace valgrind git xz-utils \
    ca-certificates cmake openmpi-bin iproute2 crun; do
    dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$' || need="$need $p"
done
if [ -n "$need" ]; then
    echo "test-all: installing$need" >&2
    apt-get update -qq
    # shellcheck disable=SC2086 # a word list
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends --no-upgrade $need >/dev/null
fi
scripts/qemu/setup.sh
scripts/fabric/setup.sh
cargo fmt --version >/dev/null 2>&1 || rustup component add rustfmt
cargo clippy --version >/dev/null 2>&1 || rustup component add clippy
cargo fmt --all -- --check
# libnrt.so without the simulator links no sim crate (a dependency-graph check: no second
# compile; `cargo test -p select --no-default-features` exercises the no-simulator build).
if cargo tree -p capi --no-default-features -e normal | grep -q ' sim v'; then
    echo "test-all: capi --no-default-features still links the sim crate" >&2
    exit 1
fi
# The libfabric transport, `bench collectives` and libnrt's global communicator are in the
# default build (libfabric is opened at run time): no feature list.
# Lints on everything CI builds (the workspace's lint table: undocumented_unsafe_blocks, …):
# a check, not a second build profile (build scripts and proc macros are shared with the tests).
cargo clippy --workspace --all-targets -- -D warnings
cargo test --workspace --no-fail-fast
# The nrtpy package (docs/python.md): maturin builds the wheel with the test profile into the
# same target directory (what the tests built is reused; pyo3 and the crate compile again under
# maturin's environment), pip installs it, pytest runs its suite on the simulator.
venv=target/nrtpy-venv
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip install -q --disable-pip-version-check maturin numpy ml_dtypes pytest
rm -rf target/nrtpy-wheels
"$venv/bin/maturin" build -q --profile dev -m nrtpy/Cargo.toml -i "$venv/bin/python" -o target/nrtpy-wheels
"$venv/bin/python" -m pip install -q --disable-pip-version-check --force-reinstall --no-deps target/nrtpy-wheels/nrtpy-*.whl
PYTHONDONTWRITEBYTECODE=1 "$venv/bin/python" -m pytest -q -p no:cacheprovider nrtpy/tests
echo "test-all: done in $(( $(date +%s) - start )) s"
