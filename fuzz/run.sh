#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 60) each, from a temporary copy of its
# committed seed corpus (the committed corpus never grows here), and prints what each run
# did: executions, coverage (libFuzzer's `cov:` edges and `ft:` features) and corpus size.
# Exits non-zero on the first crash, leaving the input in fuzz/artifacts/<target>/.
#
#   bash fuzz/run.sh [SECONDS]        FUZZ_TOOLCHAIN=nightly-2026-05-19 to pin the toolchain
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
toolchain=${FUZZ_TOOLCHAIN:-nightly}
targets=(consumer_calls device_memory cm_mads)

for t in "${targets[@]}"; do
    cargo "+$toolchain" fuzz build "$t" >/dev/null
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for t in "${targets[@]}"; do
    mkdir -p "$work/$t"
    cp corpus/"$t"/* "$work/$t/"
    # device_memory: a command response naming an impossible handle makes the provider
    # keep that object's memory for good (`Tables::file`'s quarantine, by design), which
    # LeakSanitizer reports; the target's own accounting checks leaks instead.
    leaks=1
    [ "$t" = device_memory ] && leaks=0
    asan=${ASAN_OPTIONS:-}
    [ "$leaks" = 0 ] && asan="${asan:+$asan:}detect_leaks=0"
    log="$work/$t.log"
    status=0
    ASAN_OPTIONS=$asan cargo "+$toolchain" fuzz run "$t" "$work/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=4096 \
        -detect_leaks="$leaks" -print_final_stats=1 >"$log" 2>&1 || status=$?
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
    execs=$(sed -n 's/^stat::number_of_executed_units:[[:space:]]*//p' "$log" | tail -1)
    printf '%-15s %s executions in %ss; %s\n' "$t" "${execs:-?}" "$seconds" \
        "$(sed -E 's/^#[0-9]+[[:space:]]+DONE[[:space:]]+//; s/ lim:.*//' <<<"$done_line")"
    if [ "$status" -ne 0 ]; then
        printf '!! %s failed (exit %s); the end of its log:\n' "$t" "$status"
        tail -60 "$log"
        exit "$status"
    fi
done
