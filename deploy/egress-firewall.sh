#!/bin/sh
# egress-firewall.sh - host firewall rules that keep egress sandboxes apart and away from the host (ADR 0014, docs/security.md).
#
#   egress-firewall.sh apply    install (or replace) the rules; idempotent
#   egress-firewall.sh remove   take them out again; absent is fine
#   egress-firewall.sh show     print the rules apply would install
#   egress-firewall.sh check    exit 0 when the rules are installed (as many
#                               as apply installs, jumped to), else 1
#
# Every sandbox granted egress sits alone on a bridge network of its own
# whose host interface is named "$SBX_EGRESS_BRIDGE_PREFIX<hex>" (the
# broker's egress_bridge_prefix, default "sbxe"). The host routes between
# those bridges and answers on every address it has, so without these rules a
# sandbox reaches the others' ports and any host service bound on 0.0.0.0
# through its gateway, whatever the runtime's own firewall does (measured:
# Docker with --iptables=false, Podman 4.3 with netavark 1.4; ADR 0014).
# Packets that arrive on a sandbox bridge are dropped when they go
#   * to another sandbox bridge,
#   * to a private, loopback, link-local (cloud metadata), CGNAT, benchmark
#     or multicast address: other container networks (the compose network of
#     sbx itself included), the LAN, 169.254.169.254,
#   * to the host itself (INPUT), except replies and DNS to the sandbox's own
#     gateway address (port 53: Podman's aardvark-dns answers there),
# unless an operator names the destination in SBX_EGRESS_ALLOW. DNS (port 53)
# leaves the host only for the resolvers: addresses the operator names in
# SBX_EGRESS_RESOLVERS are accepted before the private-range drop (a VPC
# resolver in 10/8 works); without it, the nameserver addresses of
# SBX_EGRESS_RESOLV_CONF are accepted after that drop, so a private one
# found there opens nothing. Single addresses only, never a range. Everything
# else (the internet) is left to the host's and the runtime's own policy.
#
# Backend: nftables (a table "inet sbx_egress" of its own, at a priority
# before the filter chains, so no other tool's rule order matters) when
# `nft` exists, else iptables/ip6tables (chains SBX-EGRESS-FWD/-IN, jumped to
# first from DOCKER-USER when Docker made it, else from FORWARD, and from
# INPUT; re-run apply after a firewall reload). SBX_EGRESS_BACKEND=nft|
# iptables forces one.
#
# Environment:
#   SBX_EGRESS_BRIDGE_PREFIX  interface prefix [sbxe]; must match the broker
#   SBX_EGRESS_ALLOW          space-separated CIDRs sandboxes may reach anyway
#   SBX_EGRESS_DNS            1: allow port 53 to the resolvers and to the
#                             sandbox's gateway; 0: nowhere [1]
#   SBX_EGRESS_RESOLVERS      space-separated resolver addresses (no /len),
#                             accepted before the private-range drop
#                             [unset: SBX_EGRESS_RESOLV_CONF's, after it]
#   SBX_EGRESS_RESOLV_CONF    where the default resolvers come from; its
#                             loopback and scoped (%) nameservers are
#                             skipped [/etc/resolv.conf; with systemd-resolved
#                             name /run/systemd/resolve/resolv.conf]
#   SBX_EGRESS_BACKEND        nft or iptables [nft when installed]
#
# Exit: 0 done; 1 the firewall tool failed; 2 usage or bad environment.
# Run it as root on the host (or inside the network namespace the runtime
# uses), before the broker starts: the systemd unit's ExecStartPre, or by hand.

set -eu

PREFIX=${SBX_EGRESS_BRIDGE_PREFIX:-sbxe}
ALLOW=${SBX_EGRESS_ALLOW:-}
DNS=${SBX_EGRESS_DNS:-1}
RESOLV_CONF=${SBX_EGRESS_RESOLV_CONF:-/etc/resolv.conf}
TABLE=sbx_egress

PRIVATE4="0.0.0.0/8 10.0.0.0/8 100.64.0.0/10 127.0.0.0/8 169.254.0.0/16 172.16.0.0/12 192.0.0.0/24 192.88.99.0/24 192.168.0.0/16 198.18.0.0/15 224.0.0.0/3"
PRIVATE6="::1/128 ::ffff:0:0/96 64:ff9b:1::/48 fc00::/7 fe80::/10 ff00::/8"

die() {
	echo "egress-firewall: $*" >&2
	exit 2
}

usage() {
	echo "usage: $0 apply|remove|show|check" >&2
	exit 2
}

case $PREFIX in
[a-z]*) ;;
*) die "SBX_EGRESS_BRIDGE_PREFIX must start with a letter: $PREFIX" ;;
esac
case $PREFIX in
*[!a-z0-9]*) die "SBX_EGRESS_BRIDGE_PREFIX may hold only [a-z0-9]: $PREFIX" ;;
esac
[ "${#PREFIX}" -le 6 ] || die "SBX_EGRESS_BRIDGE_PREFIX is longer than 6: $PREFIX"
case $DNS in
0|1) ;;
*) die "SBX_EGRESS_DNS must be 0 or 1: $DNS" ;;
esac
ALLOW4=""
ALLOW6=""
for c in $ALLOW; do
	case $c in
	*[!0-9a-fA-F.:/]*|"") die "SBX_EGRESS_ALLOW: not a CIDR: $c" ;;
	*:*) ALLOW6="$ALLOW6 $c" ;;
	*) ALLOW4="$ALLOW4 $c" ;;
	esac
done

# Resolvers: named (before the private-range drop) or the host's (after it).
if [ "${SBX_EGRESS_RESOLVERS+set}" = set ]; then
	RESOLVERS=$SBX_EGRESS_RESOLVERS
	RESOLVERS_NAMED=1
else
	RESOLVERS=""
	RESOLVERS_NAMED=0
	if [ "$DNS" = 1 ] && [ -r "$RESOLV_CONF" ]; then
		RESOLVERS=$(awk '$1 == "nameserver" && $2 !~ /%/ && $2 !~ /^127\./ && $2 != "::1" { print $2 }' "$RESOLV_CONF")
	fi
fi
DNS4=""
DNS6=""
for a in $RESOLVERS; do
	case $a in
	*/*) die "SBX_EGRESS_RESOLVERS: a resolver is one address, not a range: $a" ;;
	*[!0-9a-fA-F.:]*) die "SBX_EGRESS_RESOLVERS: not an address: $a" ;;
	*:*) DNS6="$DNS6 $a" ;;
	*) DNS4="$DNS4 $a" ;;
	esac
done
[ "$DNS" = 1 ] || { DNS4=""; DNS6=""; }

backend() {
	case ${SBX_EGRESS_BACKEND:-} in
	nft|iptables) echo "$SBX_EGRESS_BACKEND" ;;
	"") if command -v nft >/dev/null 2>&1; then echo nft; else echo iptables; fi ;;
	*) die "SBX_EGRESS_BACKEND must be nft or iptables" ;;
	esac
}

# "a b c" -> "a, b, c"
commas() {
	echo "$*" | sed 's/^ *//; s/ *$//; s/  */, /g'
}

# ---------------------------------------------------------------- nftables

# Word splitting of the CIDR lists is meant.
# shellcheck disable=SC2086
nft_dns() {
	[ -n "$DNS4" ] && echo "		iifname \"$PREFIX*\" oifname != \"$PREFIX*\" ip daddr { $(commas $DNS4) } meta l4proto { tcp, udp } th dport 53 accept"
	[ -n "$DNS6" ] && echo "		iifname \"$PREFIX*\" oifname != \"$PREFIX*\" ip6 daddr { $(commas $DNS6) } meta l4proto { tcp, udp } th dport 53 accept"
	return 0
}

# shellcheck disable=SC2086
nft_rules() {
	echo "table inet $TABLE {"
	echo "	chain forward {"
	echo "		type filter hook forward priority filter - 5; policy accept;"
	[ "$RESOLVERS_NAMED" = 1 ] && nft_dns
	[ -n "$ALLOW4" ] && echo "		iifname \"$PREFIX*\" oifname != \"$PREFIX*\" ip daddr { $(commas $ALLOW4) } accept"
	[ -n "$ALLOW6" ] && echo "		iifname \"$PREFIX*\" oifname != \"$PREFIX*\" ip6 daddr { $(commas $ALLOW6) } accept"
	echo "		iifname \"$PREFIX*\" oifname \"$PREFIX*\" drop"
	echo "		iifname \"$PREFIX*\" ip daddr { $(commas $PRIVATE4) } drop"
	echo "		iifname \"$PREFIX*\" ip6 daddr { $(commas $PRIVATE6) } drop"
	[ "$RESOLVERS_NAMED" = 0 ] && nft_dns
	echo "	}"
	echo "	chain input {"
	echo "		type filter hook input priority filter - 5; policy accept;"
	echo "		iifname \"$PREFIX*\" ct state established,related accept"
	[ "$DNS" = 1 ] && echo "		iifname \"$PREFIX*\" fib daddr . iif type local meta l4proto { tcp, udp } th dport 53 accept"
	echo "		iifname \"$PREFIX*\" drop"
	echo "	}"
	echo "}"
}

nft_apply() {
	# One transaction: the old table goes and the new one comes at once.
	{
		echo "table inet $TABLE"
		echo "delete table inet $TABLE"
		nft_rules
	} | nft -f - || exit 1
}

nft_remove() {
	if nft list table inet "$TABLE" >/dev/null 2>&1; then
		nft delete table inet "$TABLE" || exit 1
	fi
}

# Installed, with as many rules in each chain as apply installs.
nft_check() {
	have=$(nft list table inet "$TABLE" 2>/dev/null | grep -c -e ' accept$' -e ' drop$') || return 1
	want=$(nft_rules | grep -c -e ' accept$' -e ' drop$')
	[ "$have" = "$want" ]
}

# ---------------------------------------------------------------- iptables

# $1: the resolver addresses of one family.
ipt_dns() {
	for a in $1; do
		echo "-A SBX-EGRESS-FWD ! -o $PREFIX+ -d $a -p udp --dport 53 -j RETURN"
		echo "-A SBX-EGRESS-FWD ! -o $PREFIX+ -d $a -p tcp --dport 53 -j RETURN"
	done
}

ipt_rules() {
	# $1: 4 or 6
	fam=$1
	if [ "$fam" = 4 ]; then priv=$PRIVATE4; allow=$ALLOW4; dns=$DNS4; else priv=$PRIVATE6; allow=$ALLOW6; dns=$DNS6; fi
	echo "-N SBX-EGRESS-FWD"
	echo "-N SBX-EGRESS-IN"
	[ "$RESOLVERS_NAMED" = 1 ] && ipt_dns "$dns"
	for c in $allow; do
		echo "-A SBX-EGRESS-FWD ! -o $PREFIX+ -d $c -j RETURN"
	done
	echo "-A SBX-EGRESS-FWD -o $PREFIX+ -j DROP"
	for c in $priv; do
		echo "-A SBX-EGRESS-FWD -d $c -j DROP"
	done
	[ "$RESOLVERS_NAMED" = 0 ] && ipt_dns "$dns"
	echo "-A SBX-EGRESS-IN -m conntrack --ctstate ESTABLISHED,RELATED -j RETURN"
	if [ "$DNS" = 1 ]; then
		echo "-A SBX-EGRESS-IN -m addrtype --dst-type LOCAL --limit-iface-in -p udp --dport 53 -j RETURN"
		echo "-A SBX-EGRESS-IN -m addrtype --dst-type LOCAL --limit-iface-in -p tcp --dport 53 -j RETURN"
	fi
	echo "-A SBX-EGRESS-IN -j DROP"
}

ipt_tool() {
	if [ "$1" = 4 ]; then echo iptables; else echo ip6tables; fi
}

ipt_fwd_parent() {
	if "$1" -w -S DOCKER-USER >/dev/null 2>&1; then echo DOCKER-USER; else echo FORWARD; fi
}

ipt_remove_one() {
	t=$1
	for parent in DOCKER-USER FORWARD; do
		while "$t" -w -D "$parent" -i "$PREFIX+" -j SBX-EGRESS-FWD 2>/dev/null; do :; done
	done
	while "$t" -w -D INPUT -i "$PREFIX+" -j SBX-EGRESS-IN 2>/dev/null; do :; done
	for c in SBX-EGRESS-FWD SBX-EGRESS-IN; do
		if "$t" -w -S "$c" >/dev/null 2>&1; then
			"$t" -w -F "$c" && "$t" -w -X "$c" || exit 1
		fi
	done
}

ipt_apply() {
	for fam in 4 6; do
		t=$(ipt_tool "$fam")
		command -v "$t" >/dev/null 2>&1 || { echo "egress-firewall: $t not found" >&2; exit 1; }
		ipt_remove_one "$t"
		ipt_rules "$fam" | while read -r line; do
			# shellcheck disable=SC2086 # one rule, split into words
			"$t" -w $line || exit 1
		done
		"$t" -w -I "$(ipt_fwd_parent "$t")" 1 -i "$PREFIX+" -j SBX-EGRESS-FWD || exit 1
		"$t" -w -I INPUT 1 -i "$PREFIX+" -j SBX-EGRESS-IN || exit 1
	done
}

# Installed, with as many rules in each chain as apply installs, and jumped to.
ipt_check() {
	for fam in 4 6; do
		t=$(ipt_tool "$fam")
		have=$({ "$t" -w -S SBX-EGRESS-FWD && "$t" -w -S SBX-EGRESS-IN; } 2>/dev/null | grep -c '^-A') || return 1
		want=$(ipt_rules "$fam" | grep -c '^-A')
		[ "$have" = "$want" ] || return 1
		"$t" -w -C "$(ipt_fwd_parent "$t")" -i "$PREFIX+" -j SBX-EGRESS-FWD 2>/dev/null || return 1
		"$t" -w -C INPUT -i "$PREFIX+" -j SBX-EGRESS-IN 2>/dev/null || return 1
	done
}

# ---------------------------------------------------------------- main

[ $# -eq 1 ] || usage
b=$(backend)
case $1 in
apply)
	if [ "$b" = nft ]; then nft_apply; else ipt_apply; fi
	echo "egress-firewall: rules for $PREFIX* bridges applied ($b)" >&2
	;;
remove)
	if [ "$b" = nft ]; then nft_remove; else for f in 4 6; do ipt_remove_one "$(ipt_tool $f)"; done; fi
	echo "egress-firewall: rules for $PREFIX* bridges removed ($b)" >&2
	;;
show)
	if [ "$b" = nft ]; then nft_rules; else
		echo "# iptables"; ipt_rules 4
		echo "# ip6tables"; ipt_rules 6
	fi
	;;
check)
	if [ "$b" = nft ]; then nft_check; else ipt_check; fi
	;;
*) usage ;;
esac
