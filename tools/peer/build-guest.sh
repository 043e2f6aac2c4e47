#!/usr/bin/env bash
# Builds the Linux RDMA peer's boot image (a kernel and an initramfs, booted with
# qemu-system-x86_64 -kernel/-initrd; docs/PEER.md) from Debian bookworm's packages, downloaded
# now with `apt-get download` and unpacked privately (nothing is installed on the machine):
#   - linux-image-amd64's kernel: vmlinux (decompressed from its vmlinuz), and the modules for rdma_rxe, rdma_cm/rdma_ucm and
#     virtio-net with their dependencies (modules.dep by busybox depmod, so modprobe works);
#   - busybox (the shell and the tools of the init and of the tests' commands). Debian's
#     busybox-static is built with FEATURE_SH_STANDALONE: its shell runs its own applets before
#     PATH, so `ip` or `kill` in a command would be busybox's, not iproute2's or the one asked
#     for; the dynamic build runs what PATH finds. busybox-static serves here on the build
#     machine only (cpio, depmod);
#   - rdma-core's userspace: libibverbs1, librdmacm1, ibverbs-providers (rxe), rdmacm-utils
#     (rping, ucmatose, udaddy), ibverbs-utils; iproute2 (ip, `rdma link add`, `rdma
#     statistic`); perftest;
#   - every shared library those need: the packages reached through Depends/Pre-Depends in
#     Debian's "libs" section (glibc included), of which the image keeps the ELF closure (each
#     NEEDED found, or the build fails);
#   - the project's own programs, tools/peer/progs/*.c, compiled here against privately unpacked
#     libibverbs-dev/librdmacm-dev headers and the guest's own libraries;
#   - tools/peer/init as /init (PID 1: modules, eth0, rxe0, then the command server).
# The result, <target>/peer/guest/<key>/{vmlinux,initrd.img,manifest.txt}, is keyed by a hash of
# these scripts, the programs' sources and every package's version: a rerun with the same inputs
# prints the cached directory at once. <target>/peer/guest/current points at the last one built.
# Prints that directory.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=tools/peer/lib.sh
. "$here/lib.sh"

started=$(date +%s)
peer_use_target
out_root=$peer_target/peer/guest
debs_dir=$peer_target/peer/debs

userland=(busybox libibverbs1 librdmacm1 ibverbs-providers rdmacm-utils ibverbs-utils
    iproute2 perftest)
# Used here only, unpacked apart: busybox-static's cpio and depmod; the headers and link-time
# symlinks for the programs (their dependencies are not needed).
buildpkgs=(busybox-static libibverbs-dev librdmacm-dev)

# The packages and versions, resolved from apt's lists once per state of the lists (and of
# these scripts): a rerun with nothing changed asks apt nothing.
lists_state=$({
    cat "$here/build-guest.sh" "$here/lib.sh"
    printf '%s\n' "${PVRDMA_PEER_KERNEL:-}"
    stat -c '%n %s %Y' /var/lib/apt/lists/*Packages* 2>/dev/null || true
} | sha256sum | cut -c1-16)
resolved=$out_root/resolved/$lists_state
if [ ! -s "$resolved" ]; then
    peer_apt_ready
    kernel_pkg=${PVRDMA_PEER_KERNEL:-$(peer_apt_cache depends linux-image-amd64 |
        awk '/Depends: linux-image-[0-9]/{print $2; exit}')}
    [ -n "$kernel_pkg" ] || peer_die "apt-cache cannot resolve linux-image-amd64 to a kernel package"
    mapfile -t runtime < <(peer_closure no "${userland[@]}")
    mapfile -t pvs < <(peer_versions "$kernel_pkg" "${runtime[@]}" "${buildpkgs[@]}")
    ((${#pvs[@]} == ${#runtime[@]} + 1 + ${#buildpkgs[@]})) ||
        peer_die "apt-cache has no candidate for some of: $kernel_pkg ${runtime[*]} ${buildpkgs[*]}"
    mkdir -p "$out_root/resolved"
    printf '%s\n' "$kernel_pkg" "${pvs[@]}" >"$resolved.new"
    mv "$resolved.new" "$resolved"
fi
{
    read -r kernel_pkg
    mapfile -t pvs
} <"$resolved"
kver=${kernel_pkg#linux-image-}
runtime=()
for pv in "${pvs[@]}"; do
    case " $kernel_pkg ${buildpkgs[*]} " in
    *" ${pv%%=*} "*) ;;
    *) runtime+=("${pv%%=*}") ;;
    esac
done

key=$({
    cat "$here/build-guest.sh" "$here/lib.sh" "$here/init"
    for f in "$here"/progs/*; do
        printf '%s\n' "${f##*/}"
        cat "$f"
    done
    printf '%s\n' "${pvs[@]}"
} | sha256sum | cut -c1-16)
out=$out_root/$key
if [ -f "$out/initrd.img" ] && [ -f "$out/vmlinux" ]; then
    ln -sfn "$key" "$out_root/current"
    printf '%s\n' "$out"
    exit 0
fi

peer_log "building the guest image $key (kernel $kver)"
peer_download "$debs_dir" "${pvs[@]}"

work=$out_root/build.$$
trap 'rm -rf "$work"' EXIT
rm -rf "$work"
pkgroot=$work/pkgroot
buildroot=$work/buildroot
img=$work/image
debs=() builddebs=()
for pv in "${pvs[@]}"; do
    case " ${buildpkgs[*]} " in
    *" ${pv%%=*} "*) builddebs+=("$(peer_deb_path "$debs_dir" "$pv")") ;;
    *) debs+=("$(peer_deb_path "$debs_dir" "$pv")") ;;
    esac
done
peer_unpack "$pkgroot" "${debs[@]}"
peer_unpack "$buildroot" "${builddebs[@]}"
bb=$buildroot/usr/bin/busybox
[ -x "$bb" ] || peer_die "busybox-static did not unpack a /bin/busybox"
[ -x "$pkgroot/usr/bin/busybox" ] || peer_die "busybox did not unpack a /bin/busybox"

# The path inside ROOT that PATH (inside ROOT) resolves to, following symlinks as the guest
# would (an absolute link target is relative to ROOT, not to this machine).
in_root_realpath() {
    local root=$1 path=$2 target n=0
    while [ -L "$root$path" ]; do
        target=$(readlink "$root$path")
        case $target in
        /*) path=$target ;;
        *) path=$(dirname "$path")/$target ;;
        esac
        n=$((n + 1))
        ((n < 40)) || peer_die "symlink loop at $path in $root"
    done
    # Collapse ./ and ../ (the usr-merge links make /lib/... and /usr/lib/... the same file).
    local IFS=/ part parts=()
    for part in $path; do
        case $part in
        '' | .) ;;
        ..) ((${#parts[@]})) && unset 'parts[${#parts[@]}-1]' ;;
        *) parts+=("$part") ;;
        esac
    done
    path="/${parts[*]}"
    case $path in
    /lib/* | /lib64/* | /bin/* | /sbin/*) path=/usr$path ;;
    esac
    printf '%s\n' "$path"
}

# ---- the image tree: merged /usr, busybox, the tools
elves=()
mkdir -p "$img"/{usr/bin,usr/lib/x86_64-linux-gnu,usr/lib64,etc,proc,sys,dev,tmp,run,root,mnt}
ln -s usr/bin "$img/bin"
ln -s usr/bin "$img/sbin"
ln -s bin "$img/usr/sbin"
ln -s usr/lib "$img/lib"
ln -s usr/lib64 "$img/lib64"
cp "$pkgroot/usr/bin/busybox" "$img/usr/bin/busybox"
elves+=("$img/usr/bin/busybox")

tools=(
    # rdmacm-utils
    rping ucmatose udaddy mckey cmtime rdma_client rdma_server rdma_xclient rdma_xserver
    rstream riostream rcopy udpong
    # ibverbs-utils
    ibv_devices ibv_devinfo ibv_asyncwatch ibv_rc_pingpong ibv_srq_pingpong ibv_uc_pingpong
    ibv_ud_pingpong ibv_xsrq_pingpong
    # perftest
    ib_send_bw ib_send_lat ib_read_bw ib_read_lat ib_write_bw ib_write_lat ib_atomic_bw
    ib_atomic_lat
    # iproute2
    ip rdma ss bridge tc
)
for t in "${tools[@]}"; do
    real=$(in_root_realpath "$pkgroot" "/usr/bin/$t")
    [ -f "$pkgroot$real" ] || real=$(in_root_realpath "$pkgroot" "/usr/sbin/$t")
    [ -f "$pkgroot$real" ] || peer_die "no $t in the unpacked packages"
    cp "$pkgroot$real" "$img/usr/bin/$t"
    elves+=("$img/usr/bin/$t")
done
for applet in $("$img/usr/bin/busybox" --list); do
    [ -e "$img/usr/bin/$applet" ] || ln -s busybox "$img/usr/bin/$applet"
done

# libibverbs' provider for rxe (dlopened, so a NEEDED root too) and its config: the only
# device here (another provider's config without its library would only warn).
mkdir -p "$img/etc/libibverbs.d" "$img/usr/lib/x86_64-linux-gnu/libibverbs"
cp "$pkgroot/etc/libibverbs.d/rxe.driver" "$img/etc/libibverbs.d/"
for p in "$pkgroot"/usr/lib/x86_64-linux-gnu/libibverbs/librxe-*.so; do
    real=$(in_root_realpath "$pkgroot" "${p#"$pkgroot"}")
    cp "$pkgroot$real" "$img/usr/lib/x86_64-linux-gnu/libibverbs/${p##*/}"
    elves+=("$img/usr/lib/x86_64-linux-gnu/libibverbs/${p##*/}")
done
if [ ! -f "$img/etc/libibverbs.d/rxe.driver" ] || ((${#elves[@]} == 0)); then
    peer_die "no rxe provider"
fi
cp -a "$pkgroot/etc/iproute2" "$img/etc/"

# ---- the project's programs, against the guest's own headers and libraries
progs=()
if compgen -G "$here/progs/*.c" >/dev/null; then
    command -v cc >/dev/null || peer_die "no C compiler (apt-get install gcc) for tools/peer/progs"
    # The guest's libraries, and the -dev packages' unversioned .so links beside them.
    libdir=$work/linkroot
    mkdir -p "$libdir"
    for l in "$buildroot"/usr/lib/x86_64-linux-gnu/lib{ibverbs,rdmacm}.so; do
        ln -s "$pkgroot/usr/lib/x86_64-linux-gnu/$(readlink "$l")" "$libdir/${l##*/}"
    done
    for src in "$here"/progs/*.c; do
        name=$(basename "$src" .c)
        cc -std=gnu11 -O2 -g0 -Wall -Wextra -Werror -I"$buildroot/usr/include" -o "$img/usr/bin/$name" \
            "$src" -L"$libdir" -Wl,-rpath-link,"$pkgroot/usr/lib/x86_64-linux-gnu" -Wl,--as-needed -lrdmacm -libverbs -lpthread ||
            peer_die "cannot compile $src"
        elves+=("$img/usr/bin/$name")
        progs+=("$name")
    done
fi

# ---- shared libraries: the ELF closure of everything above, from the unpacked packages
needed_of() { readelf -d "$1" 2>/dev/null | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'; }
declare -A have=()
# add_lib SONAME WHY: the library into the image once; its path on the queue.
add_lib() {
    local soname=$1 why=$2 dir real=""
    [ -z "${have[$soname]:-}" ] || return 0
    for dir in /usr/lib/x86_64-linux-gnu /usr/lib; do
        if [ -e "$pkgroot$dir/$soname" ]; then
            real=$(in_root_realpath "$pkgroot" "$dir/$soname")
            break
        fi
    done
    if [ -z "$real" ] || [ ! -f "$pkgroot$real" ]; then
        peer_die "$soname (needed by $why) is in none of the packages: ${runtime[*]}"
    fi
    cp "$pkgroot$real" "$img/usr/lib/x86_64-linux-gnu/$soname"
    have[$soname]=1
    next+=("$img/usr/lib/x86_64-linux-gnu/$soname")
}
next=()
# glibc dlopens libgcc_s for pthread_exit and pthread_cancel (rping's threads exit that way).
add_lib libgcc_s.so.1 "glibc's pthread_exit"
queue=("${elves[@]}" "${next[@]}")
while ((${#queue[@]})); do
    next=()
    for elf in "${queue[@]}"; do
        for soname in $(needed_of "$elf"); do
            add_lib "$soname" "${elf#"$img"}"
        done
    done
    queue=("${next[@]}")
done
loader=ld-linux-x86-64.so.2
[ -n "${have[$loader]:-}" ] || peer_die "no binary needs $loader?"
ln -s ../lib/x86_64-linux-gnu/$loader "$img/usr/lib64/$loader"
printf '/usr/lib/x86_64-linux-gnu\n' >"$img/etc/ld.so.conf"
if command -v ldconfig >/dev/null; then
    ldconfig -r "$img" || peer_die "ldconfig -r failed"
fi

# ---- kernel modules: the dependency closure of what the init loads
modules=(virtio_pci virtio_net rdma_rxe rdma_ucm rdma_cm ib_uverbs ib_cm iw_cm ib_core
    crc32_generic configfs)
kmods=/usr/lib/modules/$kver
[ -d "$pkgroot$kmods" ] || peer_die "$kernel_pkg has no $kmods"
"$bb" depmod -b "$pkgroot" "$kver" || peer_die "depmod of the full module tree failed"
declare -A mod_path=()
while IFS=: read -r path deps; do
    m=${path##*/}
    m=${m%.ko}
    mod_path[${m//-/_}]="$path $deps"
done <"$pkgroot$kmods/modules.dep"
declare -A mod_have=()
for m in "${modules[@]}"; do
    entry=${mod_path[$m]:-}
    [ -n "$entry" ] || peer_die "no module $m in $kernel_pkg"
    for f in $entry; do
        [ -n "${mod_have[$f]:-}" ] && continue
        mod_have[$f]=1
        mkdir -p "$(dirname "$img$kmods/$f")"
        cp "$pkgroot$kmods/$f" "$img$kmods/$f"
    done
done
cp "$pkgroot$kmods"/modules.{builtin,builtin.modinfo,order} "$img$kmods/"
"$bb" depmod -b "$img" "$kver" || peer_die "depmod of the image's modules failed"

install -m 0755 "$here/init" "$img/init"
if [ "$(id -u)" = 0 ]; then
    mknod -m 600 "$img/dev/console" c 5 1
fi

# ---- the manifest and the archive
mkdir -p "$work/out"
{
    printf 'key %s\nkernel %s\n' "$key" "$kver"
    printf 'package %s\n' "${pvs[@]}"
    printf 'program %s\n' "${progs[@]}"
    printf 'module %s\n' "${!mod_have[@]}" | sort
    printf 'library %s\n' "${!have[@]}" | sort
} >"$work/out/manifest.txt"
# The kernel decompressed here, once, natively: QEMU boots the ELF vmlinux through its PVH
# entry (CONFIG_PVH), which skips the bzImage's own XZ decompression, slow under TCG (9 s of
# a 28 s boot on a loaded machine). For the same reason the initramfs is not compressed.
vmlinuz=$pkgroot/boot/vmlinuz-$kver
command -v xz >/dev/null || peer_die "no xz (apt-get install xz-utils) to decompress the kernel"
xz_at=$(LC_ALL=C grep -obUaP '\xfd7zXZ\x00' "$vmlinuz" | head -1 | cut -d: -f1)
[ -n "$xz_at" ] || peer_die "$vmlinuz holds no XZ payload"
# xz stops at the end of the stream and complains about the bzImage's trailer: the ELF checks
# below judge the result.
tail -c +$((xz_at + 1)) "$vmlinuz" | xz -dcq >"$work/out/vmlinux" 2>/dev/null || true
readelf -n "$work/out/vmlinux" 2>/dev/null | grep -q 'Xen.*0x00000012' ||
    peer_die "the kernel decompressed from $vmlinuz is no ELF with a PVH entry note"
(cd "$img" && find . -mindepth 1 | LC_ALL=C sort | "$bb" cpio -o -H newc -R 0:0 2>/dev/null) \
    >"$work/out/initrd.img"
elapsed=$(($(date +%s) - started))
printf 'built in %s s\ninitrd %s bytes (%s bytes unpacked)\n' "$elapsed" \
    "$(stat -c %s "$work/out/initrd.img")" "$(du -sb "$img" | cut -f1)" >>"$work/out/manifest.txt"
rm -rf "$out"
mv "$work/out" "$out"
ln -sfn "$key" "$out_root/current"
# Earlier images (47 MB each) go; a guest running from one keeps its open files.
for old in "$out_root"/*/vmlinux; do
    old=${old%/vmlinux}
    [ -L "$old" ] || [ "$old" = "$out" ] || rm -rf "$old"
done
peer_log "guest image $key built in ${elapsed} s: $(du -sh "$out" | cut -f1) ($out)"
printf '%s\n' "$out"
