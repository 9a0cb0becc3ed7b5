#!/bin/sh
# build.sh - make the vm driver's boot files and root disks (adr/0069) from Debian packages and what this tree builds.
#
#   deploy/vm/build.sh boot OUT_DIR SBX_HELPER SBX_VMINIT [SBX_PROXY]
#       OUT_DIR/vmlinuz: Debian's cloud kernel (linux-image-cloud-amd64,
#       the newest in /boot); OUT_DIR/initrd.img: a cpio archive holding
#       SBX_VMINIT as /init, the five virtio modules it loads (virtio_ring,
#       virtio, virtio_mmio, virtio_blk, virtio_console from that kernel's
#       /lib/modules), the static SBX_HELPER and the static SBX_PROXY
#       (default: sbx-proxy beside SBX_HELPER; the egress relay of a
#       sandbox with an allowlist, adr/0069 amendment "egress").
#   deploy/vm/build.sh rootfs OUT_DIR IMAGE SOURCE
#       OUT_DIR/images/KEY.ext4: a read-only ext4 disk of IMAGE's root
#       filesystem, made without mounting (mkfs.ext4 -d). KEY is IMAGE with
#       every byte outside [A-Za-z0-9._-] turned into '_' (the driver looks
#       it up the same way). SOURCE is a tar of the filesystem (the test
#       harness's image tar, deploy/image's debootstrap tar) or
#       unix://SOCKET of a Docker Engine API runtime: then the image is
#       exported through it (`docker create` + `docker export`, the
#       container removed after).
# Needs root for the root disk's owners (tar --same-owner). Exit 0 done, 1
# with a line saying what failed.

set -eu

say() { printf 'vm/build.sh: %s\n' "$*" >&2; }
die() { say "FAILED: $*"; exit 1; }

[ $# -ge 4 ] || { echo "usage: $0 boot OUT SBX_HELPER SBX_VMINIT [SBX_PROXY] | rootfs OUT IMAGE TAR|unix://SOCKET" >&2; exit 2; }
CMD=$1
OUT=$2
mkdir -p "$OUT"
TMP=$(mktemp -d "$OUT/.build.XXXXXX")
trap 'rm -rf "$TMP"' EXIT

case $CMD in
boot)
	HELPER=$3
	INIT=$4
	PROXY=${5:-$(dirname "$HELPER")/sbx-proxy}
	[ -x "$HELPER" ] || die "$HELPER is not an executable sbx-helper"
	[ -x "$INIT" ] || die "$INIT is not an executable sbx-vminit"
	[ -x "$PROXY" ] || die "$PROXY is not an executable sbx-proxy"
	K=$(ls -1 /boot/vmlinuz-*-cloud-amd64 2>/dev/null | sort -V | tail -n 1)
	[ -n "$K" ] || die "no /boot/vmlinuz-*-cloud-amd64: install linux-image-cloud-amd64 (deploy/deps.sh)"
	V=${K#/boot/vmlinuz-}
	MD=/lib/modules/$V
	mkdir -p "$TMP/root/m" "$TMP/root/dev" "$TMP/root/proc" "$TMP/root/sys"
	i=10
	for m in virtio_ring virtio virtio_mmio virtio_blk virtio_console; do
		f=$(find "$MD/kernel" -name "$m.ko*" | head -n 1)
		[ -n "$f" ] || die "module $m missing in $MD"
		case $f in
		*.ko) cp "$f" "$TMP/root/m/$i-$m.ko" ;;
		*.ko.xz) xz -dc "$f" > "$TMP/root/m/$i-$m.ko" ;;
		*) die "module $f: unknown compression" ;;
		esac
		i=$((i + 1))
	done
	cp "$INIT" "$TMP/root/init"
	cp "$HELPER" "$TMP/root/sbx-helper"
	cp "$PROXY" "$TMP/root/sbx-proxy"
	chmod 0755 "$TMP/root/init" "$TMP/root/sbx-helper" "$TMP/root/sbx-proxy"
	(cd "$TMP/root" && find . | LC_ALL=C sort | cpio -o -H newc --quiet -R 0:0) > "$TMP/initrd.img"
	cp "$K" "$TMP/vmlinuz"
	mv "$TMP/initrd.img" "$OUT/initrd.img"
	mv "$TMP/vmlinuz" "$OUT/vmlinuz"
	say "boot files in $OUT (kernel $V)"
	;;
rootfs)
	IMAGE=$3
	SRC=$4
	KEY=$(printf '%s' "$IMAGE" | tr -c 'A-Za-z0-9._-' '_')
	mkdir -p "$TMP/fs" "$OUT/images"
	case $SRC in
	unix://*)
		command -v docker >/dev/null || die "docker CLI missing (docker.io)"
		cid=$(DOCKER_HOST=$SRC docker create "$IMAGE" /nonexistent) || die "cannot create a container of $IMAGE"
		DOCKER_HOST=$SRC docker export "$cid" | tar -C "$TMP/fs" --numeric-owner --same-owner -xf - ||
			{ DOCKER_HOST=$SRC docker rm -f "$cid" >/dev/null 2>&1; die "cannot export $IMAGE"; }
		DOCKER_HOST=$SRC docker rm -f "$cid" >/dev/null 2>&1 || true
		;;
	*)
		[ -r "$SRC" ] || die "$SRC: no such tar"
		tar -C "$TMP/fs" --numeric-owner --same-owner -xf "$SRC" || die "cannot unpack $SRC"
		;;
	esac
	# The mount points init needs; a root disk is read-only, so here.
	for d in work .sbx tmp run proc sys dev; do
		[ -d "$TMP/fs/$d" ] || mkdir -p "$TMP/fs/$d"
	done
	kb=$(du -sk "$TMP/fs" | cut -f1)
	size=$(( kb + kb / 4 + 16384 ))k
	mkfs.ext4 -q -F -L sbxroot -O ^has_journal -d "$TMP/fs" "$TMP/root.ext4" "$size" ||
		die "mkfs.ext4 -d failed"
	mv "$TMP/root.ext4" "$OUT/images/$KEY.ext4"
	say "root disk $OUT/images/$KEY.ext4 ($size)"
	;;
*)
	die "unknown command $CMD (boot or rootfs)"
	;;
esac
