#!/usr/bin/env bash
# Instruction counts of the provider's data path (callgrind), next to the reference
# measurement of rdma-core's vmw_pvrdma provider (gcc 12 -O2, inclusive, with its locks).
#
#   bash benches/instructions.sh            # per-request table, scaling table, memory
#   SCALING=0 bash benches/instructions.sh  # per-request table only
#
# Isolation: `examples/instr.rs` drives two simulated hosts; for each shape callgrind runs
# with collection OFF except inside ONE provider entry point (--toggle-collect on the
# `extern "system"` thunk in src/ndk/dispatch/, e.g. pvrdma_ndk::ndk::dispatch::qp::read),
# so the count is every instruction executed from that thunk's entry to its return,
# inclusive of everything it calls, and nothing else: not the harness, not the device
# model, not the fabric. The binary is built with the feature `bare-doorbell`, which
# compiles the host build's doorbell hook out (not even the test for one is left), so a
# doorbell is exactly the Windows build's one volatile store to the UAR page; the harness
# hands the stored word to the model after the thunk returned. Counts are totals /
# requests handled.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v valgrind >/dev/null || { echo "valgrind is required" >&2; exit 1; }
export CARGO_PROFILE_RELEASE_DEBUG=line-tables-only
cargo build --release --example instr --features bare-doorbell -q
BIN=target/release/examples/instr
OUT=${OUT:-target/callgrind}
mkdir -p "$OUT"
N=${N:-1000}

# measure <name> <table>::<thunk> <args...>: prints instructions per request
measure() {
  local name=$1 thunk=$2; shift 2
  local f="$OUT/$name.out" log="$OUT/$name.log"
  valgrind --tool=callgrind --callgrind-out-file="$f" \
    --toggle-collect="pvrdma_ndk::ndk::dispatch::$thunk" "$BIN" "$@" 2>"$log" >/dev/null
  local total reqs
  total=$(awk '/^totals:/ {print $2}' "$f")
  reqs=$(sed -n 's/^requests=//p' "$log")
  awk -v t="$total" -v r="$reqs" 'BEGIN { printf "%.1f", t / r }'
}

printf '%-44s %10s %10s %8s\n' "shape (instructions per request)" "pvrdma-ndk" "reference" "target"
row() { printf '%-44s %10s %10s %8s\n' "$1" "$2" "$3" "$4"; }
row "(a) NdkRead, 1 SGE, not deferred + doorbell" "$(measure read qp::read read $N)" 131 65
row "(b) NdkGetCqResults reaping 1 completion" "$(measure poll1 cq::get_cq_results poll1 $N)" 95 47
row "(c) 16-NdkRead DEFER chain, per request" "$(measure chain16 qp::read chain16 $((N / 16 + 1)))" 76.6 38
row "(d) NdkGetCqResults reaping 16, per CQE" "$(measure poll16 cq::get_cq_results poll16 $((N / 16 + 1)))" 58.4 29
row "NdkGetCqResults, empty CQ" "$(measure poll_empty cq::get_cq_results poll_empty $N)" "64 (39)" -
row "NdkArmCq (ANY)" "$(measure arm cq::arm_cq arm $N)" - -
row "NdkFastRegister, 1 page" "$(measure fastreg1 qp::fast_register fastreg1 $N)" - -
row "NdkFastRegister, 16 pages" "$(measure fastreg16 qp::fast_register fastreg16 $N)" - -
row "NdkSend, 1 SGE" "$(measure send qp::send send $N)" - -
row "NdkReceive, 1 SGE" "$(measure receive qp::receive receive $N)" - -
echo "reference: rdma-core vmw_pvrdma, gcc 12 -O2, callgrind inclusive; the empty poll also"
echo "rings a POLL doorbell (39 without its lock). Line-by-line: callgrind_annotate --inclusive=no $OUT/<shape>.out"

[ "${SCALING:-1}" = 0 ] && exit 0
echo
printf '%-32s %12s %12s %12s %12s\n' "scaling (per request)" "(a) read" "(b) poll1" "(c) chain16" "(d) poll16"
for cfg in "1 shared 64" "1 separate 64" "64 shared 64" "64 separate 64" "1024 shared 64" "1024 separate 64" "1 shared 65536" "64 shared 65536" "1024 shared 65536"; do
  set -- $cfg
  n=$((N > 2048 ? N : 2048))
  printf '%-32s %12s %12s %12s %12s\n' "$1 QPs, $2 CQ, depth $3" \
    "$(measure s_read qp::read read $n $1 $2 $3)" \
    "$(measure s_poll1 cq::get_cq_results poll1 $n $1 $2 $3)" \
    "$(measure s_chain qp::read chain16 $((n / 16)) $1 $2 $3)" \
    "$(measure s_poll16 cq::get_cq_results poll16 $((n / 16)) $1 $2 $3)"
done
echo
echo "host memory per object (heap = every heap byte the provider keeps, counted by a global allocator; seam pool = os::alloc try_box/KVec/try_arc; DMA = DmaBuffer/SharedDma):"
"$BIN" mem 64 64
"$BIN" mem 8 4096
"$BIN" mem 2 65536
