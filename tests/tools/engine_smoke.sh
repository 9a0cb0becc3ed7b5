#!/bin/sh
# engine_smoke.sh - hand-run checks of the engine driver on one real runtime socket (prints PASS/FAIL per check).
# Usage: tests/tools/engine_smoke.sh ENGINE_CLI SOCKET HELPER IMAGE
# The image needs busybox applets and /work owned by 1000:1000. Uses sandbox
# ids smoke-a and smoke-b and destroys them at the end.
set -u
CLI=$1 SOCK=$2 HELPER=$3 IMAGE=$4
E="$CLI -s $SOCK -H $HELPER -I $IMAGE"
T=$(mktemp -d /tmp/sbx-engine-smoke.XXXXXX)
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "PASS $1"; }
ko() { fail=$((fail + 1)); echo "FAIL $1"; }
check() { name=$1; shift; if "$@"; then ok "$name"; else ko "$name"; fi; }

$E destroy smoke-a >/dev/null 2>&1
$E destroy smoke-b >/dev/null 2>&1

check "health ok" sh -c "$E health | grep -q '\"ok\":1'"
check "ensure creates and runs" sh -c "$E ensure smoke-a | grep -q '\"state\":\"running\"'"
check "warm ensure is the same container" sh -c \
    "[ \"\$($E ensure smoke-a | sed 's/.*container//')\" = \"\$($E status smoke-a | sed 's/.*container//')\" ]"

$E exec smoke-a -- sh -c 'echo out; echo err >&2; exit 3' >$T/o 2>$T/e
rc=$?
check "exec exit code 3" [ $rc -eq 3 ]
check "exec stdout" [ "$(cat $T/o)" = out ]
check "exec stderr" grep -q '^err$' $T/e

$E exec smoke-a -- printf '\377\376\000\r\n' >$T/o 2>/dev/null
check "exec binary bytes exact" [ "$(od -An -tx1 $T/o | tr -d ' \n')" = fffe000d0a ]

$E exec smoke-a -- sh -c 'head -c 1048576 /dev/zero | tr "\0" a; echo' >$T/o 2>/dev/null
check "exec 1 MiB line" [ "$(wc -c <$T/o)" -eq 1048577 ]

head -c 3000000 /dev/urandom >$T/in
$E -i exec smoke-a -- cat <$T/in >$T/o 2>/dev/null
check "exec stdin 3 MB round trip" cmp -s $T/in $T/o

$E -t 1500 exec smoke-a -- sh -c 'sleep 300 & sleep 301' >/dev/null 2>$T/e
check "timeout reports error/timeout" grep -q 'error: timeout' $T/e
check "timeout leaves no sleep" sh -c \
    "[ \$($E exec smoke-a -- ps 2>/dev/null | grep -c 'sleep 30[01]') -eq 0 ]"

$E -c 100000 exec smoke-a -- yes >$T/o 2>$T/e
check "output cap: exactly the cap delivered" [ "$(wc -c <$T/o)" -eq 100000 ]
check "output cap: exit truncated" grep -q 'truncated=1' $T/e
check "output cap: yes killed" sh -c \
    "[ \$($E exec smoke-a -- ps 2>/dev/null | grep -c ' yes\$') -eq 0 ]"

$E -C 700 exec smoke-a -- sh -c 'sleep 302 & sleep 303' >/dev/null 2>&1
sleep 1
check "cancel kills the process tree" sh -c \
    "[ \$($E exec smoke-a -- ps 2>/dev/null | grep -c 'sleep 30[23]') -eq 0 ]"

head -c 5242880 /dev/urandom >$T/f5
check "write 5 MiB" sh -c "$E write smoke-a /work/d/e/f5.bin 0600 <$T/f5 | grep -q ok"
$E read smoke-a /work/d/e/f5.bin >$T/o 2>/dev/null
check "read 5 MiB exact" cmp -s $T/f5 $T/o
$E -p 2 read smoke-a /work/d/e/f5.bin >$T/o 2>/dev/null
check "slow (paused) read exact" cmp -s $T/f5 $T/o
check "list shows the file, mode, size" sh -c \
    "$E list smoke-a /work/d/e | grep -q '^file f5.bin 5242880 0600 '"
check "written file owned by 1000:1000" sh -c \
    "$E exec smoke-a -- stat -c %u:%g /work/d/e/f5.bin 2>/dev/null | grep -q '^1000:1000\$'"
$E exec smoke-a -- ln -s /etc /work/etc-link >/dev/null 2>&1
check "read missing file: not_found" sh -c "$E read smoke-a /work/nope 2>&1 | grep -q 'error: not_found'"
check "read through symlink out: path_outside_work" sh -c \
    "$E read smoke-a /work/etc-link/passwd 2>&1 | grep -q 'error: path_outside_work'"
check "read ..: path_outside_work" sh -c \
    "$E read smoke-a /work/../etc/passwd 2>&1 | grep -q 'error: path_outside_work'"
check "cwd through symlink out: path_outside_work" sh -c \
    "$E -w /work/etc-link exec smoke-a -- pwd 2>&1 | grep -q 'error: path_outside_work'"
check "no network but loopback" sh -c \
    "[ -z \"\$($E exec smoke-a -- ip route 2>/dev/null)\" ]"

$E -i exec smoke-a -- sh -c 'echo hello >&2; exit 3' <$T/in >/dev/null 2>$T/e
check "stdin not read by the process: still its exit status" grep -q 'exit code=3 ' $T/e
$E exec smoke-a -- sh -c 'kill -TERM $$' >/dev/null 2>$T/e
check "killed by a signal: code 143, signal TERM" grep -q 'exit code=143 signal=TERM' $T/e
check "cwd missing: not_found" sh -c "$E -w /work/nonexist exec smoke-a -- pwd 2>&1 | grep -q 'error: not_found'"
$E exec smoke-a -- sh -c 'mkdir -p /work/n && touch "/work/n/$(printf "bad\377")"' >/dev/null 2>&1
check "list gives exact non-UTF-8 names" sh -c \
    "$E list smoke-a /work/n | od -An -c | tr -d ' \n' | grep -q 'bad377'"
($E exec smoke-a -- sleep 30 >/dev/null 2>$T/stopexec &)
sleep 1.5
echo keep | $E write smoke-a /work/keep.txt >/dev/null 2>&1
check "stop" sh -c "$E stop smoke-a | grep -q ok"
sleep 1
check "stop ends a running exec with an exit" grep -q 'exit code=137 signal=KILL' $T/stopexec
check "status stopped" sh -c "$E status smoke-a | grep -q '\"state\":\"stopped\"'"
check "exec on stopped: not_running" sh -c "$E exec smoke-a -- true 2>&1 | grep -q 'error: not_running'"
check "ensure restarts" sh -c "$E ensure smoke-a | grep -q '\"state\":\"running\"'"
check "volume kept over stop/start" sh -c "[ \"\$($E read smoke-a /work/keep.txt 2>/dev/null)\" = keep ]"
check "egress flip replaces container" sh -c "$E ensure smoke-a egress | grep -q '\"egress\":1'"
check "egress flip keeps /work" sh -c "[ \"\$($E read smoke-a /work/keep.txt 2>/dev/null)\" = keep ]"
check "egress network has a default route" sh -c \
    "$E exec smoke-a -- ip route 2>/dev/null | grep -q default"
check "egress back off" sh -c "$E ensure smoke-a no | grep -q '\"egress\":0'"
check "still keeps /work" sh -c "[ \"\$($E read smoke-a /work/keep.txt 2>/dev/null)\" = keep ]"
check "image not allowed" sh -c "$E ensure smoke-b no other-image:1 2>&1 | grep -q image_not_allowed"
check "list_sandboxes has smoke-a" sh -c "$E sandboxes | grep -q '\"id\":\"smoke-a\"'"
check "status of unknown id: absent" sh -c "$E status smoke-b | grep -q absent"
check "stop unknown: not_found" sh -c "$E stop smoke-b 2>&1 | grep -q 'error: not_found'"
check "destroy" sh -c "$E destroy smoke-a | grep -q ok"
check "destroyed: absent" sh -c "$E status smoke-a | grep -q absent"
check "destroy again: ok" sh -c "$E destroy smoke-a | grep -q ok"
check "recreated sandbox has an empty /work" sh -c \
    "$E ensure smoke-a >/dev/null && $E read smoke-a /work/keep.txt 2>&1 | grep -q not_found"
$E destroy smoke-a >/dev/null 2>&1
curl -s --unix-socket "$SOCK" -H 'Content-Type: application/json' \
    -d "{\"Image\":\"$IMAGE\",\"Cmd\":[\"true\"]}" \
    "http://rt/v1.41/containers/create?name=sbx-smoke-c" >/dev/null
for op in ensure status stop destroy; do
	check "unlabelled sbx-smoke-c: $op is conflict" sh -c \
	    "$E $op smoke-c 2>&1 | grep -q 'error: conflict'"
done
check "unlabelled sbx-smoke-c: still there" sh -c \
    "curl -s -o /dev/null -w '%{http_code}' --unix-socket $SOCK http://rt/v1.41/containers/sbx-smoke-c/json | grep -q 200"
check "unlabelled sbx-smoke-c: not listed" sh -c "! $E sandboxes | grep -q smoke-c"
curl -s -X DELETE --unix-socket "$SOCK" "http://rt/v1.41/containers/sbx-smoke-c?force=1" >/dev/null
check "unreachable socket: runtime_unavailable" sh -c \
    "$CLI -s $T/none.sock -H $HELPER -I $IMAGE status smoke-a 2>&1 | grep -q runtime_unavailable"

rm -rf "$T"
echo "$pass passed, $fail failed"
[ $fail -eq 0 ]
