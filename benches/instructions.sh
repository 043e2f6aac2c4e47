#!/usr/bin/env bash
# Instruction counts of the provider's data path (callgrind), next to the reference
# measurement of rdma-core's vmw_pvrdma provider (gcc 12 -O2, inclusive, with its locks).
#
#   bash benches/instructions.sh            # per-request table, scaling table, memory
#   SCALING=0 bash benches/instructions.sh  # without the scaling table (CACHE=0: without
#                                           # the cache-miss table)
#   bash benches/instructions.sh --check    # guard (CI): per-request shapes against
#                                           # benches/instructions.expected
#   bash benches/instructions.sh --update   # rewrite benches/instructions.expected
#   bash benches/instructions.sh --cache    # the cache-miss table only
#
# Isolation: `examples/instr.rs` drives two simulated hosts; for each shape callgrind runs
# with collection OFF except inside ONE provider entry point (--toggle-collect on the
# `extern "system"` thunk in src/ndk/dispatch, e.g. pvrdma_ndk::ndk::dispatch::read or,
# once the dispatch table is split by object, pvrdma_ndk::ndk::dispatch::qp::read), so the
# count is every instruction executed from that thunk's entry to its return, inclusive of
# everything it calls, and nothing else: not the harness, not the device model, not the
# fabric. The binary is built with the feature `bare-doorbell`, which compiles the host
# build's doorbell hook out (not even the test for one is left), so a doorbell is exactly
# the Windows build's one volatile store to the UAR page; the harness hands the stored word
# to the model after the thunk returned. Counts are totals / requests handled.
#
# The guard: counts are deterministic for one toolchain and one build (no libc call, no
# CPU-dispatched code on the measured path), so a figure that rises is a change in the code
# the compiler emitted. --check fails when any shape rises more than $SLACK above its
# committed figure; a drop of more than $SLACK passes but must be committed (--update).
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=table
case "${1:-}" in
  "") ;;
  --check) MODE=check ;;
  --update) MODE=update ;;
  --cache) MODE=cache ;;
  *) echo "usage: $0 [--check|--update|--cache]" >&2; exit 2 ;;
esac
EXPECTED=benches/instructions.expected
SLACK=2

command -v valgrind >/dev/null || { echo "valgrind is required" >&2; exit 1; }

# The figures hold for one build only: pin every setting that changes the code emitted, so
# neither the caller's environment nor a user-level cargo config can make the guard measure
# a different binary from the one the committed figures were taken from. The profile is the
# release profile of Cargo.toml (fat LTO, panic = abort) plus line tables for
# callgrind_annotate; an empty CARGO_ENCODED_RUSTFLAGS overrides RUSTFLAGS and every
# config-file rustflags.
for v in $(compgen -e); do
  case $v in CARGO_PROFILE_*) unset "$v" ;; esac
done
unset RUSTFLAGS CARGO_BUILD_TARGET
export CARGO_ENCODED_RUSTFLAGS=
export CARGO_PROFILE_RELEASE_OPT_LEVEL=3
export CARGO_PROFILE_RELEASE_LTO=true
export CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16
export CARGO_PROFILE_RELEASE_PANIC=abort
export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
export CARGO_PROFILE_RELEASE_DEBUG_ASSERTIONS=false
export CARGO_PROFILE_RELEASE_OVERFLOW_CHECKS=false
export CARGO_PROFILE_RELEASE_INCREMENTAL=false
export CARGO_PROFILE_RELEASE_STRIP=none
RUSTC_VERSION=$(rustc -V)

# The binary cargo built, wherever the target directory is (CARGO_TARGET_DIR, a config's
# build.target-dir): the build's own report names it.
BIN=$(cargo build --release --example instr --features bare-doorbell -q \
        --message-format=json-render-diagnostics \
      | grep '"target":{[^}]*"name":"instr"' \
      | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$BIN" ] || { echo "the build reported no instr executable" >&2; exit 1; }
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps \
               | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
OUT=${OUT:-$TARGET_DIR/callgrind}
mkdir -p "$OUT"
# The committed figures were taken at this many iterations (the one-off costs amortised
# over them are part of the figure), so the guard ignores N.
if [ "$MODE" = table ]; then N=${N:-1000}; else N=1000; fi

# measure <name> <thunk> <args...>: prints instructions per request.
# One pattern matches the thunk at dispatch::<thunk> and at dispatch::<module>::<thunk>
# (callgrind's * matches any run, `::` and the empty one included, but dispatch::srq_receive
# is not *::receive), so splitting the dispatch module moves no figure. One pattern, not two:
# callgrind 3.19 given an exact and a wildcard --toggle-collect for one thunk collected
# nothing for fast_register. Should a thunk ever call a function matching the same pattern,
# collection would toggle off inside it and the figure drop: the guard reports that.
measure() {
  local name=$1 thunk=$2; shift 2
  local f="$OUT/$name.out" log="$OUT/$name.log"
  valgrind --tool=callgrind --callgrind-out-file="$f" \
    --toggle-collect="pvrdma_ndk::ndk::dispatch*::$thunk" \
    "$BIN" "$@" 2>"$log" >/dev/null || { echo "instr $* failed under callgrind: $log" >&2; exit 1; }
  local total reqs
  total=$(awk '/^totals:/ {print $2}' "$f")
  reqs=$(sed -n 's/^requests=//p' "$log")
  if [ -z "$total" ] || [ "$total" = 0 ] || [ -z "$reqs" ] || [ "$reqs" = 0 ]; then
    echo "$name: nothing collected (no function matched dispatch::$thunk, or no requests): $f" >&2
    exit 1
  fi
  awk -v t="$total" -v r="$reqs" 'BEGIN { printf "%.1f", t / r }'
}

# The cache-miss table (CACHE=0 skips it): level-1 data misses per request in callgrind's
# cache simulation, counted like the instructions (only inside the measured thunk). The
# workload is `instr rr`, a consumer round-robining its QPs with 16 reads in flight: the
# model runs once per 16 requests, not between every two provider calls as in the shapes
# above, where its run (every QP's state in the device model, the fabric) evicted the
# provider's lines as no device does to the CPU's cache. The simulated L1D is pinned (32 KiB, 8-way, 64-byte lines; most x86 cores since 2011 have
# this or 48 KiB), so the figures do not depend on the host that runs them.
CACHE_SIM="--cache-sim=yes --D1=32768,8,64 --I1=32768,8,64 --LL=8388608,16,64"

# misses <name> <thunk> <args...>: prints "total (reads r + writes w)", the L1D misses per
# request inside <thunk> (callgrind 3.19 honours one --toggle-collect pattern per run, so
# each thunk takes a run of its own).
misses() {
  local name=$1 thunk=$2; shift 2
  local f="$OUT/$name.out" log="$OUT/$name.log"
  valgrind --tool=callgrind $CACHE_SIM --callgrind-out-file="$f" \
    --toggle-collect="pvrdma_ndk::ndk::dispatch*::$thunk" \
    "$BIN" "$@" 2>"$log" >/dev/null || { echo "instr $* failed under callgrind: $log" >&2; exit 1; }
  local reqs
  reqs=$(sed -n 's/^requests=//p' "$log")
  [ -n "$reqs" ] && [ "$reqs" != 0 ] || { echo "$name: no requests: $log" >&2; exit 1; }
  # The totals line leaves out trailing zero events.
  awk -v r="$reqs" -v name="$name" '
    /^events:/ { for (i = 2; i <= NF; i++) ev[$i] = i; next }
    /^totals:/ {
      if ($2 == 0) { print name ": nothing collected" > "/dev/stderr"; exit 1 }
      rd = $(ev["D1mr"]) + 0; wr = $(ev["D1mw"]) + 0
      printf "%.2f (%.2f r + %.2f w)\n", (rd + wr) / r, rd / r, wr / r
    }' "$f"
}

cache_table() {
  local n=$((N > 4096 ? N : 4096)) one shared own
  echo
  echo "cache (L1D misses per request, reads + writes; round robin, 16 in flight, CQ depth 64):"
  printf '%-28s %-24s %-24s %-24s\n' "" "1 QP" "1024 QPs, shared CQ" "1024 QPs, own CQs"
  local row thunk label
  for row in "read|post (NdkRead, 1 SGE)" "get_cq_results|poll (NdkGetCqResults, 1)"; do
    thunk=${row%%|*} label=${row#*|}
    one=$(misses "c_${thunk}_1" "$thunk" rr $n 1 shared 64)
    shared=$(misses "c_${thunk}_1024s" "$thunk" rr $n 1024 shared 64)
    own=$(misses "c_${thunk}_1024p" "$thunk" rr $n 1024 separate 64)
    printf '%-28s %-24s %-24s %-24s\n' "$label" "$one" "$shared" "$own"
  done
}

# The per-request shapes: instr shape, thunk, iterations, label, reference, target.
SHAPES=(
  "read       read           $N            (a) NdkRead, 1 SGE, not deferred + doorbell|131|65"
  "poll1      get_cq_results $N            (b) NdkGetCqResults reaping 1 completion|95|47"
  "chain16    read           $((N / 16 + 1)) (c) 16-NdkRead DEFER chain, per request|76.6|38"
  "poll16     get_cq_results $((N / 16 + 1)) (d) NdkGetCqResults reaping 16, per CQE|58.4|29"
  "recv1      get_cq_results $N            (e) NdkGetCqResults reaping 1 receive|-|60"
  "recv16     get_cq_results $((N / 16 + 1)) (f) NdkGetCqResults reaping 16 receives, per CQE|-|35"
  "poll_empty get_cq_results $N            NdkGetCqResults, empty CQ|64 (39)|-"
  "arm        arm_cq         $N            NdkArmCq (ANY)|-|-"
  "fastreg1   fast_register  $N            NdkFastRegister, 1 page|-|-"
  "fastreg16  fast_register  $N            NdkFastRegister, 16 pages|-|-"
  "send       send           $N            NdkSend, 1 SGE|-|-"
  "receive    receive        $N            NdkReceive, 1 SGE|-|-"
)

if [ "$MODE" = cache ]; then
  cache_table
  exit 0
fi

if [ "$MODE" != table ]; then
  declare -A committed=()
  committed_rustc=
  committed_iterations=
  if [ -f "$EXPECTED" ]; then
    while read -r key value; do
      case $key in
        ''|'#'*) ;;
        rustc) committed_rustc="rustc $value" ;;
        iterations) committed_iterations=$value ;;
        *) committed[$key]=$value ;;
      esac
    done <"$EXPECTED"
  fi
  if [ "$MODE" = check ]; then
    [ -f "$EXPECTED" ] || { echo "no $EXPECTED: run $0 --update and commit it" >&2; exit 1; }
    if [ "$committed_rustc" != "$RUSTC_VERSION" ] || [ "$committed_iterations" != "$N" ]; then
      echo "$EXPECTED was taken with '$committed_rustc' at $committed_iterations iterations;" >&2
      echo "this is '$RUSTC_VERSION' at $N: the figures do not compare. Run $0 --update and commit it." >&2
      exit 1
    fi
  fi
  printf '%-12s %10s %10s %8s\n' shape committed now delta
  rose=() dropped=() missing=() now=()
  for s in "${SHAPES[@]}"; do
    read -r name thunk iters _ <<<"$s"
    figure=$(measure "$name" "$thunk" "$name" "$iters")
    now+=("$name $figure")
    was=${committed[$name]:-}
    if [ -z "$was" ]; then
      printf '%-12s %10s %10s %8s\n' "$name" - "$figure" -
      missing+=("$name")
      continue
    fi
    delta=$(awk -v a="$figure" -v b="$was" 'BEGIN { printf "%+.1f", a - b }')
    flag=
    if awk -v d="$delta" -v s="$SLACK" 'BEGIN { exit !(d > s) }'; then flag="  ROSE"; rose+=("$name"); fi
    if awk -v d="$delta" -v s="$SLACK" 'BEGIN { exit !(d < -s) }'; then flag="  dropped"; dropped+=("$name"); fi
    printf '%-12s %10s %10s %8s%s\n' "$name" "$was" "$figure" "$delta" "$flag"
  done
  if [ "$MODE" = update ]; then
    {
      echo "# Instructions per request of the data path's shapes (callgrind; benches/instructions.sh)."
      echo "# CI runs \`bash benches/instructions.sh --check\`: it fails when a shape rises more than"
      echo "# $SLACK instructions above its figure here, and asks for this file to be regenerated when"
      echo "# one drops by more. Regenerate with \`bash benches/instructions.sh --update\` and commit"
      echo "# it with the change that moved a figure, before/after figures in the commit message."
      echo "# The figures hold for the toolchain and iteration count below only."
      echo "$RUSTC_VERSION"
      echo "iterations $N"
      printf '%s\n' "${now[@]}"
    } >"$EXPECTED"
    echo "wrote $EXPECTED"
    exit 0
  fi
  status=0
  if [ ${#missing[@]} -gt 0 ]; then
    echo "FAIL: no committed figure for ${missing[*]}: run $0 --update and commit $EXPECTED"
    status=1
  fi
  if [ ${#rose[@]} -gt 0 ]; then
    echo "FAIL: instruction count rose by more than $SLACK for ${rose[*]}."
    echo "      Profiles: $OUT/<shape>.out (callgrind_annotate --inclusive=no). If the rise is"
    echo "      intended, run $0 --update and commit $EXPECTED with the figures in the message."
    status=1
  fi
  if [ ${#dropped[@]} -gt 0 ]; then
    printf '\n!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n'
    echo "!! Instruction count dropped by more than $SLACK for ${dropped[*]} (not a failure)."
    echo "!! Record it: run $0 --update and commit $EXPECTED in the same"
    echo "!! commit as the change, or a later rise back to the old figure goes unnoticed."
    printf '!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!!\n\n'
  fi
  [ $status = 0 ] && echo "instruction counts: no shape rose by more than $SLACK"
  exit $status
fi

printf '%-44s %10s %10s %8s\n' "shape (instructions per request)" "pvrdma-ndk" "reference" "target"
for s in "${SHAPES[@]}"; do
  read -r name thunk iters rest <<<"$s"
  IFS='|' read -r label reference target <<<"$rest"
  figure=$(measure "$name" "$thunk" "$name" "$iters")
  printf '%-44s %10s %10s %8s\n' "$label" "$figure" "$reference" "$target"
done
echo "reference: rdma-core vmw_pvrdma, gcc 12 -O2, callgrind inclusive; the empty poll also"
echo "rings a POLL doorbell (39 without its lock). Line-by-line: callgrind_annotate --inclusive=no $OUT/<shape>.out"

[ "${SCALING:-1}" = 0 ] && exit 0
echo
printf '%-32s %12s %12s %12s %12s\n' "scaling (per request)" "(a) read" "(b) poll1" "(c) chain16" "(d) poll16"
for cfg in "1 shared 64" "1 separate 64" "64 shared 64" "64 separate 64" "1024 shared 64" "1024 separate 64" "1 shared 65536" "64 shared 65536" "1024 shared 65536"; do
  set -- $cfg
  n=$((N > 2048 ? N : 2048))
  a=$(measure s_read read read $n $1 $2 $3)
  b=$(measure s_poll1 get_cq_results poll1 $n $1 $2 $3)
  c=$(measure s_chain read chain16 $((n / 16)) $1 $2 $3)
  d=$(measure s_poll16 get_cq_results poll16 $((n / 16)) $1 $2 $3)
  printf '%-32s %12s %12s %12s %12s\n' "$1 QPs, $2 CQ, depth $3" "$a" "$b" "$c" "$d"
done
[ "${CACHE:-1}" = 0 ] || cache_table
echo
echo "host memory per object (heap = every heap byte the provider keeps, counted by a global allocator; seam pool = os::alloc try_box/KVec/try_arc; DMA = DmaBuffer/SharedDma):"
"$BIN" mem 64 64
"$BIN" mem 8 4096
"$BIN" mem 2 65536
