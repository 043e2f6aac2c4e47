#!/usr/bin/env bash
# Builds the SMB Direct image of the Linux peer (docs/PEER.md, "SMB Direct"): the guest image of
# build-guest.sh plus
#   - ksmbd.ko with CONFIG_SMB_SERVER_SMBDIRECT=y and cifs.ko with CONFIG_CIFS_SMB_DIRECT=y,
#     built here from Debian's linux-source-<M.m> of the guest kernel's exact version against
#     the matching linux-headers/linux-kbuild (Debian ships both modules with SMB Direct off),
#     only those two directories (make M=...), never the kernel; with tools/peer/patches/*.patch
#     applied (6.1's ksmbd oopses on the first open without the opinfo_put NULL check);
#   - the stock modules they and their crypto need (hmac/md5 for NTLMv2, cmac/ccm/gcm/aes for
#     SMB3 signing and encryption, sha512 for 3.1.1's preauth integrity) and a new modules.dep;
#   - ksmbd-tools from bookworm-backports (3.5.2: bookworm's 3.4.7 does not match 6.1's IPC
#     message validation, every share fails), resolved through a private apt state under the
#     target directory (the machine's sources are not touched), with its shared libraries;
#   - tools/peer/ksmbd-start as /usr/bin/ksmbd-start (modules, a user, a share, the daemon).
# Everything comes from Debian's packages, downloaded with apt-get download and unpacked
# privately. The build machine needs gcc-12 (the compiler Debian built the kernel with), make
# and xz. The result, <target>/peer/smbd/<key>/{vmlinux,initrd.img,manifest.txt}, is keyed by
# the base image's key, these scripts, the patches and every package version; a rerun with the
# same inputs prints it at once. <target>/peer/smbd/current points at the last one built.
# Prints that directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tools/peer/lib.sh
. "$here/lib.sh"

started=$(date +%s)
peer_use_target
base=$("$here/build-guest.sh")
out_root=$peer_target/peer/smbd
debs_dir=$peer_target/peer/debs

base_key=$(awk '/^key /{print $2}' "$base/manifest.txt")
kver=$(awk '/^kernel /{print $2}' "$base/manifest.txt")
kernel_pv=$(awk -v p="linux-image-$kver=" 'index($2, p) == 1 {print $2}' "$base/manifest.txt")
if [ -z "$kver" ] || [ -z "$kernel_pv" ]; then
    peer_die "no kernel in $base/manifest.txt"
fi
kernel_version=${kernel_pv#*=}
series=$(printf '%s\n' "$kver" | cut -d. -f1-2) # 6.1
abi=${kver%-*}                                   # 6.1.0-57
kpkgs=("linux-source-$series=$kernel_version" "linux-headers-$kver=$kernel_version"
    "linux-headers-$abi-common=$kernel_version" "linux-kbuild-$series=$kernel_version"
    "$kernel_pv")
# ksmbd-tools' libraries come from bookworm (backports builds against the stable release).
tool_libs=(libglib2.0-0 libnl-3-200 libnl-genl-3-200)

# bookworm-backports through a private apt state: its own sources list and package lists.
bpo=$peer_target/peer/apt-backports
bpo_apt=(-o Dir::Etc::SourceList="$bpo/sources.list" -o Dir::Etc::SourceParts=/dev/null
    -o Dir::State::Lists="$bpo/lists" -o Dir::Cache::pkgcache="$bpo/pkgcache.bin"
    -o Dir::Cache::srcpkgcache="$bpo/srcpkgcache.bin" -o APT::Sandbox::User=root)
bpo_ready() {
    mkdir -p "$bpo/lists/partial"
    printf 'deb [signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] %s bookworm-backports main\n' \
        "${PVRDMA_PEER_DEBIAN_MIRROR:-http://deb.debian.org/debian}" >"$bpo/sources.list"
    if [ ! -s "$bpo/stamp" ] || ! apt-cache "${bpo_apt[@]}" show ksmbd-tools >/dev/null 2>&1; then
        peer_log "apt-get update of bookworm-backports (private lists in $bpo)"
        apt-get -q "${bpo_apt[@]}" update >/dev/null || peer_die "apt-get update of bookworm-backports failed"
        date +%s >"$bpo/stamp"
    fi
}

lists_state=$({
    cat "$here/build-smbd.sh" "$here/lib.sh"
    printf '%s\n' "$base_key"
    stat -c '%n %s %Y' /var/lib/apt/lists/*Packages* 2>/dev/null || true
} | sha256sum | cut -c1-16)
resolved=$out_root/resolved/$lists_state
if [ ! -s "$resolved" ]; then
    peer_apt_ready
    bpo_ready
    tools_pv=$(apt-cache "${bpo_apt[@]}" show --no-all-versions ksmbd-tools |
        awk '/^Version: /{print "ksmbd-tools=" $2; exit}')
    case $tools_pv in
    ksmbd-tools=3.[5-9]* | ksmbd-tools=[4-9]*) ;;
    *) peer_die "bookworm-backports offers $tools_pv; ksmbd needs ksmbd-tools >= 3.5" ;;
    esac
    mapfile -t libs < <(peer_closure no "${tool_libs[@]}")
    mapfile -t lib_pvs < <(peer_versions "${libs[@]}")
    ((${#lib_pvs[@]} == ${#libs[@]})) || peer_die "apt-cache has no candidate for some of: ${libs[*]}"
    mkdir -p "$out_root/resolved"
    printf '%s\n' "$tools_pv" "${kpkgs[@]}" "${lib_pvs[@]}" >"$resolved.new"
    mv "$resolved.new" "$resolved"
fi
mapfile -t pvs <"$resolved"
tools_pv=${pvs[0]}

key=$({
    cat "$here/build-smbd.sh" "$here/lib.sh" "$here/ksmbd-start"
    for f in "$here"/patches/*.patch; do
        printf '%s\n' "${f##*/}"
        cat "$f"
    done
    printf '%s\n' "$base_key" "${pvs[@]}"
} | sha256sum | cut -c1-16)
out=$out_root/$key
if [ -f "$out/initrd.img" ] && [ -f "$out/vmlinux" ]; then
    ln -sfn "$key" "$out_root/current"
    printf '%s\n' "$out"
    exit 0
fi

peer_log "building the SMB Direct image $key (kernel $kver, $tools_pv)"
for tool in gcc-12 make xz patch strip; do
    command -v "$tool" >/dev/null || peer_die "no $tool on this machine (apt-get install gcc-12 make xz-utils patch binutils)"
done
peer_download "$debs_dir" "${pvs[@]:1}"
if ! peer_deb_path "$debs_dir" "$tools_pv" >/dev/null; then
    bpo_ready
    (cd "$debs_dir" && apt-get download -q "${bpo_apt[@]}" "$tools_pv" >/dev/null) ||
        peer_die "apt-get download $tools_pv from bookworm-backports failed"
fi
deb_of() { peer_deb_path "$debs_dir" "$1" || peer_die "no .deb for $1"; }

work=$out_root/build.$$
trap 'rm -rf "$work"' EXIT
rm -rf "$work"
mkdir -p "$work"

# The two modules, cached apart from the image (keyed by the kernel packages, the patches and
# the recipe's revision: bump modules_rev when the build below changes), so a change to the
# image's other contents does not compile them again.
modules_rev=1
modkey=$({
    printf '%s\n' "$modules_rev" "${kpkgs[@]}"
    for f in "$here"/patches/*.patch; do
        printf '%s\n' "${f##*/}"
        cat "$f"
    done
} | sha256sum | cut -c1-16)
mods=$out_root/modules/$modkey
if [ ! -f "$mods/ksmbd.ko" ] || [ ! -f "$mods/cifs.ko" ]; then
    # ---- the kernel build tree: headers and kbuild, private (their Makefile names /usr/src)
    kroot=$work/kroot
    for pv in "linux-headers-$kver=$kernel_version" "linux-headers-$abi-common=$kernel_version" \
        "linux-kbuild-$series=$kernel_version"; do
        dpkg-deb -x "$(deb_of "$pv")" "$kroot"
    done
    kdir=$kroot/usr/src/linux-headers-$kver
    sed -i "s|^include /usr/src/|include $kroot/usr/src/|" "$kdir/Makefile"
    grep -q "^include $kroot/" "$kdir/Makefile" || peer_die "unexpected $kdir/Makefile"

    # ---- the sources: fs/smb, fs/internal.h (ksmbd's vfs.c includes it) and the ASN.1 compiler,
    # which linux-kbuild does not ship (both modules have .asn1 grammars)
    src=$work/src
    mkdir -p "$src"
    dpkg-deb --fsys-tarfile "$(deb_of "linux-source-$series=$kernel_version")" |
        tar -xO "./usr/src/linux-source-$series.tar.xz" | xz -dc |
        tar -x -C "$src" --strip-components=1 "linux-source-$series/fs/smb" \
            "linux-source-$series/fs/internal.h" "linux-source-$series/scripts/asn1_compiler.c" \
            "linux-source-$series/include/linux/asn1_ber_bytecode.h" \
            "linux-source-$series/include/linux/asn1.h" ||
        peer_die "cannot unpack fs/smb from linux-source-$series"
    gcc-12 -O2 -I"$src/include" -o "$kroot/usr/lib/linux-kbuild-$series/scripts/asn1_compiler" \
        "$src/scripts/asn1_compiler.c" || peer_die "cannot build asn1_compiler"
    for p in "$here"/patches/*.patch; do
        [ -f "$p" ] || continue
        patch -d "$src" -p1 --forward --quiet <"$p" || peer_die "patch ${p##*/} does not apply"
    done

    # CONFIG_* on make's command line picks the objects; the same as -D makes the C see them
    # (the headers' autoconf.h has both off).
    build_module() { # DIR OPTION...
        local dir=$1 opt defs=()
        shift
        for opt in "$@"; do
            defs+=("-D${opt%%=*}=1")
        done
        make -s -C "$kdir" M="$src/fs/smb/$dir" "$@" KCFLAGS="${defs[*]}" CC=gcc-12 \
            -j"$(nproc)" modules >"$work/make-$dir.log" 2>&1 ||
            {
                tail -30 "$work/make-$dir.log" >&2
                peer_die "make M=fs/smb/$dir failed"
            }
    }
    peer_log "make M=fs/smb/server (ksmbd, SMB Direct on)"
    build_module server CONFIG_SMB_SERVER=m CONFIG_SMB_SERVER_SMBDIRECT=y
    peer_log "make M=fs/smb/client (cifs, SMB Direct on)"
    # The stock cifs options (.config) plus SMB Direct.
    build_module client CONFIG_CIFS=m CONFIG_CIFS_SMB_DIRECT=y CONFIG_CIFS_XATTR=y \
        CONFIG_CIFS_UPCALL=y CONFIG_CIFS_DFS_UPCALL=y CONFIG_CIFS_FSCACHE=y CONFIG_CIFS_POSIX=y \
        CONFIG_CIFS_STATS2=y CONFIG_CIFS_DEBUG=y CONFIG_CIFS_ALLOW_INSECURE_LEGACY=y
    for m in server/ksmbd client/cifs; do
        [ -f "$src/fs/smb/$m.ko" ] || peer_die "no $m.ko"
        # The headers' .config has DEBUG_INFO on: 10x the module without it, in every boot.
        strip --strip-debug "$src/fs/smb/$m.ko" || peer_die "strip --strip-debug $m.ko"
    done
    vermagic=$(modinfo -F vermagic "$src/fs/smb/server/ksmbd.ko" 2>/dev/null ||
        strings "$src/fs/smb/server/ksmbd.ko" | sed -n 's/^vermagic=//p')
    case $vermagic in "$kver "*) ;; *) peer_die "ksmbd.ko's vermagic is '$vermagic', not $kver" ;; esac
    mkdir -p "$mods.new"
    cp "$src/fs/smb/server/ksmbd.ko" "$src/fs/smb/client/cifs.ko" "$mods.new/"
    printf '%s\n' "$vermagic" >"$mods.new/vermagic"
    rm -rf "$mods"
    mv "$mods.new" "$mods"
fi
vermagic=$(cat "$mods/vermagic")

# ---- the image: the base image's tree, plus the modules, the tools and their libraries
bbroot=$work/bb
busybox_pv=$(awk '/^package busybox-static=/{print substr($2, 1)}' "$base/manifest.txt")
[ -n "$busybox_pv" ] || peer_die "no busybox-static in $base/manifest.txt"
peer_unpack "$bbroot" "$(deb_of "$busybox_pv")"
bb=$bbroot/usr/bin/busybox
img=$work/image
mkdir -p "$img"
(cd "$img" && "$bb" cpio -i -d -m <"$base/initrd.img" 2>/dev/null) || peer_die "cannot unpack $base/initrd.img"
[ -x "$img/init" ] || peer_die "$base/initrd.img has no /init"

pkgroot=$work/pkgroot
lib_debs=()
for pv in "${pvs[@]:6}"; do
    lib_debs+=("$(deb_of "$pv")")
done
peer_unpack "$pkgroot" "$(deb_of "$kernel_pv")" "$(deb_of "$tools_pv")" "${lib_debs[@]}"

kmods=/usr/lib/modules/$kver
cp "$mods/ksmbd.ko" "$pkgroot$kmods/kernel/fs/smb/server/ksmbd.ko"
cp "$mods/cifs.ko" "$pkgroot$kmods/kernel/fs/smb/client/cifs.ko"
"$bb" depmod -b "$pkgroot" "$kver" || peer_die "depmod of the module tree failed"
declare -A mod_path=()
while IFS=: read -r path deps; do
    m=${path##*/}
    m=${m%.ko}
    mod_path[${m//-/_}]="$path $deps"
done <"$pkgroot$kmods/modules.dep"
# What ksmbd-start loads. The crypto is allocated by name at run time (crypto_alloc_*), so no
# symbol dependency brings it: each module here that the kernel does not have built in.
smbd_modules=(ksmbd cifs)
crypto=(md4 md5 hmac sha256_generic sha512_generic cmac ccm gcm ctr ghash_generic aes_generic
    aesni_intel ecb cbc des_generic libdes arc4 cifs_arc4 cifs_md4 crc32c_generic)
loaded=()
for m in "${crypto[@]}"; do
    if [ -n "${mod_path[$m]:-}" ]; then
        smbd_modules+=("$m")
        loaded+=("$m")
    elif ! grep -q "/$m.ko\$" "$pkgroot$kmods/modules.builtin"; then
        peer_log "note: crypto module $m is neither a module nor built in $kver"
    fi
done
declare -A mod_have=()
for m in "${smbd_modules[@]}"; do
    for f in ${mod_path[$m]}; do
        [ -n "${mod_have[$f]:-}" ] && continue
        mod_have[$f]=1
        mkdir -p "$(dirname "$img$kmods/$f")"
        cp "$pkgroot$kmods/$f" "$img$kmods/$f"
    done
done
"$bb" depmod -b "$img" "$kver" || peer_die "depmod of the image's modules failed"
printf '%s\n' "${loaded[@]}" >"$img/etc/ksmbd-modules"

# ksmbd-tools (one binary, its names as symlinks) and the libraries it needs.
cp "$pkgroot/usr/libexec/ksmbd.tools" "$img/usr/bin/ksmbd.tools"
for n in ksmbd.mountd ksmbd.adduser ksmbd.addshare ksmbd.control; do
    ln -sf ksmbd.tools "$img/usr/bin/$n"
done
install -m 0755 "$here/ksmbd-start" "$img/usr/bin/ksmbd-start"
needed_of() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
queue=("$img/usr/bin/ksmbd.tools")
added=()
while ((${#queue[@]})); do
    next=()
    for elf in "${queue[@]}"; do
        for soname in $(needed_of "$elf"); do
            [ -e "$img/usr/lib/x86_64-linux-gnu/$soname" ] && continue
            real=""
            for dir in /usr/lib/x86_64-linux-gnu /usr/lib; do
                if [ -e "$pkgroot$dir/$soname" ]; then
                    real=$(readlink -f "$pkgroot$dir/$soname")
                    break
                fi
            done
            if [ -z "$real" ] || [ ! -f "$real" ]; then
                peer_die "$soname (needed by ${elf##*/}) is in none of: ${pvs[*]:6}"
            fi
            cp "$real" "$img/usr/lib/x86_64-linux-gnu/$soname"
            added+=("$soname")
            next+=("$img/usr/lib/x86_64-linux-gnu/$soname")
        done
    done
    queue=("${next[@]}")
done
if command -v ldconfig >/dev/null; then
    ldconfig -r "$img" || peer_die "ldconfig -r failed"
fi

mkdir -p "$work/out"
{
    printf 'key %s\nbase %s\nkernel %s\n' "$key" "$base_key" "$kver"
    printf 'package %s\n' "${pvs[@]}"
    printf 'vermagic %s\n' "$vermagic"
    printf 'module %s\n' "${!mod_have[@]}" | sort
    printf 'library %s\n' "${added[@]}" | sort
    for p in "$here"/patches/*.patch; do
        [ -f "$p" ] && printf 'patch %s\n' "${p##*/}"
    done
} >"$work/out/manifest.txt"
ln "$base/vmlinux" "$work/out/vmlinux" 2>/dev/null || cp "$base/vmlinux" "$work/out/vmlinux"
(cd "$img" && find . -mindepth 1 | LC_ALL=C sort | "$bb" cpio -o -H newc -R 0:0 2>/dev/null) \
    >"$work/out/initrd.img"
elapsed=$(($(date +%s) - started))
printf 'built in %s s\ninitrd %s bytes\n' "$elapsed" "$(stat -c %s "$work/out/initrd.img")" \
    >>"$work/out/manifest.txt"
rm -rf "$out"
mv "$work/out" "$out"
ln -sfn "$key" "$out_root/current"
for old in "$out_root"/*/vmlinux; do
    old=${old%/vmlinux}
    [ -L "$old" ] || [ "$old" = "$out" ] || rm -rf "$old"
done
peer_log "SMB Direct image $key built in ${elapsed} s: $(du -sh "$out" | cut -f1) ($out)"
printf '%s\n' "$out"
