/* cli_print.c - escaping, time formatting and stop reasons in words for sbxctl output (contract in cli_print.h). */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli_print.h"

/* Length of the valid UTF-8 character at s[0..n) (2..4), or 0. */
static size_t
utf8_char(const unsigned char *s, size_t n)
{
	unsigned c = s[0];
	size_t len, i;
	unsigned lo = 0x80, hi = 0xBF;

	if (c >= 0xC2 && c <= 0xDF)
		len = 2;
	else if (c >= 0xE0 && c <= 0xEF) {
		len = 3;
		if (c == 0xE0)
			lo = 0xA0;
		if (c == 0xED)
			hi = 0x9F;
	} else if (c >= 0xF0 && c <= 0xF4) {
		len = 4;
		if (c == 0xF0)
			lo = 0x90;
		if (c == 0xF4)
			hi = 0x8F;
	} else
		return 0;
	if (n < len || s[1] < lo || s[1] > hi)
		return 0;
	for (i = 2; i < len; i++)
		if ((s[i] & 0xC0) != 0x80)
			return 0;
	/* C1 controls U+0080..U+009F are C2 80..C2 9F. */
	if (c == 0xC2 && s[1] <= 0x9F)
		return 0;
	return len;
}

size_t
cli_escape(const char *str, size_t n, char *out, size_t cap)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)str;
	size_t i = 0, o = 0, k, adv;
	char piece[8];

	if (out == NULL || cap < 8)
		return 0;
	if (s == NULL)
		n = 0;
	while (i < n) {
		adv = 1;
		if (s[i] >= 0x20 && s[i] < 0x7f && s[i] != '\\') {
			piece[0] = (char)s[i];
			k = 1;
		} else if (s[i] == '\\') {
			memcpy(piece, "\\\\", 2);
			k = 2;
		} else if (s[i] >= 0x80 && (adv = utf8_char(s + i, n - i)) > 0) {
			memcpy(piece, s + i, adv);
			k = adv;
		} else {
			adv = 1;
			piece[0] = '\\';
			piece[1] = 'x';
			piece[2] = hex[s[i] >> 4];
			piece[3] = hex[s[i] & 15];
			k = 4;
		}
		/* room for this piece, "..." and the NUL */
		if (o + k + 4 > cap) {
			memcpy(out + o, "...", 3);
			o += 3;
			break;
		}
		memcpy(out + o, piece, k);
		o += k;
		i += adv;
	}
	out[o] = '\0';
	return o;
}

char *
cli_json_text(const json_t *v)
{
	static const char hex[] = "0123456789ABCDEF";   /* as jansson */
	char *raw, *out;
	size_t n, i, o = 0, extra = 0;

	if ((raw = json_dumps(v, JSON_INDENT(2) | JSON_PRESERVE_ORDER)) == NULL)
		return NULL;
	n = strlen(raw);
	/* jansson's output is valid UTF-8: C2 followed by 80..9F is always a
	 * C1 character, and raw DEL or C1 only ever stand inside a string. */
	for (i = 0; i < n; i++)
		if ((unsigned char)raw[i] == 0x7f)
			extra += 5;
		else if ((unsigned char)raw[i] == 0xC2 && i + 1 < n &&
		    (unsigned char)raw[i + 1] <= 0x9F)
			extra += 4;
	if ((out = malloc(n + extra + 1)) == NULL) {
		free(raw);
		return NULL;
	}
	for (i = 0; i < n; i++) {
		unsigned c = (unsigned char)raw[i];

		if (c == 0xC2 && i + 1 < n && (unsigned char)raw[i + 1] <= 0x9F)
			c = (unsigned char)raw[++i];
		else if (c != 0x7f) {
			out[o++] = raw[i];
			continue;
		}
		memcpy(out + o, "\\u00", 4);
		out[o + 4] = hex[c >> 4];
		out[o + 5] = hex[c & 15];
		o += 6;
	}
	out[o] = '\0';
	free(raw);
	return out;
}

const char *
cli_time(int64_t secs, int with_seconds, char *buf, size_t cap)
{
	/* 0000-01-01 .. 9999-12-31 23:59:59 UTC */
	const int64_t lo = -62167219200LL, hi = 253402300799LL;
	struct tm tm;
	time_t t;

	if (buf == NULL || cap < 32)
		return "";
	if (secs < lo || secs > hi || (t = (time_t)secs, gmtime_r(&t, &tm)) == NULL ||
	    strftime(buf, cap, with_seconds ? "%Y-%m-%d %H:%M:%S UTC" :
	    "%Y-%m-%d %H:%M", &tm) == 0)
		snprintf(buf, cap, "@%" PRId64, secs);
	return buf;
}

const char *
cli_stop_words(const char *reason)
{
	if (strcmp(reason, "operator") == 0)
		return "by a stop request (sbxctl stop, or POST .../sandbox/stop)";
	if (strcmp(reason, "idle") == 0)
		return "by the idle reaper (unused past idle_timeout)";
	if (strcmp(reason, "oom") == 0)
		return "killed for memory (the sandbox's memory limit)";
	if (strcmp(reason, "exited") == 0)
		return "its processes ended, or the runtime stopped it";
	if (strcmp(reason, "lost") == 0)
		return "lost with its node (kubernetes); ensure it again, "
		    "/work stays";
	return reason;
}
