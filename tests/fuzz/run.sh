#!/bin/sh
# run.sh - runs the libFuzzer targets of tests/fuzz/ (built by `make FUZZ=1
# fuzzers` into build/fuzz/fuzzers/) and prints one table: target,
# executions, corpus size, crashes. Exit status 0 when no target crashed.
#
#   sh tests/fuzz/run.sh campaign   `make fuzz`: FUZZ_SECONDS (default 60)
#                                   per target; new corpus entries are kept
#                                   in tests/out/fuzz-campaign/TARGET/corpus (merge
#                                   the useful ones into tests/fuzz/corpus/
#                                   by hand with -merge=1).
#   sh tests/fuzz/run.sh smoke      `make check`: FUZZ_SMOKE_SECONDS
#                                   (default 20) per target over a scratch
#                                   copy of its corpus; results left in
#                                   tests/out/fuzz/TARGET/result for
#                                   tests/run.sh to count as tests.
#
# Every run first replays tests/fuzz/corpus/TARGET and the regression inputs
# of tests/fuzz/regress/TARGET (a crash there fails the run before any
# fuzzing). Crashes, leaks, timeouts (a hang: -timeout, 25 s per input) and
# out-of-memory (-rss_limit_mb 2048, -malloc_limit_mb 1024: bounded
# allocation) are all counted as crashes; their inputs are saved as
# OUT/TARGET/crashes/ (a fix keeps one in tests/fuzz/regress/TARGET/).
# FUZZ_OUT: the output directory instead of tests/out/fuzz-campaign
# (campaign) or tests/out/fuzz (smoke).
# FUZZ_JOBS targets run at a time (default 2: the machine has 2 cores).
# FUZZ_TARGETS: space-separated target names to run instead of all.
# The binaries are copied first, so a rebuild during a long campaign is safe.

[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u
cd "$(dirname "$0")/../.." || exit 1
MODE=${1:-campaign}
case $MODE in
campaign) SECS=${FUZZ_SECONDS:-60}; OUT=${FUZZ_OUT:-tests/out/fuzz-campaign} ;;
smoke) SECS=${FUZZ_SMOKE_SECONDS:-20}; OUT=${FUZZ_OUT:-tests/out/fuzz} ;;
*) echo "usage: run.sh campaign|smoke" >&2; exit 2 ;;
esac
JOBS=${FUZZ_JOBS:-2}
BIN=build/fuzz/fuzzers
mkdir -p "$OUT/bin"

targets=${FUZZ_TARGETS:-$(ls "$BIN" 2>/dev/null | sed -n 's/^fuzz_\(.*\)$/\1/p' | grep -v '\.' )}
if [ -z "$targets" ]; then
	echo "run.sh: no fuzz targets in $BIN (make FUZZ=1 fuzzers)" >&2
	exit 1
fi

# one TARGET: runs it, writes $OUT/TARGET/result "EXECS CORPUS CRASHES RC"
one() {
	t=$1
	d=$OUT/$t
	rm -rf "$d/crashes" "$d/log" "$d/result"
	mkdir -p "$d/corpus" "$d/crashes"
	[ "$MODE" = smoke ] && rm -rf "$d/corpus" && mkdir -p "$d/corpus"
	cp "$BIN/fuzz_$t" "$OUT/bin/fuzz_$t"
	dirs="$d/corpus"
	[ -d "tests/fuzz/corpus/$t" ] && dirs="$dirs tests/fuzz/corpus/$t"
	[ -d "tests/fuzz/regress/$t" ] && dirs="$dirs tests/fuzz/regress/$t"
	# shellcheck disable=SC2086 # the directory list splits on purpose
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1} \
	UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
	timeout -k 10 $((SECS + 120)) "$OUT/bin/fuzz_$t" \
		-max_total_time="$SECS" -timeout=25 -rss_limit_mb=2048 \
		-malloc_limit_mb=1024 -print_final_stats=1 -close_fd_mask=1 \
		-artifact_prefix="$d/crashes/" $dirs >"$d/log" 2>&1
	rc=$?
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$d/log" | tail -n 1)
	corpus=$(ls "$d/corpus" | wc -l)
	for x in tests/fuzz/corpus/$t tests/fuzz/regress/$t; do
		[ -d "$x" ] && corpus=$((corpus + $(ls "$x" | wc -l)))
	done
	crashes=$(ls "$d/crashes" | wc -l)
	[ "$rc" -ne 0 ] && [ "$crashes" -eq 0 ] && crashes=1  # died without an artifact
	echo "${execs:-0} $corpus $crashes $rc" >"$d/result"
}

running=0
for t in $targets; do
	one "$t" &
	running=$((running + 1))
	if [ "$running" -ge "$JOBS" ]; then
		wait -n 2>/dev/null || wait
		running=$((running - 1))
	fi
done
wait

total=0
printf '%-16s %12s %8s %8s\n' target executions corpus crashes
for t in $targets; do
	set -- $(cat "$OUT/$t/result" 2>/dev/null || echo "0 0 1 1")
	printf '%-16s %12s %8s %8s\n' "$t" "$1" "$2" "$3"
	total=$((total + $3))
	if [ "$3" -ne 0 ]; then
		echo "  $t: see $OUT/$t/log and $OUT/$t/crashes/" >&2
	fi
done
echo "fuzz: ${SECS}s per target, $(echo $targets | wc -w) targets, $total crashes"
[ "$total" -eq 0 ]
