#!/usr/bin/env bash
# Links the driver image without the WDK: target/sys/{debug,release}/pvrdma_ndk.sys (+ .map).
# Usage: tools/build-sys.sh [debug|release]   (default release). docs/BUILD.md explains it.
set -euo pipefail
cd "$(dirname "$0")/.."
profile=${1:-release}
case "$profile" in
    debug) cargo_profile=(); dir=debug ;;
    release) cargo_profile=(--release); dir=release ;;
    *) echo "usage: $0 [debug|release]" >&2; exit 2 ;;
esac
target=x86_64-pc-windows-msvc
# `cargo rustc --crate-type cdylib` builds the library as a cdylib only, so cargo hands the
# profile's LTO to it (with the manifest's cdylib+rlib it would not: windows-link.md §1).
cargo rustc --lib --crate-type cdylib "${cargo_profile[@]}" --target "$target" \
    --config .cargo/sys-link.toml
target_dir=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
out=$target_dir/sys/$dir
mkdir -p "$out"
cp "$target_dir/$target/$dir/pvrdma_ndk.dll" "$out/pvrdma_ndk.sys"
if [ -f "$target_dir/$target/$dir/deps/pvrdma_ndk.map" ]; then
    cp "$target_dir/$target/$dir/deps/pvrdma_ndk.map" "$out/pvrdma_ndk.map"
fi
printf '%s %s bytes\n' "$out/pvrdma_ndk.sys" "$(stat -c %s "$out/pvrdma_ndk.sys")"
