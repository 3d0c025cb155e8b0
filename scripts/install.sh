#!/usr/bin/env bash
# Install libnrt.so.1, its headers, the CLI and a pkg-config file in the Neuron SDK's layout,
# where programs and build systems written for the SDK look (docs/sdk.md).
#
# Usage:
#   install.sh [--prefix DIR] [--from-target DIR]
#
#   --prefix DIR        where to install (default: $NEURON_ROOT, else /opt/aws/neuron)
#   --from-target DIR   take the already-built libnrt.so and binaries from a cargo target
#                       profile directory (e.g. target/debug) instead of building release
#
# Without --from-target it runs `cargo build --release -p capi -p cli -p k8s` first. It lays out:
#   DIR/lib/libnrt.so.1             the library (SONAME libnrt.so.1)
#   DIR/lib/libnrt.so -> libnrt.so.1
#   DIR/include/nrt/*.h, DIR/include/ndl/*   libnrt's public headers
#   DIR/bin/*                       every binary of the cli package, and the k8s package's
#                                   neuron-vfio-k8s-device-plugin (docs/kubernetes.md)
#   DIR/lib/pkgconfig/nrt.pc        Libs: -L${libdir} -lnrt, Cflags: -I${includedir}
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "install: $*" >&2; exit 1; }

prefix=${NEURON_ROOT:-/opt/aws/neuron}
from=""
while [ $# -gt 0 ]; do
    case $1 in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a directory"; prefix=$2; shift 2 ;;
        --prefix=*) prefix=${1#--prefix=}; shift ;;
        --from-target) [ $# -ge 2 ] || die "--from-target needs a directory"; from=$2; shift 2 ;;
        --from-target=*) from=${1#--from-target=}; shift ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
[ -n "$prefix" ] || die "empty prefix"

# The cli package's binaries (its [[bin]] targets and the ones cargo discovers in src/bin/) and
# the k8s package's [[bin]] targets.
bins() {
    {
        awk '/^\[\[bin\]\]/ { b = 1; next } /^\[/ { b = 0 }
             b && $1 == "name" { v = $0; sub(/^[^=]*= *"/, "", v); sub(/".*$/, "", v); print v }' \
            "$repo/cli/Cargo.toml" "$repo/k8s/Cargo.toml"
        for f in "$repo"/cli/src/bin/*.rs; do [ -f "$f" ] && basename "$f" .rs; done
        for f in "$repo"/cli/src/bin/*/main.rs; do [ -f "$f" ] && basename "$(dirname "$f")"; done
    } | sort -u
}

if [ -z "$from" ]; then
    (cd "$repo" && cargo build --release -p capi -p cli -p k8s)
    from=$repo/target/release
fi
[ -d "$from" ] || die "no target directory $from"
lib=""
for l in "$from/libnrt.so" "$from/deps/libnrt.so"; do
    if [ -f "$l" ]; then lib=$l; break; fi
done
[ -n "$lib" ] || die "no libnrt.so in $from (cargo build -p capi)"
version=$(awk '/^\[workspace.package\]/ { p = 1; next } /^\[/ { p = 0 }
               p && $1 == "version" { v = $0; sub(/^[^=]*= *"/, "", v); sub(/".*$/, "", v); print v; exit }' \
          "$repo/Cargo.toml")
[ -n "$version" ] || die "no workspace version in Cargo.toml"

# What there is to install, checked before anything is written.
built=()
while IFS= read -r b; do
    if [ -f "$from/$b" ]; then
        built+=("$b")
    else
        echo "install: $b is not built in $from: skipped" >&2
    fi
done < <(bins)
[ ${#built[@]} -gt 0 ] || die "no cli binary in $from"

mkdir -p "$prefix/lib/pkgconfig" "$prefix/include/nrt" "$prefix/include/ndl" "$prefix/bin"
install -m 0755 "$lib" "$prefix/lib/libnrt.so.1"
ln -sfn libnrt.so.1 "$prefix/lib/libnrt.so"
install -m 0644 "$repo"/capi/include/nrt/*.h "$prefix/include/nrt/"
install -m 0644 "$repo"/capi/include/ndl/* "$prefix/include/ndl/"
for b in "${built[@]}"; do
    install -m 0755 "$from/$b" "$prefix/bin/$b"
done
n=${#built[@]}
abs=$(cd "$prefix" && pwd)
cat > "$prefix/lib/pkgconfig/nrt.pc" <<EOF
prefix=$abs
libdir=\${prefix}/lib
includedir=\${prefix}/include

Name: nrt
Description: Neuron runtime C API (libnrt) of neuron-vfio
Version: $version
Libs: -L\${libdir} -lnrt
Cflags: -I\${includedir}
EOF
echo "install: libnrt.so.1, headers, $n binaries and lib/pkgconfig/nrt.pc in $abs"
