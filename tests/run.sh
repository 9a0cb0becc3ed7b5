#!/bin/sh
# run.sh - the test runner `make check` calls last: the tools checks, unit
# tests (normal and ASan+UBSan builds), the fuzz smoke, then every integration
# suite once per runtime against a private Docker Engine and Podman service,
# then a check that the runtime fixture left nothing behind, and that the run
# left no new untracked file in the tree. Ends with exactly
# one line `N passed, N failed`; exits non-zero if anything failed. Never
# counts a skip, a missing runtime or a fixture that did not come up as
# anything but a failure.
#
# Independent work runs at once, in lanes (adr/0039). A lane runs its jobs one
# after another; at most SBX_JOBS lanes run at a time (default 4, all of them:
# the integration lanes mostly wait on the runtimes):
#   docker, podman  that runtime's suites, in order, against the one fixture
#                   daemon of that runtime: two suites never share a runtime
#                   at the same time (the broker fixtures check that nothing
#                   labelled is left in the whole engine, and test_faults.py
#                   kills and restarts the daemon);
#   host            tests/tools/check_*.py, the unit binaries (build/out, then
#                   build/san), the fuzz smoke (FUZZ_JOBS=1: one core, so the
#                   integration lanes keep the other);
#   once            the suites with a line `SBX_ONCE = True`: they need no
#                   runtime of the fixture and run once, with the first
#                   runtime's environment. A suite that runs once but drives
#                   one fixture runtime says which (`SBX_ONCE = "docker"`)
#                   and runs in that runtime's lane.
# Each job's lines are printed together when it ends (a lock keeps blocks of
# different lanes apart), each with its wall time and, for a suite, the CPU
# time of its process tree; before the last line, one line per lane with its
# wall and CPU time. tests/out/logs/durations.tsv has the same figures.
#
# The fuzz smoke: every libFuzzer target of tests/fuzz/ for FUZZ_SMOKE_SECONDS
# (default 20) over its corpus, one test each (skipped when SBX_SUITES names a
# subset, unless SBX_FUZZ=1; SBX_FUZZ=0 always skips it).
#
# Environment: SBX_SUITE_TIMEOUT (s, per suite and runtime, default 900),
# SBX_UNIT_TIMEOUT (s, per unit binary, default 300), SBX_SUITES (space
# separated suite files to run instead of all tests/integration/test_*.py),
# SBX_RUNTIMES (default "docker podman"; `make check-fast` uses "docker"),
# SBX_SKIP_ONCE=1 (skip the suites that run once), SBX_JOBS (lanes at a time),
# SBX_RERUN=0 (a failed integration suite is not run once more, adr/0073),
# SBX_CHECK_BUILD=san|san,fuzz (the host lane first builds the sanitizer unit
# tests and/or the fuzzers with $MAKE, a failed build one failed test: `make
# check` starts the integration lanes while those builds run).

[ -n "${BASH_VERSION:-}" ] || exec bash "$0" "$@"
set -u -o pipefail

cd "$(dirname "$0")/.." || exit 1
REPO=$(pwd)
OUT=$REPO/tests/out
LOGS=$OUT/logs
PYTHON=/usr/bin/python3
RUNTIMES=${SBX_RUNTIMES:-docker podman}
FIRST_RT=${RUNTIMES%% *}
SUITE_TIMEOUT=${SBX_SUITE_TIMEOUT:-900}
UNIT_TIMEOUT=${SBX_UNIT_TIMEOUT:-300}
JOBS=${SBX_JOBS:-4}
MAKE=${MAKE:-make}

RTDIR=""
LANES=$LOGS/lanes          # per lane: its jobs' blocks, counts and times
COUNTS=$LANES/counts       # one "PASSED FAILED" line per report
LOCK=$LANES/print.lock

# artifacts: what suites keep for a person to look at (docs/testing.md)
rm -rf "$LOGS" "$OUT/scratch" "$OUT/artifacts"
mkdir -p "$LOGS" "$OUT/scratch" "$LANES" "$OUT/artifacts"
: >"$COUNTS"
printf 'lane\tname\tseconds\tcpu_seconds\tpassed\tfailed\n' >"$LOGS/durations.tsv"

# Files in the tree that git does not ignore and does not track: listed now
# and at the end, where a new one fails the run (everything a test writes
# belongs under tests/out/; an empty `oom` at the root was committed twice).
untracked() { git -C "$REPO" ls-files --others --exclude-standard 2>/dev/null | sort; }
untracked >"$LOGS/untracked.before"

now_ms() { date +%s%3N; }

# The current job's buffered lines (set by job_begin).
BLOCK=""

job_begin() { BLOCK=$LANES/$1.block; : >"$BLOCK"; }

# job_end: print the job's lines as one block.
job_end() {
	[ -s "$BLOCK" ] && flock "$LOCK" cat "$BLOCK"
	rm -f "$BLOCK"
}

# clip: lines cut at 400 characters (a daemon's JSON log line can be
# thousands), so a failure's excerpt keeps its lines and CI's view of the
# output keeps the excerpt.
clip() { awk '{ if (length($0) > 400) print substr($0, 1, 400) " [cut]"; else print }'; }

# report NAME PASSED FAILED LOG SECS [CPU]: one summary line per test or suite
# into the current block; on failure the log follows (unittest's "... ok"
# lines dropped to keep it readable). SECS and CPU are whole seconds ("" for
# none).
report() {
	local name=$1 p=$2 f=$3 log=${4:-} secs=${5:-} cpu=${6:-} t=""
	[ -n "$secs" ] && t="  ($secs s${cpu:+, cpu $cpu s})"
	echo "$p $f" >>"$COUNTS"
	printf '%s\t%s\t%s\t%s\t%d\t%d\n' "${LANE:-main}" "$name" "${secs:--}" "${cpu:--}" "$p" "$f" \
		>>"$LOGS/durations.tsv"
	{
		if [ "$f" -eq 0 ]; then
			printf 'PASS  %-44s %d passed%s\n' "$name" "$p" "$t"
		else
			printf 'FAIL  %-44s %d passed, %d failed%s\n' "$name" "$p" "$f" "$t"
			if [ -n "$log" ] && [ -f "$log" ]; then
				grep -v -e ' \.\.\. ok$' -e '^ok [0-9]' "$log" | tail -n 150 | clip | sed 's/^/    | /'
				printf '    (full log: %s)\n' "${log#"$REPO"/}"
			fi
		fi
	} >>"$BLOCK"
}

# note TEXT: an informational line into the current block.
note() { echo "$*" >>"$BLOCK"; }

secs_since() { echo $((($(now_ms) - $1 + 500) / 1000)); }

# timed LOG CPUFILE CMD...: CMD with stdout+stderr to LOG; CPUFILE gets the
# user+sys seconds of CMD's process tree (whatever it waited for).
timed() {
	local log=$1 cpuf=$2
	shift 2
	/usr/bin/time -q -f '%U %S' -o "$cpuf" "$@" >"$log" 2>&1
}

# (GNU time puts a line "Command exited with non-zero status N" first.)
cpu_of() { tail -n 1 "$1" 2>/dev/null | awk '{printf "%d", $1 + $2 + 0.5}'; }

# ---------------------------------------------------------------- host lane

# tests/tools/check_*.py REPO: one test each, exit 0 = pass (the include rules
# of adr/0020, the names docs and ADRs use...).
run_tools() {
	local c name log t0 rc
	job_begin tools
	for c in tests/tools/check_*.py; do
		[ -f "$c" ] || continue
		name=$(basename "$c" .py)
		log="$LOGS/$name.log"
		t0=$(now_ms)
		"$PYTHON" "$c" "$REPO" >"$log" 2>&1
		rc=$?
		if [ "$rc" -eq 0 ]; then
			report "tools/$name" 1 0 "" "$(secs_since "$t0")"
		else
			report "tools/$name" 0 1 "$log" "$(secs_since "$t0")"
		fi
	done
	job_end
}

# build WHAT: one of the builds SBX_CHECK_BUILD asks for. A failed build is
# one failed test (and its tests do not run); a build that works is a line,
# not a test, so the count matches a run whose builds came first.
build() {
	local what=$1 log="$LOGS/build-$1.log" t0 rc
	t0=$(now_ms)
	case $what in
	san) $MAKE -j2 SANITIZE=address,undefined unit >"$log" 2>&1 ;;
	fuzz) $MAKE -j2 FUZZ=1 fuzzers >"$log" 2>&1 ;;
	esac
	rc=$?
	if [ "$rc" -eq 0 ]; then
		note "$(printf 'build %-4s in %d s' "$what" "$(secs_since "$t0")")"
	else
		report "build/$what" 0 1 "$log" "$(secs_since "$t0")"
	fi
	return "$rc"
}

run_unit() {
	local bin=$1 kind=$2 log name rc ok notok plan missing t0
	name="unit/$kind/$(basename "$bin")"
	log="$LOGS/unit-$kind-$(basename "$bin").log"
	t0=$(now_ms)
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
	report "$name" "$ok" "$notok" "$log" "$(secs_since "$t0")"
}

# units KIND: every unit binary of build/KIND, one block.
units() {
	local kind=$1 bin n=0
	job_begin "unit-$kind"
	for bin in build/$kind/tests/test_*; do
		[ -f "$bin" ] && [ -x "$bin" ] || continue
		run_unit "$bin" "$kind"
		n=$((n + 1))
	done
	[ "$n" -eq 0 ] && report "unit/$kind (no test binaries in build/$kind/tests)" 0 1
	job_end
}

# Every libFuzzer target (make FUZZ=1 fuzzers) for FUZZ_SMOKE_SECONDS (20 s)
# over its corpus and regression inputs; each is one test, failed by any
# crash, leak, hang or runaway allocation (tests/fuzz/run.sh).
fuzz_smoke() {
	local t0 res t execs corpus crashes rc
	job_begin fuzz
	if ls build/fuzz/fuzzers/fuzz_* >/dev/null 2>&1; then
		t0=$(now_ms)
		rm -rf tests/out/fuzz
		FUZZ_JOBS=${FUZZ_JOBS:-1} bash tests/fuzz/run.sh smoke >"$LOGS/fuzz-smoke.log" 2>&1
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
		note "fuzz smoke in $(secs_since "$t0") s"
	else
		report "fuzz smoke (no targets in build/fuzz/fuzzers: make FUZZ=1 fuzzers)" 0 1
	fi
	job_end
}

lane_host() {
	local san=1 fuzz=1
	run_tools
	case ",${SBX_CHECK_BUILD:-}," in
	*,san,*) job_begin build-san; build san || san=0; job_end ;;
	esac
	units out
	# A subset run (SBX_SUITES) runs the sanitizer units only when it built
	# them now: build/san may be missing or older than the tree.
	if [ -n "${SBX_SUITES:-}" ] && case ",${SBX_CHECK_BUILD:-}," in *,san,*) false ;; *) true ;; esac; then
		job_begin unit-san
		note "unit/san not run: a run with SBX_SUITES uses build/out only (SBX_CHECK_BUILD=san builds and runs them)"
		job_end
	elif [ "$san" -eq 1 ]; then
		units san
	fi
	if [ "${SBX_FUZZ:-}" = 0 ] || { [ -n "${SBX_SUITES:-}" ] && [ "${SBX_FUZZ:-0}" != 1 ]; }; then
		return 0
	fi
	case ",${SBX_CHECK_BUILD:-}," in
	*,fuzz,*) job_begin build-fuzz; build fuzz || fuzz=0; job_end ;;
	esac
	[ "$fuzz" -eq 1 ] && fuzz_smoke
}

# ---------------------------------------------------------------- integration

# once_of SUITE: "" for a suite run per runtime, "any" for one that runs once
# with no fixture runtime, else the runtime it runs once against.
once_of() {
	sed -n 's/^SBX_ONCE = \(True\|"\([a-z]*\)"\)$/\1/p' "$1" | head -n 1 |
		sed -e 's/^True$/any/' -e 's/"//g'
}

# suite_once RT SUITE LOG SCRATCH: one run of the suite into LOG; sets
# S_P, S_F (its counts; a run that printed none is one failure), S_SECS and
# S_CPU.
suite_once() {
	local rt=$1 suite=$2 log=$3 scratch=$4 host rc counts t0
	host=$(sed -n "s/^SBX_$(echo "$rt" | tr a-z A-Z)_HOST=//p" "$RTDIR/env")
	t0=$(now_ms)
	timed "$log" "$log.cpu" bash -c '
		set -a
		. "$1/env"
		set +a
		export SBX_TEST_RUNTIME="$2" SBX_RUNTIME_HOST="$3" DOCKER_HOST="$3"
		export SBX_TEST_OUT="$4" PYTHONDONTWRITEBYTECODE=1
		exec timeout -k 10 "$5" "$6" tests/integration/runner.py "$7"
	' run-suite "$RTDIR" "$rt" "$host" "$scratch" "$SUITE_TIMEOUT" "$PYTHON" "$suite"
	rc=$?
	S_SECS=$(secs_since "$t0")
	S_CPU=$(cpu_of "$log.cpu")
	counts=$(grep '^SBXTEST-COUNTS ' "$log" | tail -n 1)
	if [ -z "$counts" ]; then
		[ "$rc" -eq 124 ] && echo "suite timed out after ${SUITE_TIMEOUT}s" >>"$log"
		echo "suite exited with status $rc before reporting its counts" >>"$log"
		S_P=0 S_F=1
		return
	fi
	S_P=$(echo "$counts" | sed -n 's/.*passed=\([0-9]*\).*/\1/p')
	S_F=$(echo "$counts" | sed -n 's/.*failed=\([0-9]*\).*/\1/p')
	if [ "$rc" -ne 0 ] && [ "$S_F" -eq 0 ]; then
		echo "runner exited with status $rc" >>"$log"
		S_F=1
	fi
}

# suite RT SUITE: one integration suite with runtime RT's environment, one
# block. A failed run is run once more (SBX_RERUN=0: never; adr/0073): the
# second run's counts are the suite's, and the first run's failure is
# printed in the block all the same, with a RERUN line, and listed in
# tests/out/logs/reruns.txt and in the run's closing lines.
suite() {
	local rt=$1 suite=$2 name log scratch p f secs cpu
	name=$(basename "$suite" .py)
	log="$LOGS/$rt-$name.log"
	scratch="$OUT/scratch/$rt-$name"
	mkdir -p "$scratch"
	job_begin "$rt-$name"
	suite_once "$rt" "$suite" "$log" "$scratch"
	if [ "$S_F" -gt 0 ] && [ "${SBX_RERUN:-1}" != 0 ]; then
		mv "$log" "$log.first"
		p=$S_P f=$S_F secs=$S_SECS cpu=$S_CPU
		{
			printf 'RERUN %-44s %d passed, %d failed at its first run  (%s s, cpu %s s); its failures:\n' \
				"$rt $name" "$p" "$f" "$secs" "$cpu"
			grep -v -e ' \.\.\. ok$' -e '^ok [0-9]' "$log.first" | tail -n 60 | clip | sed 's/^/    | /'
			printf '    (full log of the first run: %s)\n' "${log#"$REPO"/}.first"
		} >>"$BLOCK"
		printf '%s %s: %d passed, %d failed at its first run\n' "$rt" "$name" "$p" "$f" \
			>>"$LOGS/reruns.txt"
		rm -rf "$scratch"
		mkdir -p "$scratch"
		suite_once "$rt" "$suite" "$log" "$scratch"
		S_SECS=$((S_SECS + secs))
		printf '%s %s: its re-run: %d passed, %d failed\n' "$rt" "$name" "$S_P" "$S_F" \
			>>"$LOGS/reruns.txt"
	fi
	report "$rt $name" "$S_P" "$S_F" "$log" "$S_SECS" "$S_CPU"
	job_end
}

# lane_suites LABEL RT SUITE...: the suites, one after another, with RT's
# environment; all failed at once when RT is not up.
lane_suites() {
	local label=$1 rt=$2 s
	shift 2
	for s in "$@"; do
		case ",$UP_LIST," in
		*",$rt,"*) suite "$rt" "$s" ;;
		*)
			job_begin "$rt-$(basename "$s" .py)"
			report "$label $(basename "$s" .py) (runtime not up)" 0 1
			job_end
			;;
		esac
	done
}

# ---------------------------------------------------------------- lanes

# lane NAME FUNCTION ARGS...: run in the background; records wall and CPU.
LANE_PIDS=""
RUNNING=0
lane() {
	local name=$1
	shift
	while [ "$RUNNING" -ge "$JOBS" ]; do
		wait -n
		RUNNING=$((RUNNING - 1))
	done
	(
		LANE=$name
		t0=$(now_ms)
		"$@"
		# children's user and system time, as bash's `times` prints it
		# (run in this shell: in a pipe or $(...) it would count a fork's)
		times >"$LANES/$name.times"
		cpu=$(tail -n 1 "$LANES/$name.times" | awk '{
			s = 0
			for (i = 1; i <= 2; i++) { split($i, a, /[ms]/); s += a[1] * 60 + a[2] }
			printf "%d", s + 0.5 }')
		printf '%s\t%s\t%s\n' "$name" "$(secs_since "$t0")" "$cpu" >"$LANES/$name.time"
	) &
	LANE_PIDS="$LANE_PIDS $!"
	RUNNING=$((RUNNING + 1))
}

down() {
	[ -n "$RTDIR" ] || return 0
	SBX_RUNTIME_LOGS_TO="$LOGS/runtimes" bash tests/harness/runtimes.sh down "$RTDIR" \
		>>"$LOGS/runtimes.log" 2>&1 || echo "runtimes down failed: see tests/out/logs/runtimes.log" >&2
}
# tree PID: PID and its descendants, parents first.
tree() {
	local p
	echo "$1"
	for p in $(ps -o pid= --ppid "$1" 2>/dev/null); do tree "$p"; done
}
# On an interrupt: every lane's process tree (the background lanes ignore
# SIGINT, and a suite would outlive its lane), then the fixture (trap EXIT).
stop_lanes() {
	local l pids=""
	for l in $LANE_PIDS; do pids="$pids $(tree "$l")"; done
	# shellcheck disable=SC2086 # the pid list splits on purpose
	[ -n "${pids// /}" ] && kill $pids 2>/dev/null
	wait
	exit 130
}
trap down EXIT
trap stop_lanes INT TERM HUP

T_START=$(now_ms)
suites=${SBX_SUITES:-$(ls tests/integration/test_*.py 2>/dev/null)}

# Which runtimes the fixture starts: those of RUNTIMES a suite will use.
only=""
[ "$RUNTIMES" = docker ] && only=docker
[ "$RUNTIMES" = podman ] && only=podman

# The vm suites' qemu drops to vm_runas, the user sbx-vm (adr/0069) that
# deploy/deps.sh makes; a run without deps.sh (this script alone) makes it.
if [ "$(id -u)" -eq 0 ] && ! getent passwd sbx-vm >/dev/null 2>&1; then
	useradd --system --no-create-home --shell /usr/sbin/nologin sbx-vm
fi

UP_LIST=""
RTDIR=$(mktemp -d "$OUT/rt.XXXXXX")
job_begin fixture-up
t0=$(now_ms)
if SBX_RUNTIMES_ONLY=$only bash tests/harness/runtimes.sh up "$RTDIR" >"$LOGS/runtimes.log" 2>&1; then
	report "runtime fixture up ($RUNTIMES)" 1 0 "" "$(secs_since "$t0")"
else
	report "runtime fixture up ($RUNTIMES)" 0 1 "$LOGS/runtimes.log" "$(secs_since "$t0")"
fi
job_end
[ -f "$RTDIR/env" ] && UP_LIST=$(sed -n 's/^SBX_RUNTIMES=//p' "$RTDIR/env")

# Sort the suites into lanes (see the top of this file).
once_any=""
for rt in $RUNTIMES; do eval "lane_$rt=''"; done
for s in $suites; do
	o=$(once_of "$s")
	case $o in
	"") for rt in $RUNTIMES; do eval "lane_$rt=\"\$lane_$rt $s\""; done ;;
	any) [ "${SBX_SKIP_ONCE:-0}" = 1 ] || once_any="$once_any $s" ;;
	*)
		[ "${SBX_SKIP_ONCE:-0}" = 1 ] && continue
		case " $RUNTIMES " in *" $o "*) eval "lane_$o=\"\$lane_$o $s\"" ;; esac
		;;
	esac
done

for rt in $RUNTIMES; do
	eval "set -- \$lane_$rt"
	[ $# -gt 0 ] && lane "$rt" lane_suites "$rt" "$rt" "$@"
done
lane host lane_host
# shellcheck disable=SC2086 # the suite list splits on purpose
[ -n "$once_any" ] && lane once lane_suites once "$FIRST_RT" $once_any
wait

# The fixture must leave no process and no mount behind: bring it down now
# and check, as one test.
# fixture_cpu: CPU seconds (theirs and their reaped children's) of the
# fixture's processes still running: dockerd, containerd, shims, the podman
# service; what exited without being reaped by one of them is not counted.
fixture_cpu() {
	local run pid
	run=$(sed -n 's/^SBX_RUNTIMES_RUN=//p' "$RTDIR/env" 2>/dev/null)
	grep -laF -e "$RTDIR/" -e "${run:-$RTDIR}/" /proc/[0-9]*/cmdline 2>/dev/null |
		cut -d/ -f3 | while read -r pid; do
			sed 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{print $12 + $13 + $14 + $15}'
		done | awk -v hz="$(getconf CLK_TCK)" '{s += $1} END {printf "%d", s / hz + 0.5}'
}

job_begin fixture-gone
FIXTURE_CPU=$(fixture_cpu)
t0=$(now_ms)
down
dir=$RTDIR
RTDIR=""
if bash tests/harness/runtimes.sh gone "$dir" >"$LOGS/gone.log" 2>&1; then
	report "runtime fixture gone after the suites" 1 0 "" "$(secs_since "$t0")"
else
	report "runtime fixture gone after the suites" 0 1 "$LOGS/gone.log" "$(secs_since "$t0")"
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
for f in "$LANES"/*.time; do
	[ -f "$f" ] || continue
	IFS=$'\t' read -r name wall cpu <"$f"
	note "$(printf 'lane %-8s %5d s wall, %5d s cpu' "$name" "$wall" "$cpu")"
done
note "$(printf 'fixture daemons %5d s cpu' "$FIXTURE_CPU")"
note "$(printf 'all %d s wall (lanes at once: %s)' "$(secs_since "$T_START")" "$JOBS")"
if [ -s "$LOGS/reruns.txt" ]; then
	note "suites that failed at their first run and were run once more (adr/0073):"
	note "$(sed 's/^/  /' "$LOGS/reruns.txt")"
fi
job_end

read -r PASSED FAILED < <(awk '{p += $1; f += $2} END {print p + 0, f + 0}' "$COUNTS")
echo "$PASSED passed, $FAILED failed"
[ "$FAILED" -eq 0 ]
