#!/bin/sh
# build.sh - build the default sandbox image (Debian bookworm minbase), or the
# browser image on top of it, and import it into a runtime.
#
#   deploy/image/build.sh [--browser] docker|podman unix://SOCKET CACHE_DIR [IMAGE]
#
# IMAGE defaults to sbx-default:bookworm, with --browser to sbx-browser:bookworm
# (an IMAGE named sbx-browser:* means --browser too). Does nothing when the runtime behind
# SOCKET already has IMAGE (SBX_IMAGE_REBUILD=1 builds it again). Otherwise:
#   1. debootstrap --variant=minbase --include=bash,coreutils,python3-minimal,
#      ca-certificates bookworm into CACHE_DIR/rootfs, from the mirror this
#      machine's own apt sources name (/etc/apt/sources.list, then
#      /etc/apt/sources.list.d/*.list and *.sources); SBX_IMAGE_MIRROR
#      overrides it. 1–4 minutes the first time, depending on the mirror and the machine,
#      ~240 MB. Progress (phase and
#      package counts from debootstrap's log) is shown every few seconds.
#   2. adds user and group sbx 1000:1000 with home /work, creates /work owned
#      1000:1000 (a new named volume copies its mount point's owner, so the
#      sandbox user can write its /work) and the /.sbx mount point of the
#      helper; drops apt caches; tars it to CACHE_DIR/sbx-default-bookworm.tar
#      (kept: the next build skips debootstrap; delete it to refresh).
#   2b. --browser only (adr/0064): unpacks that tar into CACHE_DIR/rootfs-browser,
#      chroots into it and apt-get installs Debian's chromium,
#      fonts-dejavu-core and python3 (--no-install-recommends) from the same
#      mirror, drops docs, man pages and locales, then tars it to
#      CACHE_DIR/sbx-browser-bookworm.tar (kept like the first). Measured on
#      a 2-core machine: 40-70 s (apt download and unpack; the debootstrap tar
#      reused) plus ~10 s packing; the tar is 785 MB (the default's 149 MB);
#      an import takes 8-12 s.
#   3. imports the tar with PATH/LANG/WORKDIR set: `docker import -c` through
#      DOCKER_HOST=SOCKET, or `podman --remote --url SOCKET import --change`.
# Needs root (debootstrap, chown). Exit 0 when IMAGE is in the runtime;
# otherwise 1 with a line saying what failed and how to fix it.

set -eu

say() { printf 'build.sh: %s\n' "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

BROWSER=0
if [ "${1:-}" = --browser ]; then
	BROWSER=1
	shift
fi
[ $# -ge 3 ] || { echo "usage: $0 [--browser] docker|podman unix://SOCKET CACHE_DIR [IMAGE]" >&2; exit 2; }
KIND=$1
HOST=$2
CACHE=$3
if [ "$BROWSER" = 1 ]; then
	IMAGE=${4:-sbx-browser:bookworm}
else
	IMAGE=${4:-sbx-default:bookworm}
fi
case $IMAGE in sbx-browser:*) BROWSER=1 ;; esac
SUITE=bookworm
ENVPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

case $KIND in
docker) rt() { DOCKER_HOST=$HOST docker "$@"; } ;;
podman) rt() { podman --remote --url "$HOST" "$@"; } ;;
*) echo "$0: runtime must be docker or podman, not $KIND" >&2; exit 2 ;;
esac

if [ "${SBX_IMAGE_REBUILD:-0}" != 1 ] && rt image inspect "$IMAGE" >/dev/null 2>&1; then
	say "image $IMAGE is present"
	exit 0
fi

# mirror(): SBX_IMAGE_MIRROR, else the machine's own apt sources.
. "$(dirname "$0")/mirror.sh"

# progress PID LOG T0: while debootstrap (PID) runs, one line when its phase
# changes and every 5 s, from the "I: ..." lines of its LOG, so the ~50 s
# first build is not silent.
count() { grep -c "$1" "$2" 2>/dev/null || true; }
progress() {
	last=""
	lastt=0
	while kill -0 "$1" 2>/dev/null; do
		sleep 1
		now=$(date +%s)
		if grep -q '^I: Configuring ' "$2" 2>/dev/null; then
			phase="configuring packages ($(count '^I: Configuring ' "$2") done)"
		elif grep -q '^I: Unpacking ' "$2" 2>/dev/null; then
			phase="unpacking packages ($(count '^I: Unpacking ' "$2") done)"
		elif grep -q '^I: Extracting ' "$2" 2>/dev/null; then
			phase="extracting packages ($(count '^I: Extracting ' "$2") done)"
		elif grep -q '^I: Retrieving ' "$2" 2>/dev/null; then
			phase="downloading packages ($(count '^I: Retrieving ' "$2") fetched)"
		else
			phase="resolving packages"
		fi
		if [ "${phase%% (*}" != "$last" ] || [ $((now - lastt)) -ge 5 ]; then
			say "debootstrap $((now - $3)) s: $phase"
			last=${phase%% (*}
			lastt=$now
		fi
	done
}

TAR=$CACHE/sbx-default-$SUITE.tar
if [ ! -s "$TAR" ]; then
	[ "$(id -u)" -eq 0 ] || die "building the image needs root (debootstrap); run as root, or import an image yourself and set SBX_RUN_IMAGE"
	command -v debootstrap >/dev/null 2>&1 || die "debootstrap is not installed; run: sh deploy/deps.sh"
	MIRROR=$(mirror "$SUITE")
	[ -n "$MIRROR" ] || die "no apt source for $SUITE found in /etc/apt/sources.list(.d); set SBX_IMAGE_MIRROR to a Debian mirror URL"
	mkdir -p "$CACHE"
	ROOT=$CACHE/rootfs
	rm -rf "$ROOT"
	say "debootstrap $SUITE (minbase + bash, python3-minimal, ca-certificates) from $MIRROR; 1–4 minutes the first time, depending on the mirror and the machine, 240 MB ..."
	t0=$(date +%s)
	debootstrap --variant=minbase --include=bash,coreutils,python3-minimal,ca-certificates \
		"$SUITE" "$ROOT" "$MIRROR" >"$CACHE/debootstrap.log" 2>&1 &
	dpid=$!
	progress "$dpid" "$CACHE/debootstrap.log" "$t0"
	if ! wait "$dpid"; then
		tail -n 15 "$CACHE/debootstrap.log" | sed 's/^/  | /' >&2
		rm -rf "$ROOT"
		die "debootstrap failed (log: $CACHE/debootstrap.log); check that $MIRROR is reachable, or set SBX_IMAGE_MIRROR"
	fi
	say "debootstrap done in $(( $(date +%s) - t0 )) s; adding user sbx 1000:1000, /work, /.sbx"
	grep -q '^sbx:' "$ROOT/etc/group" || echo 'sbx:x:1000:' >> "$ROOT/etc/group"
	grep -q '^sbx:' "$ROOT/etc/passwd" || echo 'sbx:x:1000:1000:sbx sandbox user:/work:/bin/bash' >> "$ROOT/etc/passwd"
	grep -q '^sbx:' "$ROOT/etc/shadow" || echo 'sbx:!:20000:0:99999:7:::' >> "$ROOT/etc/shadow"
	mkdir -p "$ROOT/work" "$ROOT/.sbx"
	chown 1000:1000 "$ROOT/work"
	chmod 0755 "$ROOT/work" "$ROOT/.sbx"
	rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/log/*.log
	say "packing the root filesystem into $TAR ..."
	tar --numeric-owner -C "$ROOT" -cf "$TAR.tmp" . || die "tar of $ROOT failed (disk full?)"
	mv "$TAR.tmp" "$TAR"
	rm -rf "$ROOT"
else
	say "using the cached root filesystem $TAR"
fi

# 2b. the browser layer: chromium and one font family on the cached base.
if [ "$BROWSER" = 1 ]; then
	BTAR=$CACHE/sbx-browser-$SUITE.tar
	if [ ! -s "$BTAR" ]; then
		[ "$(id -u)" -eq 0 ] || die "building the browser image needs root (chroot); run as root, or import an image with chromium yourself"
		ROOT=$CACHE/rootfs-browser
		rm -rf "$ROOT"
		mkdir -p "$ROOT"
		t0=$(date +%s)
		say "installing chromium, fonts-dejavu-core and python3 into a copy of $TAR (40-70 s the first time, about 640 MB more) ..."
		tar --numeric-owner -C "$ROOT" -xf "$TAR" || die "unpacking $TAR failed (disk full?)"
		cp /etc/resolv.conf "$ROOT/etc/resolv.conf"
		: >"$CACHE/browser-apt.log"
		# Twice at most: one apt run in the chroot once failed with dpkg
		# "unable to execute rm" and passed when run again; the second try
		# first finishes what dpkg left half-configured.
		ok=0
		for try in 1 2; do
			if chroot "$ROOT" /bin/sh -c 'export DEBIAN_FRONTEND=noninteractive; apt-get -q update &&
				{ dpkg --configure -a || true; } &&
				apt-get -q install -y --no-install-recommends chromium fonts-dejavu-core python3' >>"$CACHE/browser-apt.log" 2>&1; then
				ok=1
				break
			fi
			[ "$try" = 2 ] || say "apt-get in the image failed (try $try of 2; log: $CACHE/browser-apt.log); once more"
		done
		if [ "$ok" = 0 ]; then
			tail -n 15 "$CACHE/browser-apt.log" | sed 's/^/  | /' >&2
			rm -rf "$ROOT"
			die "apt-get install chromium in the image failed (log: $CACHE/browser-apt.log); is the mirror in $ROOT/etc/apt/sources.list reachable?"
		fi
		: >"$ROOT/etc/resolv.conf"
		rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/cache/apt/*.bin \
			"$ROOT"/var/lib/apt/lists/* "$ROOT"/var/log/*.log "$ROOT"/var/log/apt/* \
			"$ROOT"/usr/share/doc/* "$ROOT"/usr/share/man/* "$ROOT"/usr/share/locale/*
		say "chromium installed in $(( $(date +%s) - t0 )) s; packing $BTAR ..."
		tar --numeric-owner -C "$ROOT" -cf "$BTAR.tmp" . || die "tar of $ROOT failed (disk full?)"
		mv "$BTAR.tmp" "$BTAR"
		rm -rf "$ROOT"
	else
		say "using the cached browser root filesystem $BTAR"
	fi
	TAR=$BTAR
fi

say "importing $IMAGE into $KIND ($HOST) ..."
t0=$(date +%s)
case $KIND in
docker)
	rt import -c "ENV PATH=$ENVPATH" -c "ENV LANG=C.UTF-8" -c "WORKDIR /work" \
		"$TAR" "$IMAGE" >/dev/null ;;
podman)
	rt import --change "ENV PATH=$ENVPATH" --change "ENV LANG=C.UTF-8" \
		--change "WORKDIR /work" "$TAR" "$IMAGE" >/dev/null ;;
esac || die "$KIND import of $TAR failed; is the runtime at $HOST up? (a broken tar: delete it and run again)"
say "image $IMAGE ready ($(( $(date +%s) - t0 )) s)"
