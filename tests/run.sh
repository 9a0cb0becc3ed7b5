#!/bin/sh
# run.sh - the test runner `make check` calls last: unit tests (normal and
# ASan+UBSan builds), then every integration suite once per runtime against a
# private Docker Engine and Podman service, then a check that the runtime
# fixture left nothing behind, and that the run left no new untracked file in
# the tree. Ends with exactly one line `N passed, N failed`;
# exits non-zero if anything failed. Never counts a skip, a missing runtime or
# a fixture that did not come up as anything but a failure.
#
# A suite that needs no container runtime carries a line `SBX_ONCE = True`
# and runs once (under the first runtime's environment) instead of per runtime.
#
# Between them, the fuzz smoke: every libFuzzer target of tests/fuzz/ for
# FUZZ_SMOKE_SECONDS (default 20) over its corpus, one test each (skipped
# when SBX_SUITES names a subset, unless SBX_FUZZ=1).
#
# Environment: SBX_SUITE_TIMEOUT (s, per suite and runtime, default 900),
# SBX_UNIT_TIMEOUT (s, per unit binary, default 300), SBX_SUITES (space
# separated suite files to run instead of all tests/integration/test_*.py).

[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u -o pipefail

cd "$(dirname "$0")/.." || exit 1
REPO=$(pwd)
OUT=$REPO/tests/out
LOGS=$OUT/logs
PYTHON=/usr/bin/python3
RUNTIMES="docker podman"
SUITE_TIMEOUT=${SBX_SUITE_TIMEOUT:-900}
UNIT_TIMEOUT=${SBX_UNIT_TIMEOUT:-300}

PASSED=0
FAILED=0
RTDIR=""

rm -rf "$LOGS" "$OUT/scratch"
mkdir -p "$LOGS" "$OUT/scratch"

# Files in the tree that git does not ignore and does not track: listed now
# and at the end, where a new one fails the run (everything a test writes
# belongs under tests/out/; an empty `oom` at the root was committed twice).
untracked() { git -C "$REPO" ls-files --others --exclude-standard 2>/dev/null | sort; }
untracked >"$LOGS/untracked.before"

now_ms() { date +%s%3N; }

# report NAME PASSED FAILED [LOG]: one summary line per suite; on failure the
# log follows (unittest's "... ok" lines dropped to keep it readable).
report() {
	local name=$1 p=$2 f=$3 log=${4:-}
	PASSED=$((PASSED + p))
	FAILED=$((FAILED + f))
	if [ "$f" -eq 0 ]; then
		printf 'PASS  %-44s %d passed\n' "$name" "$p"
	else
		printf 'FAIL  %-44s %d passed, %d failed\n' "$name" "$p" "$f"
		if [ -n "$log" ] && [ -f "$log" ]; then
			grep -v -e ' \.\.\. ok$' -e '^ok [0-9]' "$log" | tail -n 150 | sed 's/^/    | /'
			printf '    (full log: %s)\n' "${log#"$REPO"/}"
		fi
	fi
}

# ---------------------------------------------------------------- layers

# The include rules of adr/0020 (proto/ includes nothing of ours, no cycle
# between folders): one cheap check, counted as one test.
if "$PYTHON" tests/tools/check_layers.py "$REPO" >"$LOGS/check_layers.log" 2>&1; then
	report "tools/check_layers" 1 0
else
	report "tools/check_layers" 0 1 "$LOGS/check_layers.log"
fi

# ---------------------------------------------------------------- unit

run_unit() {
	local bin=$1 kind=$2 log name rc ok notok plan missing
	name="unit/$kind/$(basename "$bin")"
	log="$LOGS/unit-$kind-$(basename "$bin").log"
	CMOCKA_MESSAGE_OUTPUT=TAP \
	ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0} \
	UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1} \
		timeout -k 5 "$UNIT_TIMEOUT" "$bin" >"$log" 2>&1
	rc=$?
	ok=$(grep -c '^ok ' "$log")
	notok=$(grep -c '^not ok ' "$log")
	plan=$(sed -n 's/^[[:space:]]*1\.\.\([0-9][0-9]*\).*/\1/p' "$log" | awk '{s += $1} END {print s + 0}')
	# Tests a crash (or a sanitizer abort) kept from reporting count as failed.
	missing=$((plan - ok - notok))
	[ "$missing" -lt 0 ] && missing=0
	notok=$((notok + missing))
	if [ "$rc" -ne 0 ] && [ "$notok" -eq 0 ]; then
		# All reported ok but the binary failed: a leak report, a timeout (124)...
		echo "exit status $rc with every test reported ok (sanitizer report or timeout)" >>"$log"
		notok=1
	fi
	if [ $((ok + notok)) -eq 0 ]; then
		echo "no test reported" >>"$log"
		notok=1
	fi
	report "$name" "$ok" "$notok" "$log"
}

units=0
for kind in out san; do
	for bin in build/$kind/tests/test_*; do
		[ -f "$bin" ] && [ -x "$bin" ] || continue
		run_unit "$bin" "$kind"
		units=$((units + 1))
	done
done
[ "$units" -eq 0 ] && echo "unit: no test binaries in build/out/tests or build/san/tests"

# ---------------------------------------------------------------- fuzz smoke

# Every libFuzzer target (make FUZZ=1 fuzzers) for FUZZ_SMOKE_SECONDS (20 s)
# over its corpus and regression inputs, two at a time; each is one test,
# failed by any crash, leak, hang or runaway allocation (tests/fuzz/run.sh).
# A partial run (SBX_SUITES set) skips it unless SBX_FUZZ=1.
if [ -n "${SBX_SUITES:-}" ] && [ "${SBX_FUZZ:-0}" != 1 ]; then
	:
elif ls build/fuzz/fuzzers/fuzz_* >/dev/null 2>&1; then
	t0=$(now_ms)
	bash tests/fuzz/run.sh smoke >"$LOGS/fuzz-smoke.log" 2>&1
	for res in tests/out/fuzz/*/result; do
		[ -f "$res" ] || continue
		t=$(basename "$(dirname "$res")")
		[ -x "build/fuzz/fuzzers/fuzz_$t" ] || continue
		read -r execs corpus crashes rc <"$res"
		if [ "$crashes" -eq 0 ] && [ "$execs" -gt 0 ]; then
			report "fuzz/$t ($execs runs, corpus $corpus)" 1 0
		else
			report "fuzz/$t" 0 1 "$REPO/tests/out/fuzz/$t/log"
		fi
	done
	printf 'fuzz smoke in %d ms\n' $(($(now_ms) - t0))
else
	report "fuzz smoke (no targets in build/fuzz/fuzzers: make FUZZ=1 fuzzers)" 0 1
fi

# ---------------------------------------------------------------- integration

down() {
	[ -n "$RTDIR" ] || return 0
	SBX_RUNTIME_LOGS_TO="$LOGS/runtimes" bash tests/harness/runtimes.sh down "$RTDIR" \
		>>"$LOGS/runtimes.log" 2>&1 || echo "runtimes down failed: see tests/out/logs/runtimes.log" >&2
}
trap down EXIT
trap 'exit 130' INT TERM HUP

suites=${SBX_SUITES:-$(ls tests/integration/test_*.py 2>/dev/null)}

RTDIR=$(mktemp -d "$OUT/rt.XXXXXX")
t0=$(now_ms)
if bash tests/harness/runtimes.sh up "$RTDIR" >"$LOGS/runtimes.log" 2>&1; then
	printf 'runtimes up in %d ms (docker, podman)\n' $(($(now_ms) - t0))
	report "runtime fixture up" 1 0
else
	report "runtime fixture up" 0 1 "$LOGS/runtimes.log"
fi
up_list=""
if [ -f "$RTDIR/env" ]; then
	up_list=$(sed -n 's/^SBX_RUNTIMES=//p' "$RTDIR/env")
fi

for rt in $RUNTIMES; do
	case ",$up_list," in
	*",$rt,"*) ;;
	*)
		for suite in $suites; do
			if grep -q '^SBX_ONCE = True' "$suite" && [ "$rt" != "${RUNTIMES%% *}" ]; then
				continue
			fi
			report "$rt $(basename "$suite" .py) (runtime not up)" 0 1
		done
		continue
		;;
	esac
	for suite in $suites; do
		name=$(basename "$suite" .py)
		# A suite that needs no runtime says so (a line `SBX_ONCE = True`)
		# and runs once, with the first runtime's environment.
		if grep -q '^SBX_ONCE = True' "$suite" && [ "$rt" != "${RUNTIMES%% *}" ]; then
			continue
		fi
		log="$LOGS/$rt-$name.log"
		scratch="$OUT/scratch/$rt-$name"
		mkdir -p "$scratch"
		host=$(sed -n "s/^SBX_$(echo "$rt" | tr a-z A-Z)_HOST=//p" "$RTDIR/env")
		(
			set -a
			. "$RTDIR/env"
			set +a
			export SBX_TEST_RUNTIME="$rt" SBX_RUNTIME_HOST="$host" DOCKER_HOST="$host"
			export SBX_TEST_OUT="$scratch" PYTHONDONTWRITEBYTECODE=1
			exec timeout -k 10 "$SUITE_TIMEOUT" "$PYTHON" tests/integration/runner.py "$suite"
		) >"$log" 2>&1
		rc=$?
		counts=$(grep '^SBXTEST-COUNTS ' "$log" | tail -n 1)
		if [ -z "$counts" ]; then
			[ "$rc" -eq 124 ] && echo "suite timed out after ${SUITE_TIMEOUT}s" >>"$log"
			echo "suite exited with status $rc before reporting its counts" >>"$log"
			report "$rt $name" 0 1 "$log"
			continue
		fi
		p=$(echo "$counts" | sed -n 's/.*passed=\([0-9]*\).*/\1/p')
		f=$(echo "$counts" | sed -n 's/.*failed=\([0-9]*\).*/\1/p')
		if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then
			echo "runner exited with status $rc" >>"$log"
			f=1
		fi
		report "$rt $name" "$p" "$f" "$log"
	done
done

# The fixture must leave no process and no mount behind: bring it down now
# and check, as one test.
t0=$(now_ms)
down
dir=$RTDIR
RTDIR=""
if bash tests/harness/runtimes.sh gone "$dir" >"$LOGS/gone.log" 2>&1; then
	printf 'runtimes down in %d ms\n' $(($(now_ms) - t0))
	report "runtime fixture gone after the suites" 1 0
else
	report "runtime fixture gone after the suites" 0 1 "$LOGS/gone.log"
fi

untracked >"$LOGS/untracked.after"
stray=$(comm -13 "$LOGS/untracked.before" "$LOGS/untracked.after")
if [ -z "$stray" ]; then
	report "no stray files left in the tree" 1 0
else
	printf 'new untracked files after the run (a test wrote outside tests/out/):\n%s\n' \
		"$stray" >"$LOGS/stray.log"
	report "no stray files left in the tree" 0 1 "$LOGS/stray.log"
fi

echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
