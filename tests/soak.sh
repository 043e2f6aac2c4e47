#!/usr/bin/env bash
# Soak: runs `cargo test --workspace` N times (default 20) while two CPU hogs compete for the
# cores, to shake out threaded tests that synchronise on timing instead of facts. A flake that
# shows once in 30 runs unloaded shows within a few runs here.
#
#   tests/soak.sh [N]          # from the repository root
#   HOGS=3 tests/soak.sh 50    # more hogs
#
# Builds the tests first (untimed, unloaded) so each run is test-only. Prints one line per run
# (pass/fail and wall time), keeps each failing run's output in $SOAK_DIR (default
# target/soak/run-<i>.log), and ends with "N passed, M failed"; the exit status is 0 only if
# every run passed. The hogs are killed on exit, also on Ctrl-C.
set -u

runs=${1:-20}
hogs=${HOGS:-2}
dir=${SOAK_DIR:-target/soak}

cd "$(dirname "$0")/.." || exit 2
mkdir -p "$dir"

echo "building tests..."
if ! cargo test --workspace --no-run >"$dir/build.log" 2>&1; then
    echo "build failed; see $dir/build.log"
    exit 2
fi

pids=()
cleanup() {
    for p in "${pids[@]}"; do
        kill "$p" 2>/dev/null
    done
    wait 2>/dev/null
}
trap cleanup EXIT
trap 'exit 130' INT TERM

for _ in $(seq "$hogs"); do
    yes >/dev/null &
    pids+=("$!")
done
echo "$hogs CPU hogs running (pids ${pids[*]}); $runs runs"

passed=0
failed=0
for i in $(seq "$runs"); do
    log="$dir/run-$i.log"
    start=$(date +%s%N)
    if cargo test --workspace --no-fail-fast >"$log" 2>&1; then
        result=pass
        passed=$((passed + 1))
        rm -f "$log"
    else
        result=FAIL
        failed=$((failed + 1))
    fi
    ms=$((($(date +%s%N) - start) / 1000000))
    printf 'run %3d: %s (%d.%d s)' "$i" "$result" $((ms / 1000)) $((ms % 1000 / 100))
    if [ "$result" = FAIL ]; then
        # What broke, so the summary says it without opening the log: the failed tests, and
        # the targets cargo names (also one that died without a verdict).
        what=$({
            sed -nE 's/^test (.*) \.\.\. FAILED$/\1/p' "$log"
            grep -oE '`(-p [^`]*|--(test|lib|bin|doc)[^`]*)`' "$log" | sort -u
        } | tr '\n' ' ')
        printf ' %s(log: %s)' "$what" "$log"
    fi
    printf '\n'
done

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
