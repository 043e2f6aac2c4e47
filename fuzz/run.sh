#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 60) each, from a temporary copy of its
# committed seed corpus (the committed corpus never grows here), and prints what each run
# did: executions, executions per second (wall clock) and per second of CPU the fuzzer got
# (the machine's other load shows as the share of a core), coverage (libFuzzer's `cov:`
# edges and `ft:` features) and corpus size. Exits non-zero on the first crash, leaving the
# input in fuzz/artifacts/<target>/.
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

# CPU time (clock ticks, user + system) of this shell's finished children: fields 16 and 17
# of /proc/self/stat, after the command name (which may hold spaces) in parentheses.
children_cpu_ticks() {
    local stat f
    stat=$(</proc/$$/stat)
    stat=${stat##*) }
    read -r -a f <<<"$stat"
    echo $((f[13] + f[14]))
}

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
    cpu0=$(children_cpu_ticks)
    wall0=$(date +%s.%N)
    ASAN_OPTIONS=$asan cargo "+$toolchain" fuzz run "$t" "$work/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=4096 \
        -detect_leaks="$leaks" -print_final_stats=1 >"$log" 2>&1 || status=$?
    wall1=$(date +%s.%N)
    cpu1=$(children_cpu_ticks)
    done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1 || true)
    execs=$(sed -n 's/^stat::number_of_executed_units:[[:space:]]*//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec:[[:space:]]*//p' "$log" | tail -1)
    # Executions per second of CPU the fuzzer (and cargo) got, and that CPU as a share of
    # one core over the wall time: on a shared machine the wall-clock rate is the share
    # times the CPU rate.
    cpu=$(awk -v a="$cpu0" -v b="$cpu1" -v hz="$(getconf CLK_TCK)" \
        'BEGIN { printf "%.1f", (b - a) / hz }')
    cpu_rate=$(awk -v n="${execs:-0}" -v c="$cpu" 'BEGIN { if (c > 0) printf "%d", n / c; else print "?" }')
    share=$(awk -v c="$cpu" -v a="$wall0" -v b="$wall1" 'BEGIN { printf "%d", 100 * c / (b - a) }')
    printf '%-15s %s executions in %ss: %s/s (%s per CPU-second; %s CPU-s, %s%% of a core); %s\n' \
        "$t" "${execs:-?}" "$seconds" "${rate:-?}" "$cpu_rate" "$cpu" "$share" \
        "$(sed -E 's/^#[0-9]+[[:space:]]+DONE[[:space:]]+//; s/ lim:.*//; s/ exec\/s: [0-9]+//' <<<"$done_line")"
    if [ "$status" -ne 0 ]; then
        printf '!! %s failed (exit %s); the end of its log:\n' "$t" "$status"
        tail -60 "$log"
        exit "$status"
    fi
done
