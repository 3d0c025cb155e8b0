#!/usr/bin/env bash
# Build a container for the device plugin's pods (docs/kubernetes.md, "The container image"):
# an OCI runtime bundle — a root filesystem and a config.json that crun or runc runs — from the
# release binaries, with no Docker daemon and nothing downloaded.
#
# Usage:
#   build-bundle.sh --out DIR [--from-target DIR] [--add SRC:DEST]... [--tar FILE]
#
#   --out DIR          the bundle: DIR/rootfs and DIR/config.json (an existing DIR is replaced)
#   --from-target DIR  take the built binaries and libnrt.so from a cargo profile directory
#                      (e.g. target/debug) instead of building release
#   --add SRC:DEST     also put file SRC in the image at DEST (absolute); an ELF program or
#                      library brings the shared libraries it loads
#   --tar FILE         also write the root filesystem as a tarball (one image layer: e.g.
#                      `umoci`/`buildah` can import it)
#
# The image: /opt/aws/neuron/{bin,lib,include} as scripts/install.sh lays them out for the Neuron
# SDK (neuron-vfio and the other CLI binaries, neuron-vfio-k8s-device-plugin, libnrt.so.1, the
# headers); the dynamic loader and every library ldd resolves for its programs, at their host
# paths; /etc/passwd and /etc/group with root; empty /dev, /proc, /sys, /tmp and
# /run/neuron-vfio (where Allocate mounts the broker's socket directory). No shell.
#
# config.json (OCI runtime spec 1.0): root uid 0, cwd /, PATH=/opt/aws/neuron/bin:/usr/bin:/bin,
# the runtime's default capabilities (CAP_AUDIT_WRITE, CAP_KILL, CAP_NET_BIND_SERVICE),
# no-new-privileges; pid, ipc, uts, mount and network namespaces; /proc, /dev (tmpfs),
# /dev/pts, /dev/shm, /tmp and /sys (read-only); the root file system read-only; no cgroup
# settings. process.args is `neuron-vfio --help`: the caller (a CRI, or k8s/tests/containers.rs)
# sets the command and adds the environment and mounts Allocate returned.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
die() { echo "build-bundle: $*" >&2; exit 1; }

out="" from="" tar="" adds=() added=()
while [ $# -gt 0 ]; do
    case $1 in
        --out) [ $# -ge 2 ] || die "--out needs a directory"; out=$2; shift 2 ;;
        --from-target) [ $# -ge 2 ] || die "--from-target needs a directory"; from=$2; shift 2 ;;
        --add) [ $# -ge 2 ] || die "--add needs SRC:DEST"; adds+=("$2"); shift 2 ;;
        --tar) [ $# -ge 2 ] || die "--tar needs a file"; tar=$2; shift 2 ;;
        -h | --help) usage; exit 0 ;;
        *) usage >&2; exit 2 ;;
    esac
done
[ -n "$out" ] || { usage >&2; exit 2; }
command -v ldd >/dev/null || die "no ldd (Debian: libc-bin)"

if [ -z "$from" ]; then
    (cd "$repo" && cargo build --release -p capi -p cli -p k8s)
    from=$repo/target/release
fi
[ -d "$from" ] || die "no target directory $from"
[ -f "$from/neuron-vfio" ] || die "no neuron-vfio in $from (cargo build -p cli)"

rm -rf "$out"
root=$out/rootfs
mkdir -p "$root"/{dev,proc,sys,tmp,etc,run/neuron-vfio,usr/bin}
prefix=/opt/aws/neuron
"$repo/scripts/install.sh" --prefix "$root$prefix" --from-target "$from" >/dev/null
# The pkg-config file names the prefix as the image sees it.
sed -i "s|^prefix=.*|prefix=$prefix|" "$root$prefix/lib/pkgconfig/nrt.pc"

for a in ${adds[@]+"${adds[@]}"}; do
    src=${a%%:*} dest=${a#*:}
    [ "$src" != "$a" ] && [ "${dest#/}" != "$dest" ] || die "--add $a: expected SRC:/ABSOLUTE/DEST"
    [ -f "$src" ] || die "--add $a: no file $src"
    mkdir -p "$root$(dirname "$dest")"
    cp -L "$src" "$root$dest"
    added+=("$root$dest")
done

# Every ELF in the image brings the libraries it loads (libnrt.so.1 resolves inside the image).
while IFS= read -r f; do
    head -c 4 "$f" | grep -q 'ELF' || continue
    deps=$(LD_LIBRARY_PATH=$root$prefix/lib ldd "$f" 2>&1) || continue # not dynamic
    if grep -q 'not found' <<<"$deps"; then
        die "$f: a library is not found:"$'\n'"$deps"
    fi
    grep -oE '/[^ )]+' <<<"$deps" | while IFS= read -r lib; do
        case $lib in "$root"/*) continue ;; esac
        [ -e "$root$lib" ] && continue
        mkdir -p "$root$(dirname "$lib")"
        cp -L "$lib" "$root$lib"
    done
done < <(find "$root" -type f)

# Debug info off the project's files (the image's size; symbols stay for backtraces).
if command -v strip >/dev/null; then
    { find "$root$prefix" -type f; printf '%s\n' ${added[@]+"${added[@]}"}; } | sort -u | while IFS= read -r f; do
        # (printf with no --add prints one empty line)
        [ -n "$f" ] || continue
        if head -c 4 "$f" | grep -q 'ELF'; then strip --strip-debug "$f"; fi
    done
fi

printf 'root:x:0:0:root:/:/usr/bin/false\n' >"$root/etc/passwd"
printf 'root:x:0:\n' >"$root/etc/group"

caps='"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"'
cat >"$out/config.json" <<EOF
{
  "ociVersion": "1.0.2",
  "process": {
    "terminal": false,
    "user": { "uid": 0, "gid": 0 },
    "args": ["$prefix/bin/neuron-vfio", "--help"],
    "env": ["PATH=$prefix/bin:/usr/bin:/bin"],
    "cwd": "/",
    "capabilities": {
      "bounding": [$caps], "effective": [$caps], "permitted": [$caps], "ambient": [$caps]
    },
    "rlimits": [{ "type": "RLIMIT_NOFILE", "hard": 1024, "soft": 1024 }],
    "noNewPrivileges": true
  },
  "root": { "path": "rootfs", "readonly": true },
  "hostname": "neuron-vfio",
  "mounts": [
    { "destination": "/proc", "type": "proc", "source": "proc" },
    { "destination": "/dev", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "strictatime", "mode=755", "size=65536k"] },
    { "destination": "/dev/pts", "type": "devpts", "source": "devpts", "options": ["nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"] },
    { "destination": "/dev/shm", "type": "tmpfs", "source": "shm", "options": ["nosuid", "noexec", "nodev", "mode=1777", "size=65536k"] },
    { "destination": "/tmp", "type": "tmpfs", "source": "tmpfs", "options": ["nosuid", "nodev", "mode=1777"] },
    { "destination": "/sys", "type": "sysfs", "source": "sysfs", "options": ["nosuid", "noexec", "nodev", "ro"] }
  ],
  "linux": {
    "namespaces": [{ "type": "pid" }, { "type": "ipc" }, { "type": "uts" }, { "type": "mount" }, { "type": "network" }],
    "maskedPaths": ["/proc/acpi", "/proc/kcore", "/proc/keys", "/proc/latency_stats", "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"],
    "readonlyPaths": ["/proc/asound", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"]
  }
}
EOF

if [ -n "$tar" ]; then
    tar -C "$root" --numeric-owner -cf "$tar" .
fi
echo "build-bundle: $(find "$root" -type f | wc -l) files, $(du -sh "$root" | cut -f1) in $out"
