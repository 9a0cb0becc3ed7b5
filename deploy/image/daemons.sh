#!/bin/sh
# daemons.sh - build the sandbox-broker and sandbox-api container images from this tree, pulling nothing.
#
#   deploy/image/daemons.sh unix://SOCKET CACHE_DIR [TAG]
#
# Builds sbx-broker:TAG and sbx-api:TAG (TAG defaults to "local") into the
# Docker Engine behind SOCKET, from the binaries `make all` left in
# build/out (SBX_BUILD overrides). Steps:
#   1. the base root filesystem, shared by both images: debootstrap
#      --variant=minbase bookworm plus exactly the Debian packages that hold
#      the shared libraries the binaries link (found with ldd + dpkg -S on
#      this machine: libevent-2.1-7, libjansson4, libsqlite3-0, libsodium23
#      today), from the mirror of deploy/image/mirror.sh (SBX_IMAGE_MIRROR
#      overrides). Users and directories of deploy/compose are added: group
#      and user sbx-api 10001:10001; /var/lib/sbx (broker state, root 0700),
#      /var/lib/sbx-api (api state, 10001 0700), /run/sbx (the broker's
#      socket, root:10001 2750). Kept as CACHE_DIR/sbx-daemon-base-<hash>.tar
#      (the hash is of the package list): the next build skips debootstrap;
#      delete it to refresh. 1–4 minutes the first time, depending on the mirror and the machine,
#      ~130 MB, once.
#   2. per image: the base tar plus its files appended (tar -r), imported
#      with `docker import -c`: ENV PATH/LANG, WORKDIR /, USER, ENTRYPOINT,
#      a LABEL with the source revision.
#        sbx-broker: /usr/local/bin/sandbox-broker,
#                    /usr/local/libexec/sbx/sbx-helper (the make install
#                    layout, where the broker finds its helper); USER 0.
#        sbx-api:    /usr/local/bin/sandbox-api, USER 10001:10001.
#      Skipped when NAME:TAG already holds the same content: the label
#      io.sbx.content is the sha256 of the inputs (the base tar, the files,
#      the import options and the revision), compared with `docker image
#      inspect`, so an unchanged tree keeps its image IDs and docker-compose
#      recreates nothing. A previous image of the same name is removed when
#      nothing uses it (up.sh prunes it once its container moved on).
#      Each import takes a few seconds.
# Needs root (debootstrap, chown) and the docker CLI (SBX_DOCKER_CLI, else
# `docker`). Exit 0 when both images are in the engine; otherwise 1 with a
# line saying what failed and how to fix it.

set -eu

say() { printf 'daemons.sh: %s\n' "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

[ $# -ge 2 ] || { echo "usage: $0 unix://SOCKET CACHE_DIR [TAG]" >&2; exit 2; }
HOST=$1
CACHE=$2
TAG=${3:-local}
SUITE=bookworm
ENVPATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
API_UID=10001
REPO=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=${SBX_BUILD:-$REPO/build/out}
DOCKER=${SBX_DOCKER_CLI:-docker}

case $HOST in unix://*) ;; *) die "SOCKET must be unix://PATH, not $HOST" ;; esac
rt() { DOCKER_HOST=$HOST "$DOCKER" "$@"; }

. "$(dirname "$0")/mirror.sh"

for b in sandbox-broker sandbox-api sbx-helper; do
	[ -x "$BUILD/$b" ] || die "$BUILD/$b is missing; run 'make all' first"
done
[ "$(id -u)" -eq 0 ] || die "building the images needs root (debootstrap, chown); run as root"
command -v "$DOCKER" >/dev/null 2>&1 || die "the docker CLI is not installed; run: sh deploy/deps.sh"
rt version >/dev/null 2>&1 || die "no Docker Engine answers at $HOST; start it or pass its socket"

# The packages that hold the libraries the daemons link, as installed here
# (Debian 12, the same suite as the image).
pkgs=$(for lib in $(ldd "$BUILD/sandbox-broker" "$BUILD/sandbox-api" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u); do
	dpkg -S "$lib" 2>/dev/null || dpkg -S "$(realpath "$lib")" 2>/dev/null ||
		{ echo "NOTFOUND:$lib"; continue; }
done | cut -d: -f1 | sort -u | tr '\n' ' ')
case $pkgs in *NOTFOUND*) die "no Debian package holds a library the daemons link ($pkgs); build them against Debian packages" ;; esac
[ -n "$pkgs" ] || die "ldd found no library of $BUILD/sandbox-api (a static build?)"
hash=$(printf '%s' "$pkgs" | sha256sum | cut -c1-12)
BASE=$CACHE/sbx-daemon-base-$SUITE-$hash.tar

if [ ! -s "$BASE" ]; then
	command -v debootstrap >/dev/null 2>&1 || die "debootstrap is not installed; run: sh deploy/deps.sh"
	MIRROR=$(mirror "$SUITE")
	[ -n "$MIRROR" ] || die "no apt source for $SUITE found in /etc/apt/sources.list(.d); set SBX_IMAGE_MIRROR to a Debian mirror URL"
	mkdir -p "$CACHE"
	ROOT=$CACHE/daemon-rootfs
	rm -rf "$ROOT"
	include=$(printf "%s" "$pkgs" | tr -s " " "," | sed "s/,$//")
	say "debootstrap $SUITE minbase + $include from $MIRROR (once; 1–4 minutes the first time, depending on the mirror and the machine) ..."
	t0=$(date +%s)
	if ! debootstrap --variant=minbase --include="$include" "$SUITE" "$ROOT" "$MIRROR" \
		>"$CACHE/daemon-debootstrap.log" 2>&1; then
		tail -n 15 "$CACHE/daemon-debootstrap.log" | sed 's/^/  | /' >&2
		rm -rf "$ROOT"
		die "debootstrap failed (log: $CACHE/daemon-debootstrap.log); check that $MIRROR is reachable, or set SBX_IMAGE_MIRROR"
	fi
	say "debootstrap done in $(( $(date +%s) - t0 )) s; adding user sbx-api $API_UID and the state directories"
	grep -q '^sbx-api:' "$ROOT/etc/group" || echo "sbx-api:x:$API_UID:" >> "$ROOT/etc/group"
	grep -q '^sbx-api:' "$ROOT/etc/passwd" ||
		echo "sbx-api:x:$API_UID:$API_UID:sbx api:/nonexistent:/usr/sbin/nologin" >> "$ROOT/etc/passwd"
	grep -q '^sbx-api:' "$ROOT/etc/shadow" || echo 'sbx-api:!:20000:0:99999:7:::' >> "$ROOT/etc/shadow"
	# Named volumes take their mount point's owner and mode from the image
	# (copy-up): these are the modes the compose volumes get.
	mkdir -p "$ROOT/var/lib/sbx" "$ROOT/var/lib/sbx-api" "$ROOT/run/sbx"
	chmod 0700 "$ROOT/var/lib/sbx" "$ROOT/var/lib/sbx-api"
	chown "$API_UID:$API_UID" "$ROOT/var/lib/sbx-api"
	# setgid: the broker's socket is created in group sbx-api, so its 0660
	# lets the api (and nobody else) connect.
	chown "0:$API_UID" "$ROOT/run/sbx"
	chmod 2750 "$ROOT/run/sbx"
	rm -rf "$ROOT"/var/cache/apt/archives/*.deb "$ROOT"/var/lib/apt/lists/* "$ROOT"/var/log/*.log \
		"$ROOT"/var/cache/debconf/*-old "$ROOT"/var/lib/dpkg/*-old
	for lib in $(ldd "$BUILD/sandbox-broker" "$BUILD/sandbox-api" | awk '$2 == "=>" {print $1}' | sort -u); do
		ls "$ROOT"/usr/lib/*/"$lib" >/dev/null 2>&1 || die "$lib is not in the base rootfs after debootstrap"
	done
	say "packing the base root filesystem into $BASE ..."
	tar --numeric-owner -C "$ROOT" -cf "$BASE.tmp" . || die "tar of $ROOT failed (disk full?)"
	mv "$BASE.tmp" "$BASE"
	rm -rf "$ROOT"
else
	say "using the cached base root filesystem $BASE"
fi

REV=$(git -C "$REPO" describe --always --dirty 2>/dev/null || echo unknown)
STAGE=$(mktemp -d "$CACHE/stage.XXXXXX")
trap 'rm -rf "$STAGE"' EXIT

# image NAME USER ENTRYPOINT FILE...: base tar + FILEs (paths under / as in
# the image, taken from STAGE), imported as NAME:TAG.
image() {
	name=$1 user=$2 entry=$3
	shift 3
	# What the image is made of; file names, modes and bytes, not mtimes.
	sum=$( { printf '%s\n' "$REV" "$user" "$entry" "$ENVPATH" "$@"; sha256sum "$BASE" | cut -c1-64
		for f in "$@"; do
			[ -f "$STAGE/root/$f" ] && { stat -c %a "$STAGE/root/$f"; sha256sum <"$STAGE/root/$f"; }
		done; } | sha256sum | cut -c1-64)
	have=$(rt image inspect -f '{{index .Config.Labels "io.sbx.content"}}' "$name:$TAG" 2>/dev/null || true)
	if [ "$have" = "$sum" ]; then
		say "image $name:$TAG unchanged (revision $REV), kept"
		return 0
	fi
	tar=$STAGE/$name.tar
	cp "$BASE" "$tar"
	# Only the files and the directories that are new: the base's own
	# directory entries (and their modes) stay as they are.
	tar -rf "$tar" --numeric-owner --owner=0 --group=0 --no-recursion -C "$STAGE/root" "$@" ||
		die "appending to $tar failed (disk full?)"
	old=$(rt image inspect -f '{{.Id}}' "$name:$TAG" 2>/dev/null || true)
	t0=$(date +%s)
	rt import -c "ENV PATH=$ENVPATH" -c "ENV LANG=C.UTF-8" -c "WORKDIR /" -c "USER $user" \
		-c "ENTRYPOINT [\"$entry\"]" -c "LABEL org.opencontainers.image.revision=$REV" \
		-c "LABEL org.opencontainers.image.title=$name" -c "LABEL io.sbx.content=$sum" \
		"$tar" "$name:$TAG" >/dev/null ||
		die "docker import of $name:$TAG failed; is the engine at $HOST up? (a broken base tar: delete $BASE)"
	new=$(rt image inspect -f '{{.Id}}' "$name:$TAG")
	if [ -n "$old" ] && [ "$old" != "$new" ]; then
		rt image rm "$old" >/dev/null 2>&1 || true
	fi
	rm -f "$tar"
	say "image $name:$TAG ready ($(( $(date +%s) - t0 )) s, revision $REV)"
}

R=$STAGE/root
install -d -m 0755 "$R/usr/local/bin" "$R/usr/local/libexec/sbx"
install -m 0755 "$BUILD/sandbox-broker" "$BUILD/sandbox-api" "$R/usr/local/bin/"
install -m 0755 "$BUILD/sbx-helper" "$R/usr/local/libexec/sbx/"
image sbx-broker 0:0 /usr/local/bin/sandbox-broker \
	./usr/local/bin/sandbox-broker ./usr/local/libexec ./usr/local/libexec/sbx ./usr/local/libexec/sbx/sbx-helper
image sbx-api "$API_UID:$API_UID" /usr/local/bin/sandbox-api ./usr/local/bin/sandbox-api
