#!/usr/bin/env bash
# runtimes.sh - start and stop a private Docker Engine and Podman service for the tests.
#
#   runtimes.sh up DIR      start containerd+dockerd and `podman system service`
#                           on sockets under DIR, import the test image into
#                           both, write DIR/env. Exit 0 only if both came up;
#                           DIR/env always lists the runtimes that did
#                           (SBX_RUNTIMES=docker,podman).
#   runtimes.sh down DIR    remove what the daemons made, stop them (SIGTERM,
#                           SIGKILL after a deadline), kill anything left that
#                           runs from DIR (found by an argument or a root mount
#                           under it, never by name), remove bridges and netns
#                           files left by dead daemons, unmount everything under
#                           DIR, remove DIR. Safe on a half-started, crashed or
#                           absent DIR.
#   runtimes.sh kill DIR RT SIGKILL runtime RT's API daemon (docker: dockerd,
#                           podman: the API service); containers stay.
#   runtimes.sh start DIR RT start it again on the same socket and state.
#                           (Both for tests/integration/test_faults.py.)
#   runtimes.sh gone DIR    exit 0 if no process runs from DIR, nothing is
#                           mounted under it and it no longer exists; else list
#                           what is left and exit 1.
#
# Two knobs for a suite that brings up runtimes of its own (test_egress.py):
#   SBX_RUNTIMES_ONLY=docker|podman   start only that one.
#   SBX_RUNTIME_NETNS=NAME            run dockerd and the podman service in
#       the network namespace NAME (made by the caller: `ip netns add`), so
#       their bridges, routes and any firewall rule a test applies there stay
#       out of the host's; the API sockets are files and work from anywhere.
#
# Persistent state, API sockets and logs live under DIR; runtime state (exec
# roots, podman's runroot and tmp_dir, containerd's socket) under a short
# RUN=/run/sbx-rt-<hash of DIR>: measured here, podman 4.3 with a runroot and
# tmp_dir ~50 characters deep makes every container exit wait 20 s (its conmon
# timeout) before wait/stop/--rm return, and unix socket paths are limited to
# 108 bytes. down and gone cover both directories.
#
# Nothing system-wide is used: not /var/run/docker.sock, not /var/lib/docker,
# not /var/lib/containers, not a system containerd (we start our own so that
# dockerd never adopts /run/containerd/containerd.sock), not /etc/docker/
# daemon.json, not /etc/containers/*.conf (CONTAINERS_CONF and
# CONTAINERS_STORAGE_CONF point at files under DIR).
#
# dockerd runs with --iptables=false --bridge=none. Measured here (Debian 12,
# docker.io 20.10): the default (--iptables=true) also works, but a private
# dockerd then flushes and rewrites the host's shared DOCKER* chains (breaking
# a system dockerd's rules) and leaves them behind after it stops. The tests
# need no NAT: no packet leaves this machine. With --iptables=false a
# user-defined bridge network still gives containers a default route via its
# gateway (the egress case); the no-egress sandboxes use NetworkMode "none".
# Caveat measured with --iptables=false: an Internal network ALSO gets a
# default route on Docker, since Docker isolates internal networks only with
# iptables rules.
#
# Podman (4.3) needs runc (crun rejects this host's hybrid cgroups), ulimits
# below the host's hard nofile limit, cgroupfs (no systemd here) and a file
# events logger (no journald); its netns files still live in /run/netns,
# which is podman's fixed place for root.
#
# Podman also keeps each API exec's two conmon processes asleep for
# exit_command_delay (default 300 s); we use 5 s (see containers.conf below).
#
# Timing measured on this machine (2 shared cores, load 3-5): `up` takes
# 1.5-2.5 s (dockerd answers /_ping 0.1 s after start, podman 0.6-0.7 s; the
# image build and the two imports take the rest); `down` 1-2 s (emptying the
# engines ~1 s, the daemons stop in well under 0.1 s once empty), 3 s with a
# hundred lingering podman exec sessions to kill.

set -euo pipefail

DOCKERD=/usr/sbin/dockerd
CONTAINERD=/usr/bin/containerd
DOCKER_CLI=/usr/bin/docker   # Debian's client; /usr/local/bin/docker may be another
PODMAN=/usr/bin/podman
BUSYBOX=/bin/busybox
API=v1.41
IMAGE=sbx-test:latest
UP_DEADLINE=${SBX_RUNTIME_UP_DEADLINE:-60}     # seconds per daemon
DOWN_DEADLINE=${SBX_RUNTIME_DOWN_DEADLINE:-20} # seconds before SIGKILL

log() { printf 'runtimes: %s\n' "$*" >&2; }

# in_netns CMD...: CMD in SBX_RUNTIME_NETNS when set, else as is.
in_netns() {
	if [ -n "${SBX_RUNTIME_NETNS:-}" ]; then
		# nsenter, not `ip netns exec`: that remounts /sys, and with it the
		# cgroup mounts dockerd needs.
		nsenter --net="/run/netns/$SBX_RUNTIME_NETNS" "$@"
	else
		"$@"
	fi
}
now_ms() { date +%s%3N; }

usage() {
	echo "usage: $0 up|down|gone DIR | kill|start DIR docker|podman" >&2
	exit 2
}

# api SOCK METHOD PATH: one Engine API call; prints the body, fails on non-2xx.
api() {
	curl -sf --max-time 10 --unix-socket "$1" -X "$2" "http://sbx$3"
}

# answers SOCK: the daemon on SOCK answers GET /_ping. Not /version: Podman
# 4.3 runs dpkg-query for conmon and runc on every /version, which took
# longer than 2 s under load (2 cores, load 40): each timed-out probe left
# its dpkg-queries running and the next probe 50 ms later added more, so a
# restarted service never answered within UP_DEADLINE (seen as the "podman
# did not answer" failures of test_faults.py's daemon-kill case).
answers() {
	[ -S "$1" ] && curl -sf --max-time 2 --unix-socket "$1" "http://sbx/$API/_ping" >/dev/null 2>&1
}

# wait_for NAME SOCK PID LOG: wait until SOCK answers /_ping, or fail loudly
# (and kill PID: a later start must not find two daemons on one socket).
wait_for() {
	local name=$1 sock=$2 pid=$3 logf=$4 t0 end
	t0=$(now_ms)
	end=$(( t0 + UP_DEADLINE * 1000 ))
	while ! answers "$sock"; do
		if ! kill -0 "$pid" 2>/dev/null; then
			log "$name exited before answering on $sock; log tail:"
			tail -n 30 "$logf" >&2 || true
			return 1
		fi
		if [ "$(now_ms)" -gt "$end" ]; then
			log "$name did not answer GET /$API/_ping on $sock within ${UP_DEADLINE}s; log tail:"
			tail -n 30 "$logf" >&2 || true
			kill -KILL "$pid" 2>/dev/null || true
			return 1
		fi
		sleep 0.05
	done
	log "$name answers on $sock after $(( $(now_ms) - t0 )) ms"
}

# pids_from DIR RUN: processes that run from DIR or RUN, excluding this
# script, its ancestors, pid 1 and kernel threads: daemons, shims and conmon
# (an argument under DIR or RUN) and container processes, exec'd ones included
# (their root mount, the "/" line of their mountinfo, is an overlay whose
# layers are under DIR). Only those two precise tests: mount namespaces alone
# say nothing (DIR's mounts propagate into every namespace sharing /), and a
# container process's /proc/PID/root reads "/".
pids_from() {
	local dir=$1 run=$2 skip
	skip=" 1 $$ $(ancestors) "
	{
		grep -laF -e "$dir/" -e "$run/" /proc/[0-9]*/cmdline || true
		grep -HE '^[0-9]+ [0-9]+ [0-9]+:[0-9]+ [^ ]+ / ' /proc/[0-9]*/mountinfo |
			grep -F -e "$dir/" -e "$run/" | cut -d: -f1 || true
	} 2>/dev/null | cut -d/ -f3 | sort -un | while read -r pid; do
		case "$skip" in *" $pid "*) continue ;; esac
		# Kernel threads have an empty cmdline; grep and our subshells are
		# gone by now or are copies of us.
		grep -aq . "/proc/$pid/cmdline" 2>/dev/null || continue
		cmp -s "/proc/$pid/cmdline" /proc/$$/cmdline 2>/dev/null && continue
		echo "$pid"
	done
}

ancestors() {
	local pid=$$ out=""
	while [ "$pid" -gt 1 ]; do
		pid=$(awk '{print $4}' "/proc/$pid/stat" 2>/dev/null) || break
		out="$out $pid"
	done
	echo "$out"
}

# mounts_under DIR RUN: mount points at or under DIR or RUN, deepest first.
mounts_under() {
	awk -v d="$1" -v r="$2" '{
		m = $5
		gsub(/\\040/, " ", m); gsub(/\\011/, "\t", m); gsub(/\\012/, "\n", m); gsub(/\\134/, "\\", m)
		if (m == d || index(m, d "/") == 1 || m == r || index(m, r "/") == 1)
			print length(m) " " m
	}' /proc/self/mountinfo | sort -rn | cut -d' ' -f2-
}

check_dir_arg() {
	case "$1" in
	/*) ;;
	*) log "DIR must be absolute: $1"; exit 2 ;;
	esac
	case "$1" in
	*[!A-Za-z0-9._/-]*) log "DIR may hold only [A-Za-z0-9._/-]: $1"; exit 2 ;;
	esac
	if [ "$1" = / ] || [ "${#1}" -lt 5 ]; then
		log "refusing DIR $1"
		exit 2
	fi
	# Unix socket paths are limited to 108 bytes: DIR/podman/podman.sock.
	if [ "${#1}" -gt 80 ]; then
		log "DIR is too long for unix socket paths (max 80 characters): $1"
		exit 2
	fi
}

# run_dir DIR: the short runtime-state directory that belongs to DIR.
run_dir() {
	local base=/run
	[ -d /run ] && [ -w /run ] || base=/tmp
	echo "$base/sbx-rt-$(printf '%s' "$1" | sha256sum | cut -c1-12)"
}

# ---------------------------------------------------------------- up

build_image() {
	local img=$1 root a
	root=$img/rootfs
	mkdir -p "$root"/bin "$root"/usr/bin "$root"/etc "$root"/work "$root"/tmp \
		"$root"/.sbx "$root"/proc "$root"/sys "$root"/dev "$root"/root
	cp "$BUSYBOX" "$root/bin/busybox"
	for a in $("$BUSYBOX" --list); do
		# `busybox --list` names busybox itself: a link to itself would loop.
		[ "$a" = busybox ] && continue
		ln -s busybox "$root/bin/$a"
	done
	ln -s ../../bin/env "$root/usr/bin/env"
	cat > "$root/etc/passwd" <<-'EOF'
	root:x:0:0:root:/root:/bin/sh
	sbx:x:1000:1000:sbx:/work:/bin/sh
	nobody:x:65534:65534:nobody:/nonexistent:/bin/false
	EOF
	cat > "$root/etc/group" <<-'EOF'
	root:x:0:
	sbx:x:1000:
	nogroup:x:65534:
	EOF
	chown 1000:1000 "$root/work"
	chmod 0755 "$root/work" "$root/.sbx"
	chmod 1777 "$root/tmp"
	chmod 0700 "$root/root"
	tar --numeric-owner -C "$root" -cf "$img/sbx-test.tar" .
}

write_podman_conf() {
	local p=$1 run=$2
	mkdir -p "$p/root" "$p/networks" "$run/prun" "$run/ptmp"
	cat > "$p/containers.conf" <<-EOF
	# Private podman configuration for the sbx tests (see runtimes.sh).
	# nproc counts every process of the sandbox uid (1000) on the whole machine,
	# not per container (the pids cgroup limit is per container): leave room.
	[containers]
	default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]
	log_driver = "k8s-file"

	[engine]
	runtime = "runc"
	cgroup_manager = "cgroupfs"
	events_logger = "file"
	# Each API exec leaves two conmon processes asleep this long (default
	# 300 s) so its exit code stays inspectable: with hundreds of execs per
	# suite that is hundreds of idle processes. The exit code is read as the
	# stream ends, so a few seconds suffice.
	exit_command_delay = 5
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
}

# start_dockerd DIR RUN: dockerd on DIR's socket against the running
# containerd; returns once it answers (up, and `start` after a `kill`).
start_dockerd() {
	local dir=$1 run=$2 d=$1/docker pid
	in_netns setsid "$DOCKERD" --config-file "$d/daemon.json" \
		--host "unix://$d/docker.sock" --containerd "$run/containerd.sock" \
		--data-root "$d/data" --exec-root "$run/dexec" --pidfile "$d/dockerd.pid" \
		--bridge none --iptables=false --ip-masq=false \
		</dev/null >>"$d/dockerd.log" 2>&1 &
	pid=$!
	echo "$pid" > "$d/dockerd.spawned"
	wait_for dockerd "$d/docker.sock" "$pid" "$d/dockerd.log"
}

# start_podman DIR RUN: the podman API service on DIR's socket, in DIR's
# podman/ folder: each container's conmon runs in the service's working
# directory and creates an empty file `oom` there when the container's memory
# limit kills a process (before, that was the root of the tree).
start_podman() {
	local p=$1/podman pid
	CONTAINERS_CONF="$p/containers.conf" CONTAINERS_STORAGE_CONF="$p/storage.conf" \
		in_netns setsid env -C "$p" "$PODMAN" system service --time=0 "unix://$p/podman.sock" \
		</dev/null >>"$p/service.log" 2>&1 &
	pid=$!
	echo "$pid" > "$p/service.pid"
	wait_for podman "$p/podman.sock" "$pid" "$p/service.log"
}

up_docker() {
	local dir=$1 run=$2 d=$1/docker pid
	mkdir -p "$d/containerd" "$d/data" "$run/dexec" "$run/cstate"
	echo '{}' > "$d/daemon.json"
	cat > "$d/containerd/config.toml" <<-EOF
	version = 2
	root = "$d/containerd/root"
	state = "$run/cstate"
	disabled_plugins = ["io.containerd.grpc.v1.cri"]
	[grpc]
	  address = "$run/containerd.sock"
	[debug]
	  address = ""
	[plugins."io.containerd.internal.v1.opt"]
	  path = "$d/containerd/opt"
	EOF
	setsid "$CONTAINERD" --config "$d/containerd/config.toml" \
		</dev/null >"$d/containerd.log" 2>&1 &
	echo $! > "$d/containerd.pid"
	pid=$!
	local t=0
	while [ ! -S "$run/containerd.sock" ]; do
		if ! kill -0 "$pid" 2>/dev/null || [ "$t" -gt $(( UP_DEADLINE * 20 )) ]; then
			log "containerd did not create its socket; log tail:"
			tail -n 30 "$d/containerd.log" >&2 || true
			return 1
		fi
		t=$(( t + 1 ))
		sleep 0.05
	done
	start_dockerd "$dir" "$run" || return 1
	DOCKER_HOST="unix://$d/docker.sock" "$DOCKER_CLI" import \
		-c "ENV PATH=/bin:/usr/bin" "$dir/image/sbx-test.tar" "$IMAGE" >/dev/null
}

up_podman() {
	local dir=$1 run=$2 p=$1/podman pid
	write_podman_conf "$p" "$run"
	start_podman "$dir" "$run" || return 1
	CONTAINERS_CONF="$p/containers.conf" CONTAINERS_STORAGE_CONF="$p/storage.conf" \
		"$PODMAN" import --quiet --change "ENV PATH=/bin:/usr/bin" \
		"$dir/image/sbx-test.tar" "$IMAGE" >/dev/null
}

cmd_up() {
	local dir=$1 run t0 ok="" failed=""
	t0=$(now_ms)
	if [ "$(id -u)" -ne 0 ]; then
		log "must run as root (it starts dockerd and a root podman service)"
		exit 1
	fi
	for b in "$DOCKERD" "$CONTAINERD" "$DOCKER_CLI" "$PODMAN" "$BUSYBOX" /usr/bin/runc; do
		[ -x "$b" ] || { log "missing $b: run deploy/deps.sh"; exit 1; }
	done
	if [ -e "$dir" ] && [ -n "$(ls -A "$dir")" ]; then
		log "$dir exists and is not empty"
		exit 1
	fi
	run=$(run_dir "$dir")
	if [ -e "$run" ]; then
		log "$run exists: a previous run of $dir was not brought down"
		exit 1
	fi
	mkdir -p "$dir/image" "$run"
	build_image "$dir/image"
	if [ -n "${SBX_RUNTIME_NETNS:-}" ] && [ ! -e "/run/netns/$SBX_RUNTIME_NETNS" ]; then
		log "no network namespace $SBX_RUNTIME_NETNS (ip netns add it first)"
		exit 1
	fi
	if [ "${SBX_RUNTIMES_ONLY:-docker}" = docker ]; then
		if up_docker "$dir" "$run"; then ok="$ok,docker"; else failed="$failed docker"; fi
	fi
	if [ "${SBX_RUNTIMES_ONLY:-podman}" = podman ]; then
		if up_podman "$dir" "$run"; then ok="$ok,podman"; else failed="$failed podman"; fi
	fi
	cat > "$dir/env" <<-EOF
	SBX_RUNTIMES_DIR=$dir
	SBX_RUNTIMES=${ok#,}
	SBX_RUNTIMES_RUN=$run
	SBX_DOCKER_HOST=unix://$dir/docker/docker.sock
	SBX_PODMAN_HOST=unix://$dir/podman/podman.sock
	SBX_TEST_IMAGE=$IMAGE
	SBX_TEST_IMAGE_TAR=$dir/image/sbx-test.tar
	SBX_DOCKER_CLI=$DOCKER_CLI
	SBX_PODMAN_CLI=$PODMAN
	DOCKER_HOST=unix://$dir/docker/docker.sock
	CONTAINERS_CONF=$dir/podman/containers.conf
	CONTAINERS_STORAGE_CONF=$dir/podman/storage.conf
	EOF
	if [ -n "$failed" ]; then
		log "FAILED to bring up:$failed (took $(( $(now_ms) - t0 )) ms)"
		exit 1
	fi
	log "up in $(( $(now_ms) - t0 )) ms: $dir/env"
}

# ---------------------------------------------------------------- down

# clean_engine SOCK: remove every container, non-default network and volume
# the daemon behind SOCK holds (it is private to DIR, so all are ours).
clean_engine() {
	local sock=$1 id
	answers "$sock" || return 0
	for id in $(api "$sock" GET "/$API/containers/json?all=1" | jq -r '.[].Id'); do
		# Kill first: podman's forced DELETE waits out the stop timeout.
		api "$sock" POST "/$API/containers/$id/kill?signal=KILL" >/dev/null 2>&1 || true
		api "$sock" DELETE "/$API/containers/$id?force=1&v=1" >/dev/null || true
	done
	for id in $(api "$sock" GET "/$API/networks" |
		jq -r '.[] | select(.Name != "bridge" and .Name != "host" and .Name != "none" and .Name != "podman") | .Id'); do
		api "$sock" DELETE "/$API/networks/$id" >/dev/null || true
	done
	for id in $(api "$sock" GET "/$API/volumes" | jq -r '(.Volumes // [])[].Name'); do
		api "$sock" DELETE "/$API/volumes/$id?force=1" >/dev/null || true
	done
}

# ours PID: PID is alive and runs from DIR or RUN (a pid file may name a pid
# the system has since given to someone else).
ours() {
	[ -n "$1" ] && grep -aqF -e "$G_DIR/" -e "$G_RUN/" "/proc/$1/cmdline" 2>/dev/null
}

# stop_pids NAME=PID...: SIGTERM all at once, SIGKILL whatever is left after
# DOWN_DEADLINE seconds; returns when all are gone.
stop_pids() {
	local t0 end a live
	t0=$(now_ms)
	end=$(( t0 + DOWN_DEADLINE * 1000 ))
	for a in "$@"; do
		ours "${a#*=}" && kill -TERM "${a#*=}" 2>/dev/null || true
	done
	while :; do
		live=""
		for a in "$@"; do
			ours "${a#*=}" && live="$live $a"
		done
		[ -z "$live" ] && break
		if [ "$(now_ms)" -gt "$end" ]; then
			log "ignored SIGTERM for ${DOWN_DEADLINE}s, SIGKILL:$live"
			for a in $live; do kill -KILL "${a#*=}" 2>/dev/null || true; done
			break
		fi
		sleep 0.05
	done
	log "stopped $* in $(( $(now_ms) - t0 )) ms"
}

# netns_of_procs DIR RUN: network namespace inodes of the container processes.
netns_of_procs() {
	local pid
	for pid in $(pids_from "$1" "$2"); do
		stat -L -c %i "/proc/$pid/ns/net" 2>/dev/null || true
	done | sort -u
}

cmd_down() {
	local dir=$1 run t0 pids netns f m i
	t0=$(now_ms)
	run=$(run_dir "$dir")
	G_DIR=$dir G_RUN=$run
	if [ ! -e "$dir" ] && [ ! -e "$run" ]; then
		return 0
	fi
	clean_engine "$dir/podman/podman.sock" || true
	clean_engine "$dir/docker/docker.sock" || true
	log "engines emptied in $(( $(now_ms) - t0 )) ms"
	netns=$(netns_of_procs "$dir" "$run")

	# dockerd needs its containerd while it shuts down: containerd goes last.
	stop_pids "podman=$(cat "$dir/podman/service.pid" 2>/dev/null || true)" \
		"dockerd=$(cat "$dir/docker/dockerd.pid" 2>/dev/null ||
			cat "$dir/docker/dockerd.spawned" 2>/dev/null || true)"
	stop_pids "containerd=$(cat "$dir/docker/containerd.pid" 2>/dev/null || true)"

	# Whatever survived (shims, conmon, container processes) dies now.
	for i in 1 2 3 4 5; do
		pids=$(pids_from "$dir" "$run")
		[ -z "$pids" ] && break
		[ "$i" -eq 1 ] && log "killing leftovers: $(for p in $pids; do
			printf '[%s] ' "$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-60)"; done)"
		kill -KILL $pids 2>/dev/null || true
		sleep 0.2
	done

	# A dockerd that died with user-defined networks leaves their bridges
	# (br-<first 12 hex of the network id>) behind; the ids are in its
	# network store. Only interfaces with exactly those names are removed.
	if [ -f "$dir/docker/data/network/files/local-kv.db" ]; then
		for f in $(grep -aoE '[0-9a-f]{64}' "$dir/docker/data/network/files/local-kv.db" |
			cut -c1-12 | sort -u); do
			if [ -e "/sys/class/net/br-$f" ]; then
				log "removing leftover bridge br-$f"
				ip link delete "br-$f" 2>/dev/null || true
			fi
		done
	fi

	# Podman keeps network namespaces in /run/netns (not under DIR).
	if [ -n "$netns" ] && [ -d /run/netns ]; then
		for f in /run/netns/*; do
			[ -e "$f" ] || continue
			# The caller's namespace the daemons ran in is the caller's.
			[ "$f" = "/run/netns/${SBX_RUNTIME_NETNS:-}" ] && continue
			if echo "$netns" | grep -qx "$(stat -L -c %i "$f" 2>/dev/null)"; then
				umount "$f" 2>/dev/null || umount -l "$f" 2>/dev/null || true
				rm -f "$f"
			fi
		done
	fi

	for i in 1 2 3; do
		m=$(mounts_under "$dir" "$run")
		[ -z "$m" ] && break
		while IFS= read -r f; do
			umount "$f" 2>/dev/null || umount -l "$f" 2>/dev/null || true
		done <<< "$m"
	done
	if [ -n "$(mounts_under "$dir" "$run")" ]; then
		log "still mounted under $dir or $run:"
		mounts_under "$dir" "$run" >&2
		return 1
	fi
	if [ -n "${SBX_RUNTIME_LOGS_TO:-}" ]; then
		mkdir -p "$SBX_RUNTIME_LOGS_TO"
		for f in "$dir"/docker/*.log "$dir"/podman/*.log; do
			[ -f "$f" ] && cp "$f" "$SBX_RUNTIME_LOGS_TO/$(basename "$(dirname "$f")")-$(basename "$f")"
		done
	fi
	# --one-file-system: never follow a mount we failed to see into the host.
	rm -rf --one-file-system "$dir" "$run"
	log "down in $(( $(now_ms) - t0 )) ms"
}

# kill DIR RT: SIGKILL one runtime's API daemon (dockerd, or podman's API
# service), as a crash would; containerd, shims, conmon and the containers
# stay. Returns once it is gone. For the fault-injection tests.
cmd_kill() {
	local dir=$1 rt=$2 pid run
	run=$(run_dir "$dir")
	G_DIR=$dir G_RUN=$run
	case $rt in
	docker) pid=$(cat "$dir/docker/dockerd.pid" 2>/dev/null ||
		cat "$dir/docker/dockerd.spawned" 2>/dev/null || true) ;;
	podman)
		# service.pid may name the in_netns wrapper, not podman: find the
		# process serving this DIR's socket by its exact arguments.
		pid=$(for f in /proc/[0-9]*/cmdline; do
			if { tr '\0' ' ' <"$f"; } 2>/dev/null | grep -qF \
				"system service --time=0 unix://$dir/podman/podman.sock"; then
				f=${f#/proc/}; echo "${f%/cmdline}"
			fi
		done | head -n 1) ;;
	*) usage ;;
	esac
	if ! ours "$pid"; then
		log "$rt daemon of $dir is not running"
		return 1
	fi
	kill -KILL "$pid"
	while ours "$pid"; do sleep 0.02; done
	# dockerd refuses to start while its pid file names a process that
	# exists, and the killed one may linger as a zombie nobody reaps.
	[ "$rt" = docker ] && rm -f "$dir/docker/dockerd.pid"
	log "killed $rt daemon $pid"
}

# start DIR RT: start that daemon again (after kill) on the same socket and
# state; returns once it answers GET /_ping.
cmd_start() {
	local dir=$1 rt=$2 run
	run=$(run_dir "$dir")
	case $rt in
	docker) start_dockerd "$dir" "$run" ;;
	podman) rm -f "$dir/podman/podman.sock"; start_podman "$dir" "$run" ;;
	*) usage ;;
	esac
}

cmd_gone() {
	local dir=$1 run left=0 pids m p
	run=$(run_dir "$dir")
	pids=$(pids_from "$dir" "$run")
	if [ -n "$pids" ]; then
		log "processes still running from $dir:"
		for p in $pids; do
			printf '  %s %s\n' "$p" "$(tr '\0' ' ' < "/proc/$p/cmdline" 2>/dev/null | cut -c1-160)" >&2
		done
		left=1
	fi
	m=$(mounts_under "$dir" "$run")
	if [ -n "$m" ]; then
		log "still mounted under $dir or $run:"
		echo "$m" | sed 's/^/  /' >&2
		left=1
	fi
	for p in "$dir" "$run"; do
		if [ -e "$p" ]; then
			log "$p still exists"
			left=1
		fi
	done
	return "$left"
}

[ $# -eq 2 ] || { [ $# -eq 3 ] && { [ "$1" = kill ] || [ "$1" = start ]; }; } || usage
dir=$(realpath -m -- "$2")
check_dir_arg "$dir"
case "$1" in
up) cmd_up "$dir" ;;
down) cmd_down "$dir" ;;
gone) cmd_gone "$dir" ;;
kill) cmd_kill "$dir" "$3" ;;
start) cmd_start "$dir" "$3" ;;
*) usage ;;
esac
