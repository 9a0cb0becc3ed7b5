#!/bin/sh
# run.sh - `make bench`: start a private runtime, run tests/bench/bench.py against it, tear everything down.
#
#   BENCH_RUNTIMES=podman (default) | docker | docker,podman
#   BENCH_ONLY=cold,warm (only those figures, for a quick look; e2b: the E2B SDK rows),
#   BUILD=build/out (set by make), BENCH_OUT=docs/bench.md (table; with two
#   runtimes the second goes to docs/bench-RUNTIME.md), other BENCH_* knobs:
#   see bench.py. The soak: BENCH_SOAK_SECONDS (default 1800),
#   BENCH_SOAK=0 (skip) | only (soak alone), see soak.py.
#   BENCH_KUBE=1 | only: driver = kubernetes on the fake (kube_bench.py).
#
# Podman alone is started by a lighter variant of tests/harness/runtimes.sh
# (no dockerd, no containerd): same configuration except nproc, raised from
# 512 to 8192 because uid 1000's processes of all sandboxes count against it
# and the 1,000-stream figure needs ~2 per exec (sbx-helper + the command).
# With docker in BENCH_RUNTIMES the harness's own `up` starts both.
# exit_command_delay is 60 s, not the harness's 5 s: podman forgets an exec
# that long after it exits, and a stream still draining then (100 concurrent
# execs with slow readers here) loses its exit code: the broker's inspect
# gets 500 "no such exec session" and reports runtime_error (seen here with
# 5 s in 8-17 of 100 concurrent streams).
# Teardown is always `runtimes.sh down`, which finds everything by DIR.

set -eu

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${BUILD:-build/out}
case "$BUILD" in /*) ;; *) BUILD=$ROOT/$BUILD ;; esac
RUNTIMES=${BENCH_RUNTIMES:-podman}
OUT=${BENCH_OUT:-$ROOT/docs/bench.md}
PY=/usr/bin/python3
HARNESS=$ROOT/tests/harness/runtimes.sh
DIR=/tmp/sbx-bench/r$$
WORK=/tmp/sbx-bench/w$$

log() { printf 'bench: %s\n' "$*" >&2; }

teardown() {
	rc=$?
	trap - EXIT INT TERM
	for f in "$WORK"/*.pid; do
		[ -f "$f" ] || continue
		p=$(cat "$f")
		# only our own daemons: the pid must still run our build's binary
		if grep -aqF "$BUILD/" "/proc/$p/cmdline" 2>/dev/null; then
			kill -KILL "$p" 2>/dev/null || true
		fi
	done
	# A podman service holding ~1,000 exec sessions takes minutes to empty
	# through its API (and spawns a cleanup process per exec): kill it
	# first, so `down` finds it silent and SIGKILLs everything from DIR.
	p=$(cat "$DIR/podman/service.pid" 2>/dev/null || true)
	if [ -n "$p" ] && grep -aqF "$DIR/" "/proc/$p/cmdline" 2>/dev/null; then
		kill -KILL "$p" 2>/dev/null || true
	fi
	bash "$HARNESS" down "$DIR" >/dev/null 2>&1 || bash "$HARNESS" down "$DIR" || true
	if ! bash "$HARNESS" gone "$DIR"; then
		log "teardown left something behind (listed above)"
		rc=1
	fi
	rm -rf "$WORK"
	exit "$rc"
}

# podman_up DIR: podman service only, configured as runtimes.sh does.
podman_up() {
	d=$1
	run=/run
	[ -d /run ] && [ -w /run ] || run=/tmp
	run="$run/sbx-rt-$(printf '%s' "$d" | sha256sum | cut -c1-12)"
	p=$d/podman
	mkdir -p "$d/image/rootfs" "$p/root" "$p/networks" "$run/prun" "$run/ptmp"
	r=$d/image/rootfs
	mkdir -p "$r/bin" "$r/usr/bin" "$r/etc" "$r/work" "$r/tmp" "$r/.sbx" "$r/proc" \
		"$r/sys" "$r/dev" "$r/root"
	cp /bin/busybox "$r/bin/busybox"
	for a in $(/bin/busybox --list); do
		[ "$a" = busybox ] || ln -s busybox "$r/bin/$a"
	done
	ln -s ../../bin/env "$r/usr/bin/env"
	printf 'root:x:0:0:root:/root:/bin/sh\nsbx:x:1000:1000:sbx:/work:/bin/sh\n' > "$r/etc/passwd"
	printf 'root:x:0:\nsbx:x:1000:\n' > "$r/etc/group"
	chown 1000:1000 "$r/work"
	chmod 1777 "$r/tmp"
	tar --numeric-owner -C "$r" -cf "$d/image/sbx-test.tar" .
	cat > "$p/containers.conf" <<-EOF
	[containers]
	default_ulimits = ["nofile=1024:1024", "nproc=8192:8192"]
	log_driver = "k8s-file"
	[engine]
	runtime = "runc"
	cgroup_manager = "cgroupfs"
	events_logger = "file"
	exit_command_delay = 60
	tmp_dir = "$run/ptmp"
	[network]
	network_backend = "netavark"
	network_config_dir = "$p/networks"
	EOF
	cat > "$p/storage.conf" <<-EOF
	[storage]
	driver = "overlay"
	graphroot = "$p/root"
	runroot = "$run/prun"
	EOF
	# in $p: a container's conmon creates `oom` in the service's working directory
	CONTAINERS_CONF=$p/containers.conf CONTAINERS_STORAGE_CONF=$p/storage.conf \
		setsid env -C "$p" /usr/bin/podman system service --time=0 "unix://$p/podman.sock" \
		</dev/null >"$p/service.log" 2>&1 &
	echo $! > "$p/service.pid"
	# /_ping, not /version: Podman runs dpkg-query on each /version, and
	# under load the 2 s probes piled up (adr/0058)
	i=0
	until curl -sf --max-time 2 --unix-socket "$p/podman.sock" http://x/v1.41/_ping >/dev/null 2>&1; do
		i=$((i + 1))
		if [ "$i" -gt 400 ] || ! kill -0 "$(cat "$p/service.pid")" 2>/dev/null; then
			log "podman service did not come up:"
			tail -n 20 "$p/service.log" >&2
			return 1
		fi
		sleep 0.05
	done
	CONTAINERS_CONF=$p/containers.conf CONTAINERS_STORAGE_CONF=$p/storage.conf \
		/usr/bin/podman import --quiet --change "ENV PATH=/bin:/usr/bin" \
		"$d/image/sbx-test.tar" sbx-test:latest >/dev/null
}

[ "$(id -u)" -eq 0 ] || { log "must run as root (it starts a root podman service)"; exit 1; }
for b in sandbox-broker engine-raw sbx-helper wire-micro; do
	[ -x "$BUILD/$b" ] || { log "missing $BUILD/$b: run make bench"; exit 1; }
done
mkdir -p /tmp/sbx-bench
trap teardown EXIT
trap 'exit 130' INT TERM
# 1,000 streams: a socket each on the client, the api and the broker, twice.
ulimit -n 20000 2>/dev/null || ulimit -n "$(ulimit -Hn)"
mkdir -p "$WORK"

t0=$(date +%s)
case "$RUNTIMES" in
podman)
	podman_up "$DIR"
	;;
*)
	bash "$HARNESS" up "$DIR"
	;;
esac
first=1
for rt in $(echo "$RUNTIMES" | tr ',' ' '); do
	sock=$DIR/$rt/$rt.sock
	out=$OUT
	[ "$first" -eq 1 ] || out=$(dirname "$OUT")/bench-$rt.md
	first=0
	log "runtime $rt up after $(( $(date +%s) - t0 )) s; table goes to $out"
	if [ "${BENCH_SOAK:-1}" != only ] && [ "${BENCH_KUBE:-0}" != only ]; then
		"$PY" "$ROOT/tests/bench/bench.py" --build "$BUILD" --runtime "$rt" \
			--runtime-sock "$sock" --work "$WORK/$rt" --out "$out" \
			--dominates "$ROOT/tests/bench/profile.md" ${BENCH_ONLY:+--only "$BENCH_ONLY"}
	fi
	# The soak (tests/bench/soak.py): BENCH_SOAK_SECONDS (1800) of mixed
	# load; its section of $out is replaced. BENCH_SOAK=0 skips it,
	# BENCH_SOAK=only runs it without the figures above.
	if [ "${BENCH_SOAK:-1}" != 0 ] && [ "${BENCH_KUBE:-0}" != only ]; then
		"$PY" "$ROOT/tests/bench/soak.py" --build "$BUILD" --runtime "$rt" \
			--runtime-sock "$sock" --work "$WORK/soak-$rt" --out "$out"
	fi
	# driver = kubernetes on tests/k8s's fake (tests/bench/kube_bench.py,
	# adr/0072): BENCH_KUBE=1 adds it, BENCH_KUBE=only runs it alone; its
	# table goes to docs/bench-kube-RUNTIME.md.
	if [ "${BENCH_KUBE:-0}" != 0 ]; then
		SBX_RUNTIME_HOST="unix://$sock" SBX_TEST_RUNTIME="$rt" SBX_BUILD="$BUILD" \
			SBX_TEST_OUT="$WORK/kube-$rt" "$PY" "$ROOT/tests/bench/kube_bench.py" \
			> "$(dirname "$OUT")/bench-kube-$rt.md"
	fi
done
log "done in $(( $(date +%s) - t0 )) s"
