#!/usr/bin/env bash
# Instruction counts of the vmxnet3 layer's data path (callgrind), per frame.
#
#   bash benches/vmx_instructions.sh           # the table
#   N=4000 bash benches/vmx_instructions.sh    # more frames per shape
#
# Isolation as in benches/instructions.sh: `examples/vmx_instr.rs` drives two simulated hosts
# on the vmxnet3 model; callgrind runs with collection OFF except inside ONE function of
# src/vmxnet3 per shape (--toggle-collect), so a figure is every instruction from that
# function's entry to its return, inclusive of what it calls, and nothing else. Those
# functions are #[inline(never)] for this. BAR0 writes made inside them (TXPROD, IMR) are
# recorded in an atomic slot and handed to the model after the call (see the example), so the
# model is not counted. The build is the release profile pinned the way instructions.sh pins
# it (fat LTO, panic = abort).
set -euo pipefail
cd "$(dirname "$0")/.."

command -v valgrind >/dev/null || { echo "valgrind is required" >&2; exit 1; }
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

BIN=$(cargo build --release --example vmx_instr -q \
        --message-format=json-render-diagnostics \
      | grep '"target":{[^}]*"name":"vmx_instr"' \
      | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p' | tail -1)
[ -x "$BIN" ] || { echo "the build reported no vmx_instr executable" >&2; exit 1; }
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps \
               | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
OUT=${OUT:-$TARGET_DIR/callgrind}
mkdir -p "$OUT"
N=${N:-2000}

# measure <name> <function> <shape>: prints instructions per frame.
measure() {
  local name=$1 fn=$2 shape=$3
  local f="$OUT/vmx_$name.out" log="$OUT/vmx_$name.log"
  valgrind --tool=callgrind --callgrind-out-file="$f" \
    --toggle-collect="pvrdma_ndk::vmxnet3::device::$fn" \
    "$BIN" "$shape" "$N" 2>"$log" >/dev/null || { echo "vmx_instr $shape failed: $log" >&2; exit 1; }
  local total reqs
  total=$(awk '/^totals:/ {print $2}' "$f")
  reqs=$(sed -n 's/^requests=//p' "$log")
  if [ -z "$total" ] || [ "$total" = 0 ] || [ -z "$reqs" ] || [ "$reqs" = 0 ]; then
    echo "$name: nothing collected ($fn): $f" >&2
    exit 1
  fi
  awk -v t="$total" -v r="$reqs" 'BEGIN { printf "%.1f", t / r }'
}

printf '%-10s %-60s %s\n' shape "what (per frame)" instructions
while IFS='|' read -r name fn shape what; do
  printf '%-10s %-60s %s\n' "$name" "$what" "$(measure "$name" "$fn" "$shape")"
done <<'SHAPES'
send|Vmxnet3::send|send|Vmxnet3::send, 64-byte frame, 1 SGE, doorbell
send16|Vmxnet3::send|send16|Vmxnet3::send, 16 queued with `more`, one doorbell
txdone|Shared::tx_reap|send|DPC Tx reap, 1 completion per run, to the client
recv1|Shared::rx_reap|recv1|DPC Rx reap, 1 frame per run, up and back to the ring
recv16|Shared::rx_reap|recv16|DPC Rx reap, 16 frames per run
SHAPES
