# mirror.sh - sourced by the image scripts: the Debian mirror to debootstrap from.
# shellcheck shell=sh
#
#   . deploy/image/mirror.sh; MIRROR=$(mirror bookworm)
#
# SBX_IMAGE_MIRROR when set; else the first deb URI whose suites include
# SUITE, from this machine's own apt sources: one-line format
# ("deb [opts] URI SUITE COMP...") in /etc/apt/sources.list and
# /etc/apt/sources.list.d/*.list, then deb822 stanzas (Types/URIs/Suites) in
# /etc/apt/sources.list.d/*.sources. Prints nothing when none is found.

mirror() {
	_mirror_suite=$1
	if [ -n "${SBX_IMAGE_MIRROR:-}" ]; then
		echo "$SBX_IMAGE_MIRROR"
		return
	fi
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		awk -v s="$_mirror_suite" '$1 == "deb" {
			i = 2
			if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
			if ($(i + 1) == s) { print $i; exit }
		}' "$f"
	done | head -n 1 | grep . && return
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		awk -v s="$_mirror_suite" '
		function flush() {
			if (deb && uri != "" && suite) { print uri; found = 1; exit }
			deb = 0; uri = ""; suite = 0
		}
		/^[ \t]*$/ { flush(); next }
		/^[ \t]*#/ { next }
		tolower($1) == "types:" { for (i = 2; i <= NF; i++) if ($i == "deb") deb = 1 }
		tolower($1) == "uris:" { uri = $2 }
		tolower($1) == "suites:" { for (i = 2; i <= NF; i++) if ($i == s) suite = 1 }
		END { if (!found) flush() }' "$f"
	done | head -n 1
}
