#!/usr/bin/env bash
# Prints the path of a usable qemu-system-x86_64, obtaining one if needed, without installing or
# removing any package on the machine:
#   1. $PVRDMA_QEMU if set, else a qemu-system-x86_64 on PATH;
#   2. else Debian bookworm's qemu-system-x86, its firmware (seabios, qemu-system-data), its TCG
#      module (qemu-system-common) and the
#      shared libraries it needs that the machine lacks (resolved from the package metadata:
#      Depends/Pre-Depends of the "libs" section), downloaded with `apt-get download`, unpacked
#      with dpkg-deb under <target>/peer/qemu/root and started by the wrapper
#      <target>/peer/qemu/bin/qemu-system-x86_64 (LD_LIBRARY_PATH, module dir and -L firmware
#      path set). Cached: a later run finds the wrapper working and prints it.
# Why not `apt-get install qemu-system-x86`: on this image qemu-utils comes from backports and
# bookworm's qemu-system-common breaks it, so apt would remove it.
# The emulator is used under TCG (no KVM here); no ipxe-qemu: give each NIC `romfile=`.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tools/peer/lib.sh
. "$here/lib.sh"

if [ -n "${PVRDMA_QEMU:-}" ]; then
    "$PVRDMA_QEMU" --version >/dev/null || peer_die "PVRDMA_QEMU=$PVRDMA_QEMU does not run"
    printf '%s\n' "$PVRDMA_QEMU"
    exit 0
fi
if found=$(command -v qemu-system-x86_64); then
    printf '%s\n' "$found"
    exit 0
fi

peer_use_target
cache=$peer_target/peer/qemu
wrapper=$cache/bin/qemu-system-x86_64
if [ -x "$wrapper" ] && "$wrapper" --version >/dev/null 2>&1; then
    printf '%s\n' "$wrapper"
    exit 0
fi

peer_apt_ready
mapfile -t pkgs < <(peer_closure yes qemu-system-x86 qemu-system-data seabios)
# qemu-system-common carries the TCG accelerator (a module, accel-tcg-x86_64.so). Its own
# dependencies serve the other modules (spice, OpenGL, audio, USB), which a headless test
# never loads, so they are not followed.
peer_installed qemu-system-common || pkgs+=(qemu-system-common)
mapfile -t pvs < <(peer_versions "${pkgs[@]}")
peer_log "qemu: ${pvs[*]}"
peer_download "$cache/debs" "${pvs[@]}"
debs=()
for pv in "${pvs[@]}"; do
    debs+=("$(peer_deb_path "$cache/debs" "$pv")")
done

rm -rf "${cache:?}/root.new" "${cache:?}/bin"
peer_unpack "$cache/root.new" "${debs[@]}"
rm -rf "$cache/root"
mv "$cache/root.new" "$cache/root"
root=$cache/root
mkdir -p "$cache/bin"
cat >"$wrapper.new" <<WRAP
#!/bin/sh
# Debian bookworm's qemu-system-x86_64 unpacked privately by tools/peer/qemu.sh.
export LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}"
export QEMU_MODULE_DIR="$root/usr/lib/x86_64-linux-gnu/qemu"
exec "$root/usr/bin/qemu-system-x86_64" -L "$root/usr/share/qemu" -L "$root/usr/share/seabios" "\$@"
WRAP
chmod +x "$wrapper.new"
for elf in "$root/usr/bin/qemu-system-x86_64" "$root/usr/lib/x86_64-linux-gnu/qemu/accel-tcg-x86_64.so"; do
    if lacking=$(LD_LIBRARY_PATH="$root/usr/lib/x86_64-linux-gnu" ldd "$elf" | grep 'not found'); then
        peer_die "$elf still lacks libraries: $lacking"
    fi
done
"$wrapper.new" --version >&2 || peer_die "the unpacked qemu-system-x86_64 does not run"
mv "$wrapper.new" "$wrapper"
printf '%s\n' "$wrapper"
