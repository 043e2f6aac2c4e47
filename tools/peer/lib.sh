# shellcheck shell=bash
# Shared by tools/peer/*.sh (sourced, not run): the cargo target directory, apt's package lists,
# dependency closures read from Debian's package metadata, and private downloads and unpacking
# that never touch the machine's installed packages (dpkg -x into the project's own folders).

peer_repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)

# The cargo target directory (where every cache of the peer lives).
peer_target_dir() {
    if [ -n "${CARGO_TARGET_DIR:-}" ]; then
        printf '%s\n' "$CARGO_TARGET_DIR"
        return
    fi
    local dir=""
    if command -v cargo >/dev/null 2>&1; then
        dir=$(cd "$peer_repo" && cargo metadata --format-version 1 --no-deps 2>/dev/null |
            sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
    fi
    printf '%s\n' "${dir:-$peer_repo/target}"
}

# apt-cache with a binary cache of its own under the target directory: this image disables
# apt's (Dir::Cache::pkgcache ""), so every apt-cache run would parse all the package lists
# again (1-2 s each, 30 s for a closure on a loaded machine). apt rebuilds the file when the
# lists change. Set PEER_APT_CACHE first (peer_use_target does).
peer_apt_cache() {
    apt-cache -o Dir::Cache::pkgcache="$PEER_APT_CACHE/pkgcache.bin" \
        -o Dir::Cache::srcpkgcache="$PEER_APT_CACHE/srcpkgcache.bin" "$@"
}

# Sets peer_target (the cargo target directory) and PEER_APT_CACHE under it.
peer_use_target() {
    peer_target=$(peer_target_dir)
    PEER_APT_CACHE=$peer_target/peer/apt
    mkdir -p "$PEER_APT_CACHE"
}

peer_log() { printf 'peer: %s\n' "$*" >&2; }
peer_die() {
    printf 'peer: ERROR: %s\n' "$*" >&2
    exit 1
}

# apt-cache must know bookworm's packages: a clean machine may have no package lists yet.
peer_apt_ready() {
    if ! peer_apt_cache show --no-all-versions busybox-static >/dev/null 2>&1; then
        peer_log "apt-get update (no package lists yet)"
        apt-get update -qq || peer_die "apt-get update failed"
    fi
}

# stdin: `apt-cache depends` output (Depends/Pre-Depends only). stdout: one package per
# dependency: the first real package of each group of alternatives, else the first provider of
# its first virtual package.
peer_pick_deps() {
    awk '
    function flush(   i, pick) {
        pick = ""
        for (i = 1; i <= n && pick == ""; i++) if (name[i] !~ /^</) pick = name[i]
        for (i = 1; i <= n && pick == ""; i++) if (prov[i] != "") pick = prov[i]
        if (pick != "") print pick
        n = 0
    }
    /^[^ ]/ { flush(); cont = 0; next }
    /^ [ |](Pre)?Depends: / {
        if (!cont) flush()
        n++; name[n] = $2; prov[n] = ""
        cont = (substr($0, 2, 1) == "|")
        next
    }
    /^    [^ ]/ { if (n && prov[n] == "") prov[n] = $1; next }
    END { flush() }'
}

# peer_closure PRUNE_INSTALLED ROOT...: the roots and every package reached from them through
# Depends/Pre-Depends in Debian's "libs" section (shared libraries and what they need: libc6,
# zlib1g, ...; not debconf, perl or other tools a maintainer script wants), one per line, sorted. With PRUNE_INSTALLED=yes a package that
# is installed on this machine is left out and not followed (its own dependencies are installed).
peer_closure() {
    local prune=$1
    shift
    local -A seen=()
    local queue=() next=() p
    for p in "$@"; do
        seen[$p]=1
        queue+=("$p")
    done
    while ((${#queue[@]})); do
        mapfile -t next < <(peer_apt_cache depends --no-recommends --no-suggests --no-conflicts \
            --no-breaks --no-replaces --no-enhances "${queue[@]}" | peer_pick_deps | sort -u)
        queue=()
        ((${#next[@]})) || break
        mapfile -t next < <(peer_apt_cache show --no-all-versions "${next[@]}" 2>/dev/null |
            awk '/^Package: /{p=$2} /^Section: /{if ($2 == "libs") print p}' | sort -u)
        for p in "${next[@]}"; do
            [ -z "${seen[$p]:-}" ] || continue
            seen[$p]=1
            if [ "$prune" = yes ] && peer_installed "$p"; then
                continue
            fi
            queue+=("$p")
        done
    done
    for p in "${!seen[@]}"; do
        if [ "$prune" = yes ] && peer_installed "$p"; then
            continue
        fi
        printf '%s\n' "$p"
    done | sort
}

peer_installed() {
    [ "$(dpkg-query -W -f='${db:Status-Status}' "$1" 2>/dev/null)" = installed ]
}

# peer_versions PKG...: "PKG=VERSION" of apt's candidate for each, sorted.
peer_versions() {
    peer_apt_cache show --no-all-versions "$@" |
        awk '/^Package: /{p=$2} /^Version: /{print p "=" $2}' | sort
}

# The .deb of PKG=VERSION in DIR, if it was downloaded.
peer_deb_path() {
    local dir=$1 pkg=${2%%=*} ver=${2#*=} f
    for f in "$dir/${pkg}_${ver//:/%3a}_"*.deb; do
        if [ -f "$f" ]; then
            printf '%s\n' "$f"
            return 0
        fi
    done
    return 1
}

# peer_download DIR PKG=VERSION...: each .deb into DIR once (apt-get download verifies it
# against the signed package lists). A version the lists no longer offer gets one
# apt-get update and a second try.
peer_download() {
    local dir=$1
    shift
    mkdir -p "$dir"
    local missing=() pv
    for pv in "$@"; do
        peer_deb_path "$dir" "$pv" >/dev/null || missing+=("$pv")
    done
    ((${#missing[@]})) || return 0
    peer_log "downloading ${#missing[@]} Debian packages into $dir"
    if ! (cd "$dir" && apt-get download -q -o APT::Sandbox::User=root \
        -o Dir::Cache::pkgcache="$PEER_APT_CACHE/pkgcache.bin" \
        -o Dir::Cache::srcpkgcache="$PEER_APT_CACHE/srcpkgcache.bin" "${missing[@]}" >/dev/null); then
        peer_die "apt-get download failed for: ${missing[*]}"
    fi
}

# peer_unpack ROOT DEB...: dpkg's files of each package under ROOT, a merged-/usr tree (bookworm's
# packages still ship /lib and /bin; the symlinks make them land in /usr like on an installed
# system). No maintainer script runs.
peer_unpack() {
    local root=$1 deb
    shift
    mkdir -p "$root/usr/bin" "$root/usr/sbin" "$root/usr/lib" "$root/usr/lib64"
    for d in bin sbin lib lib64; do
        [ -e "$root/$d" ] || ln -s "usr/$d" "$root/$d"
    done
    for deb in "$@"; do
        dpkg-deb --fsys-tarfile "$deb" | tar -x --keep-directory-symlink -C "$root" ||
            peer_die "cannot unpack $deb"
    done
}
