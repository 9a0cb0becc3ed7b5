/* cli_print.h - what sbxctl prints from server replies: escaped text and times that cannot crash it. */
#ifndef CLI_PRINT_H
#define CLI_PRINT_H

#include <stddef.h>
#include <stdint.h>

#include <jansson.h>

/*
 * Writes s[0..n) to out (cap bytes, cap >= 8) so a terminal shows it and
 * nothing else: valid UTF-8 printable text is copied; a backslash becomes
 * "\\"; every C0 control byte, DEL, C1 control (U+0080..U+009F) and every
 * byte that is not part of valid UTF-8 becomes "\xHH" (so ESC is "\x1b",
 * never a raw escape sequence). s may hold NUL bytes (n counts them).
 * When out is too small the text is cut on a whole escape and ends in
 * "..."; out is always NUL-terminated. Returns the length written.
 * Pure (no I/O, no locale): fuzzed with the reply parsers.
 */
size_t cli_escape(const char *s, size_t n, char *out, size_t cap);

/*
 * The text sbxctl --json prints for v (2-space indent, keys in the
 * reply's order, no final newline), with DEL and every C1 control
 * (U+0080..U+009F) written as "\u007F", "\u0080".."\u009F", as jansson
 * already writes the C0 ones: a terminal shows them, never runs them
 * (U+009B is CSI). Other UTF-8 is kept as it is. Returns a malloc'd
 * NUL-terminated string the caller frees, or NULL when v cannot be dumped
 * (out of memory). No I/O.
 */
char *cli_json_text(const json_t *v);

/*
 * Formats secs (Unix seconds, any int64 a server may send) as
 * "YYYY-MM-DD HH:MM" (with_seconds 0) or "YYYY-MM-DD HH:MM:SS UTC" (1) in
 * UTC into buf (cap >= 32), and returns buf. A time whose year is outside
 * 0..9999 (or that gmtime_r cannot represent) is written as the plain
 * number ("@9223372036854775807"), never passed to a formatter unchecked.
 */
const char *cli_time(int64_t secs, int with_seconds, char *buf, size_t cap);

/*
 * The broker's stop_reason (docs/api.md "GET …/sandbox": operator, idle,
 * oom, exited, lost) in a user's words, as `sbxctl status` prints them; an
 * unknown reason is returned as given. reason: not NULL. Returns a static
 * string or reason itself (borrowed).
 */
const char *cli_stop_words(const char *reason);

#endif
