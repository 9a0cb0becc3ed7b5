#!/bin/sh
# deps.sh - install the Debian 12 packages sbx needs to build, test and run,
# and make the system user sbx-vm (qemu's, driver = vm).
#
# Idempotent and quick when everything is present: it asks dpkg-query first and
# only runs apt-get (update + install --no-install-recommends) for what is
# missing. Without root it installs nothing, names what is missing and prints
# the command to run. Exit status: 0 all present (or installed), 1 missing.
#
# Package services are not started while we install (a temporary policy-rc.d,
# only if the machine has none): sbx and its tests start their own dockerd and
# podman service on private sockets and never use a system-wide daemon.

set -eu

PKGS="
build-essential pkg-config
libevent-dev libjansson-dev libsqlite3-dev libsodium-dev libcmocka-dev sqlite3
libwslay-dev nettle-dev
libssl-dev
docker.io docker-compose podman runc catatonit conmon uidmap iptables netavark aardvark-dns
busybox-static debootstrap
python3 python3-websockets curl jq iproute2 prometheus nftables wget openssl
chromium nodejs
clang libclang-rt-14-dev
systemd nginx-light
qemu-system-x86 linux-image-cloud-amd64 cpio
"
# qemu-system-x86, linux-image-cloud-amd64, cpio: the vm driver (adr/0069):
# qemu -M microvm boots Debian's cloud kernel; deploy/vm/build.sh packs the
# initramfs with cpio (the e2fsprogs of the base system make the disks).
# libssl-dev: TLS of the kubernetes driver (libevent_openssl, adr/0072).
# libwslay-dev: WebSocket framing (common/sbx_ws.c); nettle-dev: the SHA-1 of
# the WebSocket handshake (adr/0052). python3-websockets: the WebSocket
# client of tests/integration/test_api_ws.py.
# systemd: systemd-analyze (verify, security --offline) and systemd-sysusers
# check deploy/systemd/ against a DESTDIR tree (tests/integration/test_deploy_units.py).
# nginx-light: the reverse proxy of deploy/nginx/sbx.conf, started by
# tests/integration/test_nginx.py on a loopback port.
# prometheus: the only bookworm package that ships /usr/bin/promtool, used
# by the tests to check the /metrics text format.
# clang + libclang-rt-14-dev: the libFuzzer targets of tests/fuzz/ (`make
# fuzz`, and their smoke run in `make check`).
# netavark (+ aardvark-dns for names): podman's bridge network backend; with
# --no-install-recommends podman would otherwise get no network stack.
# chromium, nodejs (+ npm, below): the browser test of /console (test_console.py)
# drives Debian's chromium with playwright-core, which `make check` installs
# from tests/e2e/package-lock.json into tests/e2e/node_modules (npm ci).
# npm also builds /console: the Makefile installs xterm.js from
# api/console/package-lock.json (npm ci, adr/0054) and embeds it in the page.
# npm also installs the E2B SDK the E2B scenario drives (npm `e2b`, pinned by
# tests/e2b/package-lock.json; `make check` and `make bench` run npm ci there).
# catatonit: podman's init for HostConfig.Init; docker.io brings tini.
# wget, openssl: clients and the test certificate of the egress proxy's tests
# (tests/integration/test_egress_proxy.py; libevent-dev's static archives
# build the static sbx-proxy).
# nftables: deploy/egress-firewall.sh (ADR 0014) and its test, in a network
# namespace the test creates (tests/integration/test_egress.py).
# docker-compose: Debian's 1.29, for deploy/compose (docs/deploy.md) and
# tests/integration/test_compose.py.

missing=""
for p in $PKGS; do
	st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	[ "$st" = installed ] || missing="$missing $p"
done
# sbx-vm: the user a root broker's qemu drops to with driver = vm (vm_runas,
# adr/0069): a system user of its own, no home, no login shell. Not a
# package, so made here; without root only named.
if ! getent passwd sbx-vm >/dev/null 2>&1; then
	if [ "$(id -u)" -eq 0 ]; then
		useradd --system --no-create-home --shell /usr/sbin/nologin sbx-vm
		echo "deps.sh: made the system user sbx-vm (vm_runas)" >&2
	else
		echo "deps.sh: no user sbx-vm (vm_runas of a root broker with driver = vm);" \
		    "as root: useradd --system --no-create-home --shell /usr/sbin/nologin sbx-vm" >&2
	fi
fi

# Debian's nodejs comes without npm (package npm); a nodejs from elsewhere
# (e.g. NodeSource) ships its own and conflicts with Debian's npm.
command -v npm >/dev/null 2>&1 || missing="$missing npm"

if [ -z "$missing" ]; then
	exit 0
fi

if [ "$(id -u)" -ne 0 ]; then
	echo "deps.sh: missing Debian packages:$missing" >&2
	echo "deps.sh: install them as root with:" >&2
	echo "  apt-get update && apt-get install -y --no-install-recommends$missing" >&2
	exit 1
fi

echo "deps.sh: installing:$missing" >&2
policy=/usr/sbin/policy-rc.d
own_policy=0
if [ ! -e "$policy" ]; then
	printf '#!/bin/sh\nexit 101\n' > "$policy"
	chmod 0755 "$policy"
	own_policy=1
fi
trap 'if [ "$own_policy" -eq 1 ]; then rm -f "$policy"; fi' EXIT

export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086 # word splitting of the package list is intended
apt-get install -y -q --no-install-recommends $missing

for p in $missing; do
	st=$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null || true)
	if [ "$st" != installed ]; then
		echo "deps.sh: $p is still not installed" >&2
		exit 1
	fi
done
[ -x /usr/bin/promtool ] || { echo "deps.sh: /usr/bin/promtool missing" >&2; exit 1; }
exit 0
