#!/usr/bin/env bash
# Runs every fuzz target for SECONDS (default 60) each, from a temporary copy of its
# committed seed corpus (the committed corpus never grows here), and prints what each run
# did: executions, executions per second (wall clock) and per second of CPU the fuzzer got
# (the machine's other load shows as the share of a core, and the load average is printed),
# coverage (libFuzzer's `cov:` edges and `ft:` features) and corpus size. Exits non-zero on
# the first crash, leaving the input in fuzz/artifacts/<target>/.
#
# Two builds. The fuzzing runs on a LeakSanitizer-only build (`-s leak`, in target/lsan):
# AddressSanitizer's checks cost about 5 times the executions (every load and store checked,
# its allocator's redzones, quarantine and stack traces, and the shadow-byte compares that
# trace-compares instruments as coverage), and CI's minute must execute thousands of
# inputs. Every input the run kept (the seeds and all it found that reached new coverage)
# is then replayed on the AddressSanitizer build (`-runs=0`), leak checks included, so a
# memory error on any path the run covered still fails the run.
#
#   bash fuzz/run.sh [SECONDS]        FUZZ_TOOLCHAIN=nightly-2026-05-19 to pin the toolchain
#   bash fuzz/run.sh build            both builds only (CI builds before its lanes start)
set -euo pipefail
cd "$(dirname "$0")"
seconds=${1:-60}
toolchain=${FUZZ_TOOLCHAIN:-nightly}
targets=(consumer_calls device_memory cm_mads)

lsan_dir=target/lsan
# Every target in one cargo run per build (cargo-fuzz builds them all when none is named).
cargo "+$toolchain" fuzz build -s leak --target-dir "$lsan_dir" >/dev/null
cargo "+$toolchain" fuzz build >/dev/null
if [ "$seconds" = build ]; then
    exit 0
fi

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
    lsan=${LSAN_OPTIONS:-}
    if [ "$leaks" = 0 ]; then
        asan="${asan:+$asan:}detect_leaks=0"
        lsan="${lsan:+$lsan:}detect_leaks=0"
    fi
    log="$work/$t.log"
    status=0
    cpu0=$(children_cpu_ticks)
    wall0=$(date +%s.%N)
    load=$(cut -d' ' -f1 /proc/loadavg)
    LSAN_OPTIONS=$lsan cargo "+$toolchain" fuzz run -s leak --target-dir "$lsan_dir" \
        "$t" "$work/$t" -- \
        -max_total_time="$seconds" -rss_limit_mb=2048 -timeout=10 -max_len=4096 \
        -detect_leaks="$leaks" -print_final_stats=1 >"$log" 2>&1 || status=$?
    wall1=$(date +%s.%N)
    cpu1=$(children_cpu_ticks)
    # Every input kept, replayed under AddressSanitizer (and its leak checks, as above).
    replay_log="$work/$t.asan.log"
    if [ "$status" -eq 0 ]; then
        ASAN_OPTIONS=$asan cargo "+$toolchain" fuzz run "$t" "$work/$t" -- \
            -runs=0 -rss_limit_mb=2048 -timeout=10 -max_len=4096 \
            -detect_leaks="$leaks" >"$replay_log" 2>&1 || status=$?
    fi
    kept=$(find "$work/$t" -type f | wc -l)
    replayed=$(sed -n 's/^Done \([0-9]*\) runs.*/\1/p' "$replay_log" 2>/dev/null | tail -1)
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
    printf '%-15s %s executions in %ss: %s/s (%s per CPU-second; %s CPU-s, %s%% of a core, load %s); %s; its %s inputs replayed under ASan (%s runs)\n' \
        "$t" "${execs:-?}" "$seconds" "${rate:-?}" "$cpu_rate" "$cpu" "$share" "$load" \
        "$(sed -E 's/^#[0-9]+[[:space:]]+DONE[[:space:]]+//; s/ lim:.*//; s/ exec\/s: [0-9]+//' <<<"$done_line")" \
        "$kept" "${replayed:-?}"
    if [ "$status" -ne 0 ]; then
        printf '!! %s failed (exit %s); the end of its log:\n' "$t" "$status"
        if [ -s "$replay_log" ]; then
            tail -60 "$replay_log"
        else
            tail -60 "$log"
        fi
        exit "$status"
    fi
done
