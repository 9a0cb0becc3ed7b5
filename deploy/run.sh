#!/bin/sh
# run.sh - `make run`: a running sbx on this machine (runtime, image, broker, api, keys) and a demo of an NPC exec streamed over SSE.
#
# Steps, each saying what failed and how to fix it:
#   1. runtime: $DOCKER_HOST if it answers /_ping, else /var/run/docker.sock
#      if it answers, else Podman's API service started on a private socket
#      with a private containers.conf (runc, ulimits under this host's hard
#      limits, cgroupfs; see docs/cli.md) and storage under the state dir.
#   2. the default sandbox image (deploy/image/build.sh) unless present.
#   3. a broker token (0600), sandbox-broker on a unix socket in the state
#      dir, sandbox-api on 127.0.0.1:$SBX_API_PORT (8080).
#   4. an operator and a player; their keys are saved 0600 in the state dir
#      and never printed.
#   5. the demo: an NPC, a Python program written into its /work through the
#      api's files route, run with its events shown as they arrive over SSE,
#      and a file it wrote read back; then the sbxctl commands to try next.
#   6. stays in the foreground until Ctrl-C, then stops the api, the broker
#      (and the Podman service if it started it). Sandboxes and volumes stay.
#
# sh deploy/run.sh --purge (or deploy/run.sh --purge) removes everything 'make run' made in SBX_RUN_DIR and
# says what, one line each: its sandboxes (the containers and /work volumes
# of the NPCs in its api's database, found by their labels), the helper
# volumes they mounted (unless another container uses one), the egress network when empty,
# the images it built (listed in $RUN/built-images), the private Podman
# storage and runroot when it started Podman, then the state directory (keys,
# token, databases, logs, image cache). Nothing of another broker's is
# touched. Refused while a 'make run' uses the directory; when the runtime
# cannot be reached it removes nothing and says so.
#
# Environment:
#   SBX_RUN_DIR        state directory (default ./.sbx-run)
#   SBX_API_PORT       api port on 127.0.0.1 (default 8080)
#   SBX_RUN_IMAGE      use this image, already in the runtime, instead of
#                      building sbx-default:bookworm (the tests use the
#                      busybox test image to skip the debootstrap:
#                      1–4 minutes the first time, depending on the mirror and the machine)
#   SBX_RUN_NPC        the demo NPC's name (default demo)
#   SBX_RUN_RUNTIME    docker | podman: skip the detection (podman: start
#                      the private service even if a Docker socket answers)
#   SBX_RUN_DEMO_ONLY  1: run the demo, stop the daemons and exit
# Exit status: 0 after Ctrl-C (or the demo with SBX_RUN_DEMO_ONLY=1), 1 when
# a step failed.

set -eu

REPO=$(cd "$(dirname "$0")/.." && pwd)
BIN=$REPO/build/out
SBX=$BIN/sbxctl
RUN=${SBX_RUN_DIR:-$REPO/.sbx-run}
MODE=run
case ${1:-} in
"") ;;
--purge) MODE=purge ;;
*) printf 'usage: %s [--purge]\n' "$0" >&2; exit 2 ;;
esac
PORT=${SBX_API_PORT:-8080}
NPC=${SBX_RUN_NPC:-demo}
DEFAULT_IMAGE=sbx-default:bookworm
# Allowlisted beside it: the browser image (adr/0064), built on demand with
# `sh deploy/image/build.sh --browser KIND SOCKET .sbx-run/image`.
BROWSER_IMAGE=sbx-browser:bookworm
IMAGE=${SBX_RUN_IMAGE:-$DEFAULT_IMAGE}
URL=http://127.0.0.1:$PORT

BROKER_PID=""
API_PID=""
PODMAN_PID=""
PODMAN_RUNROOT=""

say() { printf '==> %s\n' "$*"; }
note() { printf '    %s\n' "$*"; }

# Stops what this script started: api first (it drains exec streams), then
# the broker, then the Podman service. SIGTERM, SIGKILL after 20 s.
stop_pid() {
	pid=$1
	[ -n "$pid" ] || return 0
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	i=0
	while kill -0 "$pid" 2>/dev/null; do
		i=$((i + 1))
		if [ "$i" -gt 200 ]; then
			kill -KILL "$pid" 2>/dev/null || true
			break
		fi
		sleep 0.1
	done
	wait "$pid" 2>/dev/null || true
}

stop_all() {
	stop_pid "$API_PID"
	API_PID=""
	stop_pid "$BROKER_PID"
	BROKER_PID=""
	stop_pid "$PODMAN_PID"
	PODMAN_PID=""
	rm -f "$RUN/api.pid" "$RUN/broker.pid" "$RUN/podman.pid"
}

# die WHAT FIX [LOG]: names the failed step and the fix, shows the log tail.
die() {
	printf '\nrun.sh: FAILED: %s\n' "$1" >&2
	if [ $# -ge 3 ] && [ -s "$3" ]; then
		printf 'run.sh: last lines of %s:\n' "$3" >&2
		tail -n 12 "$3" | sed 's/^/  | /' >&2
	fi
	printf 'run.sh: fix: %s\n' "$2" >&2
	stop_all
	exit 1
}

on_signal() {
	trap '' INT TERM
	printf '\n'
	say "stopping sandbox-api and sandbox-broker ..."
	stop_all
	say "stopped. Sandboxes and their /work volumes stay (their containers keep running); 'make run' adopts them again."
	note "remove one with the daemons running:  sbxctl rm $NPC"
	note "remove everything it made (sandboxes, volumes, built images, state): sh deploy/run.sh --purge"
	exit 0
}
trap on_signal INT TERM

# The daemons read SBX_* settings from the environment (SPEC §9): they start
# with a clean one so only the flags below count. Started as
# `env -i ... setsid BIN &` (no shell function, no subshell): env and setsid
# exec, so $! is the daemon's own pid, and setsid keeps the terminal's Ctrl-C
# away from it: this script stops it, in order.
CLEANPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

ping_socket() {
	curl -sf --max-time 3 --unix-socket "$1" http://d/_ping >/dev/null 2>&1
}

has_image() {
	curl -sf --unix-socket "${RT_HOST#unix://}" "http://d/v1.41/images/$1/json" >/dev/null 2>&1
}

# ---------------------------------------------------------------- --purge

# engine METHOD PATH [curl args]: the Engine API of the recorded runtime;
# prints the body, fails on a status >= 400 (the body is kept in $RUN/.purge.err).
engine() {
	m=$1
	u=$2
	shift 2
	curl -sS --fail-with-body --max-time 60 --unix-socket "${RT_HOST#unix://}" \
		-X "$m" "$@" "http://d/v1.41$u" 2>"$RUN/.purge.err"
}

purge_private_podman() {
	P=$RUN/podman
	pod() { CONTAINERS_CONF=$P/containers.conf CONTAINERS_STORAGE_CONF=$P/storage.conf podman "$@"; }
	for c in $(pod ps -a --format '{{.Names}}' 2>/dev/null); do
		pod rm -f -t 0 "$c" >/dev/null 2>&1 && note "removed container $c"
	done
	for v in $(pod volume ls -q 2>/dev/null); do
		pod volume rm -f "$v" >/dev/null 2>&1 && note "removed volume $v"
	done
	pod images --format '{{.ID}} {{.Repository}}:{{.Tag}}' 2>/dev/null | while read -r id name; do
		pod rmi -f "$id" >/dev/null 2>&1 && note "removed image $name ($id)"
	done
	for n in $(pod network ls --format '{{.Name}}' 2>/dev/null); do
		[ "$n" = podman ] && continue
		pod network rm -f "$n" >/dev/null 2>&1 && note "removed network $n"
	done
	pod system reset -f >/dev/null 2>&1 || true
	if grep -q " $P/storage/overlay " /proc/mounts 2>/dev/null; then
		umount "$P/storage/overlay" 2>/dev/null || umount -l "$P/storage/overlay" 2>/dev/null || true
	fi
	PODMAN_RUNROOT=/run/sbx-run-$(printf '%s' "$RUN" | sha256sum | cut -c1-12)
	if [ -d "$PODMAN_RUNROOT" ]; then
		rm -rf "$PODMAN_RUNROOT" && note "removed Podman's runroot $PODMAN_RUNROOT"
	fi
	note "removed the private Podman storage $P"
}

purge_engine() {
	ping_socket "${RT_HOST#unix://}" ||
		die "the runtime at $RT_HOST does not answer; nothing was removed" \
		    "start it (the sandboxes of $RUN live there) and run --purge again"
	# Its sandboxes are those of the NPCs made through its api (the broker
	# also records labelled containers of others it finds on the runtime).
	ids=""
	helpers=""
	if [ -s "$RUN/api/api.db" ]; then
		command -v sqlite3 >/dev/null 2>&1 || die "sqlite3 is not installed" "run: sh deploy/deps.sh"
		ids=$(sqlite3 -readonly "$RUN/api/api.db" 'SELECT sandbox_id FROM npcs;') ||
			die "cannot read $RUN/api/api.db" "remove its sandboxes by hand, then rm -rf $RUN"
	fi
	for id in $ids; do
		filt=$(jq -cn --arg id "io.sbx.id=$id" '{label: ["io.sbx.managed=true", $id]}')
		list=$(engine GET "/containers/json?all=1" -G --data-urlencode "filters=$filt") ||
			die "listing the containers of sandbox $id failed: $(cat "$RUN/.purge.err")" "see the runtime's log"
		# The labels are checked here again: Podman 4.3 matches a list of
		# label filters when any one matches, not all.
		list=$(printf '%s' "$list" | jq --arg id "$id" -c '[.[] | select(.Labels["io.sbx.managed"] == "true" and .Labels["io.sbx.id"] == $id)]')
		helpers="$helpers $(printf '%s' "$list" | jq -r '.[] | .Labels["io.sbx.helper"] // empty')"
		for c in $(printf '%s' "$list" | jq -r '.[] | .Id + "=" + (.Names[0] | ltrimstr("/"))'); do
			engine DELETE "/containers/${c%%=*}?force=1" >/dev/null ||
				die "removing container ${c#*=} failed: $(cat "$RUN/.purge.err")" "see the runtime's log"
			note "removed sandbox $id: container ${c#*=} ($(printf '%s' "${c%%=*}" | cut -c1-12))"
		done
		list=$(engine GET "/volumes" -G --data-urlencode "filters=$filt") ||
			die "listing the volumes of sandbox $id failed: $(cat "$RUN/.purge.err")" "see the runtime's log"
		for v in $(printf '%s' "$list" | jq -r --arg id "$id" '.Volumes // [] | .[] | select(.Labels["io.sbx.managed"] == "true" and .Labels["io.sbx.id"] == $id) | .Name'); do
			engine DELETE "/volumes/$v?force=1" >/dev/null ||
				die "removing volume $v failed: $(cat "$RUN/.purge.err")" "see the runtime's log"
			note "removed sandbox $id: volume $v"
		done
		# Its egress network (adr/0014: one per egress sandbox).
		list=$(engine GET "/networks" -G --data-urlencode "filters=$filt") ||
			die "listing the networks of sandbox $id failed: $(cat "$RUN/.purge.err")" "see the runtime's log"
		for n in $(printf '%s' "$list" | jq -r --arg id "$id" '.[] | select(.Labels["io.sbx.managed"] == "true" and .Labels["io.sbx.id"] == $id) | .Id + "=" + .Name'); do
			engine DELETE "/networks/${n%%=*}" >/dev/null ||
				die "removing network ${n#*=} failed: $(cat "$RUN/.purge.err")" "see the runtime's log"
			note "removed sandbox $id: network ${n#*=}"
		done
	done
	# The read-only helper volumes its sandboxes mounted (adr/0009), unless a
	# container outside $RUN still uses one (the runtime then refuses: 409).
	for v in $(printf '%s\n' $helpers | sort -u); do
		if engine DELETE "/volumes/$v" >/dev/null; then
			note "removed helper volume $v"
		elif grep -q 409 "$RUN/.purge.err"; then
			note "kept helper volume $v: another container uses it"
		fi
	done
	# The shared egress network of brokers before adr/0014, once unused.
	if net=$(engine GET "/networks/sbx-egress" 2>/dev/null) &&
	    [ "$(printf '%s' "$net" | jq -r '.Labels["io.sbx.managed"] // ""')" = true ] &&
	    [ "$(printf '%s' "$net" | jq -r '(.Containers // {}) | length')" = 0 ]; then
		engine DELETE "/networks/sbx-egress" >/dev/null && note "removed network sbx-egress"
	fi
	if [ -s "$RUN/built-images" ]; then
		while read -r img; do
			[ -n "$img" ] || continue
			if has_image "$img"; then
				engine DELETE "/images/$img" >/dev/null ||
					die "removing image $img failed: $(cat "$RUN/.purge.err")" \
					    "a container outside $RUN uses it; remove that first"
				note "removed image $img (built by make run)"
			fi
		done <"$RUN/built-images"
	fi
}

purge() {
	[ -d "$RUN" ] || { say "nothing to purge: $RUN does not exist"; exit 0; }
	for f in api.pid broker.pid podman.pid; do
		if [ -f "$RUN/$f" ] && kill -0 "$(cat "$RUN/$f")" 2>/dev/null; then
			die "a 'make run' is using $RUN (pid $(cat "$RUN/$f"))" "stop it with Ctrl-C first"
		fi
	done
	RT_KIND=""
	RT_HOST=""
	[ -s "$RUN/runtime" ] && read -r RT_KIND RT_HOST <"$RUN/runtime"
	if [ -d "$RUN/podman" ]; then
		say "purge: everything 'make run' made in $RUN (private Podman)"
		command -v podman >/dev/null 2>&1 || die "podman is not installed" "run: sh deploy/deps.sh"
		purge_private_podman
	else
		if [ -z "$RT_HOST" ]; then
			# A state directory from before runtime was recorded: step 1's choice.
			case ${DOCKER_HOST:-} in unix://*) RT_HOST=$DOCKER_HOST ;; *) RT_HOST=unix:///var/run/docker.sock ;; esac
		fi
		say "purge: everything 'make run' made in $RUN (runtime at $RT_HOST)"
		purge_engine
	fi
	rm -rf "$RUN" || die "removing $RUN failed" "remove it by hand"
	note "removed the state directory $RUN (keys, broker token, databases, logs, image cache)"
	say "purged"
	exit 0
}

# ---------------------------------------------------------------- checks

if [ "$MODE" = purge ]; then
	case $RUN in /*) ;; *) RUN=$(pwd)/$RUN ;; esac
	purge
fi

for b in sandbox-broker sandbox-api sbxctl sbx-helper; do
	[ -x "$BIN/$b" ] || die "$BIN/$b is missing" "run 'make all' (or 'make run', which builds first)"
done
command -v curl >/dev/null 2>&1 || die "curl is not installed" "run: sh deploy/deps.sh"
case $RUN in /*) ;; *) RUN=$(pwd)/$RUN ;; esac
mkdir -p "$RUN" || die "cannot create the state directory $RUN" "set SBX_RUN_DIR to a writable directory"
chmod 0700 "$RUN"
for f in api.pid broker.pid; do
	if [ -f "$RUN/$f" ] && kill -0 "$(cat "$RUN/$f")" 2>/dev/null; then
		die "another 'make run' is using $RUN (pid $(cat "$RUN/$f"))" \
		    "stop it with Ctrl-C, or set SBX_RUN_DIR to another directory"
	fi
done

# ---------------------------------------------------------------- 1. runtime

RT_KIND=""
RT_HOST=""
detect_kind() {
	if curl -sf --max-time 5 --unix-socket "$1" http://d/version 2>/dev/null | grep -qi podman; then
		echo podman
	else
		echo docker
	fi
}
want=${SBX_RUN_RUNTIME:-}
if [ "$want" != podman ]; then
	case ${DOCKER_HOST:-} in
	unix://*)
		if ping_socket "${DOCKER_HOST#unix://}"; then
			RT_HOST=$DOCKER_HOST
		fi ;;
	"") ;;
	*) note "DOCKER_HOST=$DOCKER_HOST is not a unix socket; sbx's broker needs one (ignored)" ;;
	esac
	if [ -z "$RT_HOST" ] && ping_socket /var/run/docker.sock; then
		RT_HOST=unix:///var/run/docker.sock
	fi
	if [ -n "$RT_HOST" ]; then
		RT_KIND=$(detect_kind "${RT_HOST#unix://}")
		say "runtime: $RT_KIND Engine API at $RT_HOST"
	elif [ "$want" = docker ]; then
		die "no Docker socket answers (DOCKER_HOST or /var/run/docker.sock)" \
		    "start dockerd, point DOCKER_HOST at its socket, or unset SBX_RUN_RUNTIME to use Podman"
	fi
fi
if [ -z "$RT_HOST" ]; then
	command -v podman >/dev/null 2>&1 || die "no Docker socket answers and podman is not installed" "run: sh deploy/deps.sh"
	[ "$(id -u)" -eq 0 ] || die "starting Podman's service for sandboxes needs root here" \
	    "run 'make run' as root, or start a Docker/Podman API socket and set DOCKER_HOST=unix://PATH"
	P=$RUN/podman
	mkdir -p "$P/storage"
	# Short runtime paths: podman 4.3 with a deep runroot makes container
	# exits wait ~20 s (RUNTIME-NOTES.md), and socket paths have 108 bytes.
	PODMAN_RUNROOT=/run/sbx-run-$(printf '%s' "$RUN" | sha256sum | cut -c1-12)
	mkdir -p "$PODMAN_RUNROOT/run" "$PODMAN_RUNROOT/tmp"
	cat >"$P/containers.conf" <<-EOF
	# Private Podman configuration of 'make run' (deploy/run.sh).
	[containers]
	# This machine's hard nofile limit is below podman's default ulimits.
	default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
	log_driver = "k8s-file"

	[engine]
	# crun refuses hybrid cgroups here; no systemd, no journald.
	runtime = "runc"
	cgroup_manager = "cgroupfs"
	events_logger = "file"
	# Each API exec keeps two conmon processes for this long (default
	# 300 s); the broker reads the exit code as the stream ends.
	exit_command_delay = 60
	tmp_dir = "$PODMAN_RUNROOT/tmp"

	[network]
	network_backend = "netavark"
	network_config_dir = "$P/networks"
	EOF
	cat >"$P/storage.conf" <<-EOF
	[storage]
	driver = "overlay"
	graphroot = "$P/storage"
	runroot = "$PODMAN_RUNROOT/run"
	EOF
	mkdir -p "$P/networks"
	SOCK=$P/podman.sock
	[ ${#SOCK} -lt 100 ] || SOCK=$PODMAN_RUNROOT/podman.sock
	rm -f "$SOCK"
	say "runtime: starting Podman's API service on unix://$SOCK (private config and storage in $P)"
	# In $P, not the caller's directory: each container's conmon creates an
	# empty file `oom` in the service's working directory when the sandbox's
	# memory limit kills a process.
	CONTAINERS_CONF=$P/containers.conf CONTAINERS_STORAGE_CONF=$P/storage.conf \
		setsid env -C "$P" podman system service --time=0 "unix://$SOCK" </dev/null >"$RUN/podman.log" 2>&1 &
	PODMAN_PID=$!
	echo "$PODMAN_PID" >"$RUN/podman.pid"
	i=0
	until ping_socket "$SOCK"; do
		kill -0 "$PODMAN_PID" 2>/dev/null || die "podman system service exited" \
		    "see $RUN/podman.log; 'sh deploy/deps.sh' installs runc, conmon and netavark" "$RUN/podman.log"
		i=$((i + 1))
		[ "$i" -lt 300 ] || die "podman's API did not answer within 30 s" "see $RUN/podman.log" "$RUN/podman.log"
		sleep 0.1
	done
	RT_KIND=podman
	RT_HOST=unix://$SOCK
fi
# For --purge: which runtime this state directory's sandboxes live in.
printf '%s %s\n' "$RT_KIND" "$RT_HOST" >"$RUN/runtime"

# ---------------------------------------------------------------- 2. image

if [ "$IMAGE" = "$DEFAULT_IMAGE" ]; then
	say "image: $IMAGE (built once with debootstrap, then cached)"
	had_image=0
	has_image "$IMAGE" && had_image=1
	sh "$REPO/deploy/image/build.sh" "$RT_KIND" "$RT_HOST" "$RUN/image" "$IMAGE" ||
		die "building the sandbox image failed (the line above says why)" \
		    "fix that and run again, or set SBX_RUN_IMAGE to an image the runtime already has"
	if [ "$had_image" = 0 ] && ! grep -qxF "$IMAGE" "$RUN/built-images" 2>/dev/null; then
		echo "$IMAGE" >>"$RUN/built-images"    # ours: --purge removes it
	fi
elif has_image "$IMAGE"; then
	say "image: $IMAGE (from SBX_RUN_IMAGE)"
else
	die "SBX_RUN_IMAGE=$IMAGE is not in the runtime at $RT_HOST" \
	    "import it there first, or unset SBX_RUN_IMAGE to build $DEFAULT_IMAGE"
fi

# ---------------------------------------------------------------- 3. daemons

umask 077
TOKEN=$RUN/broker.token
if [ ! -s "$TOKEN" ]; then
	# 32 random bytes, base64 without /+= : what sbx_token_generate makes.
	head -c 32 /dev/urandom | base64 | tr -d '/+=\n' >"$TOKEN"
fi
chmod 0600 "$TOKEN"

BSOCK=$RUN/broker.sock
[ ${#BSOCK} -lt 100 ] || die "the state directory path is too long for a unix socket" "set SBX_RUN_DIR to a shorter path"
rm -f "$BSOCK"
say "starting sandbox-broker on unix:$BSOCK (log: $RUN/broker.log)"
env -i PATH=$CLEANPATH HOME="${HOME:-/}" setsid "$BIN/sandbox-broker" --listen "unix:$BSOCK" --runtime "$RT_HOST" \
	--token-file "$TOKEN" --state-dir "$RUN/broker" --image "$IMAGE" \
	--images "$BROWSER_IMAGE" \
	</dev/null >>"$RUN/broker.log" 2>&1 &
BROKER_PID=$!
echo "$BROKER_PID" >"$RUN/broker.pid"
i=0
until [ -S "$BSOCK" ]; do
	kill -0 "$BROKER_PID" 2>/dev/null || die "sandbox-broker exited at start" \
	    "see $RUN/broker.log; '$BIN/sandbox-broker --check --runtime $RT_HOST --image $IMAGE' explains runtime problems" "$RUN/broker.log"
	i=$((i + 1))
	[ "$i" -lt 300 ] || die "sandbox-broker did not listen within 30 s" "see $RUN/broker.log" "$RUN/broker.log"
	sleep 0.1
done

if curl -s --max-time 2 -o /dev/null "$URL/" 2>/dev/null; then
	die "something already answers on 127.0.0.1:$PORT" "stop it, or set SBX_API_PORT to a free port"
fi
say "starting sandbox-api on $URL (log: $RUN/api.log)"
env -i PATH=$CLEANPATH HOME="${HOME:-/}" setsid "$BIN/sandbox-api" --listen "127.0.0.1:$PORT" --broker "unix:$BSOCK" \
	--broker-token-file "$TOKEN" --state-dir "$RUN/api" \
	</dev/null >>"$RUN/api.log" 2>&1 &
API_PID=$!
echo "$API_PID" >"$RUN/api.pid"
i=0
until curl -sf --max-time 2 "$URL/healthz" >/dev/null 2>&1; do
	if ! kill -0 "$API_PID" 2>/dev/null; then
		if tail -n 3 "$RUN/api.log" | grep -qi 'in use'; then
			die "port $PORT on 127.0.0.1 is in use" "set SBX_API_PORT to a free port" "$RUN/api.log"
		fi
		die "sandbox-api exited at start" "see $RUN/api.log" "$RUN/api.log"
	fi
	i=$((i + 1))
	[ "$i" -lt 300 ] || die "sandbox-api did not answer within 30 s" "see $RUN/api.log" "$RUN/api.log"
	sleep 0.1
done

# ---------------------------------------------------------------- 4. keys

export SBX_URL="$URL"
unset SBX_KEY SBX_CLI_CONFIG || true
# key_for ROLE NAME: NAME's key in $RUN/NAME.key, created once.
key_for() {
	f=$RUN/$2.key
	if [ -s "$f" ] && SBX_KEY=$(cat "$f") "$SBX" whoami >/dev/null 2>&1; then
		return 0
	fi
	if ! env -i PATH=$CLEANPATH "$BIN/sandbox-api" --state-dir "$RUN/api" admin "create-$1" "$2" >"$f.tmp" 2>"$RUN/admin.log"; then
		rm -f "$f.tmp"
		die "creating the $1 '$2' failed" \
		    "its key file $f is missing or stale; remove $RUN to start from scratch" "$RUN/admin.log"
	fi
	mv "$f.tmp" "$f"
	chmod 0600 "$f"
}
key_for operator operator
key_for player player
say "keys: operator and player (files $RUN/operator.key, $RUN/player.key, mode 0600; not shown)"
PLAYER_KEY=$(cat "$RUN/player.key")
umask 022

# ---------------------------------------------------------------- 5. demo

sbx_p() { SBX_KEY=$PLAYER_KEY "$SBX" "$@"; }

say "demo: NPC '$NPC' of the player"
if ! out=$(sbx_p npc create "$NPC" 2>&1); then
	sbx_p npc ls | grep -q "^$NPC " || die "sbxctl npc create $NPC failed: $out" "see $RUN/api.log" "$RUN/api.log"
	note "NPC $NPC exists already"
else
	note "$out"
fi
note "\$ sbxctl up $NPC"
out=$(sbx_p up "$NPC" 2>&1) || die "starting the sandbox of $NPC failed: $out" \
    "see $RUN/broker.log; '$BIN/sandbox-broker --check --runtime $RT_HOST --image $IMAGE' tells what the runtime lacks" "$RUN/broker.log"
note "$out"

PROG=$(mktemp)
if sbx_p exec "$NPC" -- sh -c 'command -v python3' >/dev/null 2>&1; then
	PROGNAME=hello.py
	RUNARGV='["python3","/work/hello.py"]'
	RUNCMD="python3 /work/hello.py"
	cat >"$PROG" <<-'EOF'
	# hello.py - the make-run demo: output that streams, and a file left in /work.
	import os, socket, time
	for i in range(1, 4):
	    print("tick %d from %s (uid %d)" % (i, socket.gethostname(), os.getuid()), flush=True)
	    time.sleep(0.4)
	with open("/work/result.txt", "w") as f:
	    f.write("sum(1..100) = %d\n" % sum(range(1, 101)))
	print("wrote /work/result.txt", flush=True)
	EOF
else
	PROGNAME=hello.sh
	RUNARGV='["sh","/work/hello.sh"]'
	RUNCMD="sh /work/hello.sh"
	note "(image $IMAGE has no python3: the demo program is a shell script)"
	cat >"$PROG" <<-'EOF'
	# hello.sh - the make-run demo: output that streams, and a file left in /work.
	for i in 1 2 3; do
	    echo "tick $i from $(hostname) (uid $(id -u))"
	    sleep 0.4
	done
	s=0; i=1
	while [ $i -le 100 ]; do s=$((s + i)); i=$((i + 1)); done
	echo "sum(1..100) = $s" > /work/result.txt
	echo "wrote /work/result.txt"
	EOF
fi
note "\$ sbxctl cp $PROGNAME $NPC:/work/$PROGNAME    (PUT /api/v1/npcs/$NPC/sandbox/files?path=/work/$PROGNAME)"
out=$(sbx_p cp "$PROG" "$NPC:/work/$PROGNAME" 2>&1) || { rm -f "$PROG"; die "writing /work/$PROGNAME failed: $out" "see $RUN/api.log" "$RUN/api.log"; }
rm -f "$PROG"

say "demo: POST /api/v1/npcs/$NPC/sandbox/exec $RUNARGV - the SSE events as they arrive:"
HDR=$(mktemp)
EVENTS=$(mktemp)
chmod 0600 "$HDR"
printf 'Authorization: Bearer %s\n' "$PLAYER_KEY" >"$HDR"
# The key goes to curl in a file (-H @file), never on a command line.
curl -sS -N --max-time 120 -H @"$HDR" -H 'Content-Type: application/json' \
	--data "{\"argv\":$RUNARGV}" "$URL/api/v1/npcs/$NPC/sandbox/exec" 2>&1 |
	tee "$EVENTS" | sed -u 's/^/    | /'
rm -f "$HDR"
if ! grep -q '^event: exit' "$EVENTS"; then
	rm -f "$EVENTS"
	die "the exec stream ended without an exit event" "see $RUN/api.log and $RUN/broker.log" "$RUN/api.log"
fi
rm -f "$EVENTS"

say "demo: the file the program wrote, read back:"
note "\$ sbxctl cat $NPC:/work/result.txt"
out=$(sbx_p cat "$NPC:/work/result.txt" 2>&1) || die "reading /work/result.txt failed: $out" "see $RUN/api.log" "$RUN/api.log"
printf '%s\n' "$out" | sed 's/^/    /'

if [ "${SBX_RUN_DEMO_ONLY:-0}" = 1 ]; then
	HEAD="demo done (SBX_RUN_DEMO_ONLY=1: the daemons stop now). Run 'make run' to keep sbx serving, then try it."
else
	HEAD="sbx is running: api $URL, broker unix:$BSOCK, runtime $RT_KIND ($RT_HOST)"
fi
cat <<EOF

==> $HEAD

Try it as the player:
    export PATH="$BIN:\$PATH"
    export SBX_URL=$URL
    export SBX_KEY="\$(cat $RUN/player.key)"
    sbxctl npc ls
    sbxctl exec $NPC -- $RUNCMD
    sbxctl exec $NPC -- sh -c 'echo out; echo err >&2; exit 3'; echo "exit \$?"
    sbxctl cp ./some-file $NPC:/work/some-file
    sbxctl ls $NPC:/work
    sbxctl status $NPC --json
As the operator (egress is theirs to grant):
    SBX_KEY="\$(cat $RUN/operator.key)" sbxctl egress grant $NPC
A browser (docs/api.md "Browser"): build its image once (about a minute), then
    sh deploy/image/build.sh --browser $RT_KIND $RT_HOST $RUN/image
    sbxctl npc create web && sbxctl up web --image sbx-browser:bookworm && sbxctl browser web start
From code written for the e2b SDK (npm e2b; docs/e2b.md):
    export E2B_API_URL=$URL/e2b E2B_SANDBOX_URL=$URL/e2b/envd
    export E2B_API_KEY="\$(cat $RUN/player.key)"
More: sbxctl --help, docs/cli.md. Logs: $RUN/api.log, $RUN/broker.log
EOF

if [ "${SBX_RUN_DEMO_ONLY:-0}" = 1 ]; then
	say "SBX_RUN_DEMO_ONLY=1: stopping the daemons"
	stop_all
	say "stopped. Sandboxes and their /work volumes stay (their containers keep running); 'make run' starts sbx again and adopts them."
	exit 0
fi

printf '\nPress Ctrl-C to stop sbx.\n'
while kill -0 "$API_PID" 2>/dev/null && kill -0 "$BROKER_PID" 2>/dev/null; do
	sleep 1 &
	wait $! || true
done
if ! kill -0 "$BROKER_PID" 2>/dev/null; then
	die "sandbox-broker exited" "see $RUN/broker.log" "$RUN/broker.log"
fi
die "sandbox-api exited" "see $RUN/api.log" "$RUN/api.log"
