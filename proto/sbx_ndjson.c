/* sbx_ndjson.c - NDJSON exec event codec, writing side: strict UTF-8 and JSON escaping, the encoder (the parser: sbx_ndjson_parse.c). */
#include <limits.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "sbx_ndjson.h"
#include "sbx_proto.h"

/* ------------------------------------------------------------------ */
/* UTF-8 (RFC 3629 §4 table of well-formed byte sequences)             */

/* Number of continuation bytes after lead byte c, or -1 if c cannot lead. */
static int
utf8_extra(unsigned c)
{
	if (c < 0x80)
		return 0;
	if (c >= 0xC2 && c <= 0xDF)
		return 1;
	if (c >= 0xE0 && c <= 0xEF)
		return 2;
	if (c >= 0xF0 && c <= 0xF4)
		return 3;
	return -1;
}

/* The allowed range of the byte after lead c: this is where overlongs
 * (E0 80..9F, F0 80..8F), surrogates (ED A0..BF) and code points above
 * U+10FFFF (F4 90..BF) are excluded. */
static void
utf8_second_range(unsigned c, unsigned *lo, unsigned *hi)
{
	*lo = 0x80;
	*hi = 0xBF;
	if (c == 0xE0)
		*lo = 0xA0;
	else if (c == 0xED)
		*hi = 0x9F;
	else if (c == 0xF0)
		*lo = 0x90;
	else if (c == 0xF4)
		*hi = 0x8F;
}

int
sbx_utf8_valid(const unsigned char *s, size_t len)
{
	size_t i = 0, k;
	unsigned lo, hi;
	int n;

	while (i < len) {
		if (s[i] < 0x80) {
			/* ASCII runs dominate command output: 8 bytes a step. */
			while (len - i >= 8) {
				uint64_t w;

				memcpy(&w, s + i, 8);
				if (w & 0x8080808080808080ULL)
					break;
				i += 8;
			}
			while (i < len && s[i] < 0x80)
				i++;
			continue;
		}
		n = utf8_extra(s[i]);
		if (n < 0 || len - i <= (size_t)n)
			return 0;
		utf8_second_range(s[i], &lo, &hi);
		if (s[i + 1] < lo || s[i + 1] > hi)
			return 0;
		for (k = 2; k <= (size_t)n; k++)
			if ((s[i + k] & 0xC0) != 0x80)
				return 0;
		i += (size_t)n + 1;
	}
	return 1;
}

size_t
sbx_utf8_incomplete_tail(const unsigned char *s, size_t len)
{
	size_t j, have, k;
	unsigned lo, hi;
	int n;

	if (len == 0)
		return 0;
	/* Walk back over at most 3 continuation bytes to the lead byte. */
	j = len - 1;
	while (j > 0 && len - j <= 3 && (s[j] & 0xC0) == 0x80)
		j--;
	n = utf8_extra(s[j]);
	if (n <= 0)
		return 0;
	have = len - j - 1;
	if (have >= (size_t)n)
		return 0;
	if (have >= 1) {
		utf8_second_range(s[j], &lo, &hi);
		if (s[j + 1] < lo || s[j + 1] > hi)
			return 0;
	}
	for (k = 2; k <= have; k++)
		if ((s[j + k] & 0xC0) != 0x80)
			return 0;
	return len - j;
}

/* ------------------------------------------------------------------ */
/* Encoder                                                             */

static const char hexdig[] = "0123456789ABCDEF";

/*
 * Extra bytes each byte costs once escaped, as jansson's dump_string does
 * it: 1 for '"', '\\', \b \t \n \f \r (two-character escapes), 5 for the
 * other bytes below 0x20 (\u00XX), 0 for everything else.
 */
static const unsigned char esc_extra[256] = {
	5, 5, 5, 5, 5, 5, 5, 5, 1, 1, 1, 5, 1, 1, 5, 5,
	5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5,
	['"'] = 1, ['\\'] = 1,
};

#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

/* Length of the prefix of s[0..len) that needs no escaping; 8 bytes a
 * step (exact "has a byte below n" tests, Hacker's Delight §6-1). */
static size_t
plain_run(const unsigned char *s, size_t len)
{
	size_t i = 0;
	uint64_t w, q, b;

	while (len - i >= 8) {
		memcpy(&w, s + i, 8);
		q = w ^ (ONES * '"');
		b = w ^ (ONES * '\\');
		if ((((w - ONES * 0x20) & ~w) | ((q - ONES) & ~q) |
		    ((b - ONES) & ~b)) & HIGHS)
			break;
		i += 8;
	}
	while (i < len && esc_extra[s[i]] == 0)
		i++;
	return i;
}

/* sbx_json_escaped_len, but stops as soon as the count passes limit
 * (then returns some value > limit): NUL-heavy output is decided after a
 * fifteenth of its bytes, not all of them. */
static size_t
escaped_len_upto(const unsigned char *s, size_t len, size_t limit)
{
	size_t i = 0, n = len;

	while (i < len) {
		i += plain_run(s + i, len - i);
		if (i < len)
			n += esc_extra[s[i++]];
		if (n > limit)
			break;
	}
	return n;
}

size_t
sbx_json_escaped_len(const unsigned char *s, size_t len)
{
	return escaped_len_upto(s, len, SIZE_MAX);
}

int
sbx_ndjson_output_is_text(const unsigned char *buf, size_t len,
    size_t *escaped_len)
{
	size_t b64 = 4 * ((len + 2) / 3), n;

	/* UTF-8 first: it fails within a few bytes on random output and
	 * runs 8 bytes a step on ASCII; the count then stops as soon as it
	 * passes base64's length (after ~1/15 of NUL-heavy output). */
	if (!sbx_utf8_valid(buf, len))
		return 0;
	n = escaped_len_upto(buf, len, b64);
	if (n > b64)
		return 0;
	if (escaped_len != NULL)
		*escaped_len = n;
	return 1;
}

/* sbx_json_escape into dst..end; NULL as soon as the escaping would pass
 * end (end NULL: no bound). One pass: sbx_ndjson_output escapes into
 * base64's room and falls back to base64 when it does not fit. */
static char *
escape_upto(char *dst, const unsigned char *s, size_t len, const char *end)
{
	size_t i = 0, run;

	/* Every byte left takes at least one: room < what is left (plus an
	 * escape's extra) cannot fit, so the bound stops as early as the
	 * count of escaped_len_upto would (NUL-heavy output after ~1/15). */
	if (end != NULL && (size_t)(end - dst) < len)
		return NULL;
	while (i < len) {
		run = i + plain_run(s + i, len - i);
		if (run > i) {
			memcpy(dst, s + i, run - i);
			dst += run - i;
			i = run;
			continue;
		}
		if (end != NULL && (size_t)(end - dst) < (len - i) +
		    (size_t)esc_extra[s[i]])
			return NULL;
		*dst++ = '\\';
		switch (s[i]) {
		case '"':  *dst++ = '"'; break;
		case '\\': *dst++ = '\\'; break;
		case '\b': *dst++ = 'b'; break;
		case '\f': *dst++ = 'f'; break;
		case '\n': *dst++ = 'n'; break;
		case '\r': *dst++ = 'r'; break;
		case '\t': *dst++ = 't'; break;
		default:
			*dst++ = 'u';
			*dst++ = '0';
			*dst++ = '0';
			*dst++ = hexdig[s[i] >> 4];
			*dst++ = hexdig[s[i] & 0xF];
			break;
		}
		i++;
	}
	return dst;
}

char *
sbx_json_escape(char *dst, const unsigned char *s, size_t len)
{
	return escape_upto(dst, s, len, NULL);
}

/* Appends json_dumpb(obj, JSON_COMPACT) and '\n' to out in one piece. */
static int
append_json_line(struct evbuffer *out, json_t *obj)
{
	struct evbuffer_iovec v;
	size_t n;

	if (obj == NULL)
		return -1;
	n = json_dumpb(obj, NULL, 0, JSON_COMPACT);
	if (n == 0)
		return -1;
	if (evbuffer_reserve_space(out, (ev_ssize_t)(n + 1), &v, 1) < 1)
		return -1;
	if (json_dumpb(obj, v.iov_base, n, JSON_COMPACT) != n)
		return -1;
	((char *)v.iov_base)[n] = '\n';
	v.iov_len = n + 1;
	return evbuffer_commit_space(out, &v, 1);
}

int
sbx_ndjson_start(struct evbuffer *out, const char *exec_id, int64_t ts_ms)
{
	json_t *o = NULL;
	int rc = -1;

	if (out == NULL || exec_id == NULL)
		return -1;
	o = json_pack("{s:s, s:s, s:I}", SBX_EVF_TYPE, SBX_EV_START,
	    SBX_EVF_EXEC_ID, exec_id, SBX_EVF_TS, (json_int_t)ts_ms);
	rc = append_json_line(out, o);
	json_decref(o);
	return rc;
}

int
sbx_ndjson_exit(struct evbuffer *out, int code, const char *signal,
    int64_t duration_ms, int truncated)
{
	json_t *o = NULL, *sig = NULL;
	int rc = -1;

	if (out == NULL)
		return -1;
	sig = signal != NULL ? json_string(signal) : json_null();
	if (sig == NULL)
		return -1;
	/* "o" steals the reference to sig, also when json_pack fails. */
	o = json_pack("{s:s, s:i, s:o, s:I, s:b}", SBX_EVF_TYPE, SBX_EV_EXIT,
	    SBX_EVF_CODE, code, SBX_EVF_SIGNAL, sig,
	    SBX_EVF_DURATION_MS, (json_int_t)duration_ms,
	    SBX_EVF_TRUNCATED, truncated != 0);
	rc = append_json_line(out, o);
	json_decref(o);
	return rc;
}

int
sbx_ndjson_quota(struct evbuffer *out, int64_t bytes, int64_t quota)
{
	char msg[160];
	json_t *o;
	int rc;

	if (out == NULL || bytes < 0 || quota < 0)
		return -1;
	snprintf(msg, sizeof(msg), "/work holds %lld bytes, over its quota of "
	    "%lld bytes: writes through the API are refused until files are "
	    "removed.", (long long)bytes, (long long)quota);
	o = json_pack("{s:s, s:I, s:I, s:s}", SBX_EVF_TYPE, SBX_EV_QUOTA,
	    SBX_EVF_BYTES, (json_int_t)bytes, SBX_EVF_QUOTA, (json_int_t)quota,
	    SBX_EVF_MESSAGE, msg);
	rc = append_json_line(out, o);
	json_decref(o);
	return rc;
}

int
sbx_ndjson_error(struct evbuffer *out, const char *code, const char *message)
{
	json_t *o = NULL;
	int rc = -1;

	if (out == NULL || code == NULL || message == NULL)
		return -1;
	o = json_pack("{s:s, s:s, s:s}", SBX_EVF_TYPE, SBX_EV_ERROR,
	    SBX_EVF_CODE, code, SBX_EVF_MESSAGE, message);
	rc = append_json_line(out, o);
	json_decref(o);
	return rc;
}

/*
 * The hot path of a 1 GiB stream: no jansson object, one reservation in
 * out (base64's size, the most a text event may take), one pass to escape
 * straight into it (or base64 when the escaping does not fit). The
 * bytes match jansson's compact dump (checked by tests/unit/test_ndjson.c).
 */
_Static_assert(sizeof(SBX_EV_STDOUT) == 7 && sizeof(SBX_EV_STDERR) == 7,
    "sbx_ndjson_output copies 6-byte stream names");

int
sbx_ndjson_output(struct evbuffer *out, int stream, const unsigned char *buf,
    size_t len)
{
	static const char head[] = "{\"" SBX_EVF_TYPE "\":\"";
	static const char b64_mid[] = "\",\"" SBX_EVF_DATA_B64 "\":\"";
	static const char txt_mid[] = "\",\"" SBX_EVF_DATA "\":\"";
	static const char tail[] = "\"}\n";
	struct evbuffer_iovec v;
	const char *type;
	size_t b64, total;
	char *p, *text;

	if (out == NULL || (buf == NULL && len > 0) || len > SBX_NDJSON_MAX_CHUNK)
		return -1;
	if (stream == SBX_STREAM_STDOUT)
		type = SBX_EV_STDOUT;
	else if (stream == SBX_STREAM_STDERR)
		type = SBX_EV_STDERR;
	else
		return -1;
	/* data when valid UTF-8 and its escaping is no longer than base64
	 * (adr/0028), else data_b64. One pass: the escaping goes into
	 * base64's room and gives way to base64 when it does not fit. */
	b64 = 4 * ((len + 2) / 3);
	total = sizeof(head) - 1 + 6 + (sizeof(txt_mid) > sizeof(b64_mid) ?
	    sizeof(txt_mid) : sizeof(b64_mid)) - 1 + b64 + sizeof(tail) - 1;
	if (evbuffer_reserve_space(out, (ev_ssize_t)total, &v, 1) < 1)
		return -1;
	p = v.iov_base;
	memcpy(p, head, sizeof(head) - 1);
	p += sizeof(head) - 1;
	memcpy(p, type, 6);     /* "stdout" / "stderr" */
	p += 6;
	text = NULL;
	if (sbx_utf8_valid(buf, len)) {
		memcpy(p, txt_mid, sizeof(txt_mid) - 1);
		text = escape_upto(p + sizeof(txt_mid) - 1, buf, len,
		    p + sizeof(txt_mid) - 1 + b64);
	}
	if (text != NULL)
		p = text;
	else {
		memcpy(p, b64_mid, sizeof(b64_mid) - 1);
		p = sbx_base64_encode(p + sizeof(b64_mid) - 1, buf, len);
	}
	memcpy(p, tail, sizeof(tail) - 1);
	v.iov_len = (size_t)(p + sizeof(tail) - 1 - (char *)v.iov_base);
	return evbuffer_commit_space(out, &v, 1);
}

/* Bytes of the character whose lead byte is c (1 for ASCII and invalid leads). */
static size_t
utf8_seq_len(unsigned char c)
{
	int n = utf8_extra(c);

	return n > 0 ? (size_t)n + 1 : 1;
}

/* buf[0..len) as output events cut on character boundaries, len > 0. */
static int
output_pieces(struct evbuffer *out, int stream, const unsigned char *buf,
    size_t len)
{
	size_t n, cut;

	while (len > 0) {
		n = len;
		if (n > SBX_NDJSON_MAX_CHUNK) {
			n = SBX_NDJSON_MAX_CHUNK;
			cut = sbx_utf8_incomplete_tail(buf, n);
			if (cut < n)
				n -= cut;
		}
		if (sbx_ndjson_output(out, stream, buf, n) == -1)
			return -1;
		buf += n;
		len -= n;
	}
	return 0;
}

int
sbx_ndjson_output_held(struct evbuffer *out, struct sbx_utf8_hold *h,
    int stream, const unsigned char *buf, size_t len)
{
	unsigned char joined[8];
	size_t need, t, jl;

	if (out == NULL || h == NULL || h->len > 3 || (buf == NULL && len > 0) ||
	    (stream != SBX_STREAM_STDOUT && stream != SBX_STREAM_STDERR))
		return -1;
	if (len == 0)
		return 0;
	if (h->len > 0) {
		/* Only continuation bytes can finish it: a broken character
		 * goes alone (as data_b64), the text after it stays text. */
		need = utf8_seq_len(h->tail[0]) - h->len;
		for (t = 0; t < need && t < len && (buf[t] & 0xC0) == 0x80; t++)
			;
		need = t;
		memcpy(joined, h->tail, h->len);
		memcpy(joined + h->len, buf, need);
		jl = h->len + need;
		buf += need;
		len -= need;
		h->len = 0;
		/* Still short of its end (a 1-byte read): hold on. */
		if (len == 0 && (t = sbx_utf8_incomplete_tail(joined, jl)) == jl) {
			memcpy(h->tail, joined, jl);
			h->len = jl;
			return 0;
		}
		if (sbx_ndjson_output(out, stream, joined, jl) == -1)
			return -1;
		if (len == 0)
			return 0;
	}
	t = sbx_utf8_incomplete_tail(buf, len);
	if (t > 0) {
		memcpy(h->tail, buf + len - t, t);
		h->len = t;
		len -= t;
	}
	return len > 0 ? output_pieces(out, stream, buf, len) : 0;
}

int
sbx_ndjson_output_flush(struct evbuffer *out, struct sbx_utf8_hold *h,
    int stream)
{
	size_t n;

	if (h == NULL || h->len == 0)
		return 0;
	n = h->len;
	h->len = 0;
	return sbx_ndjson_output(out, stream, h->tail, n);
}

static const char b64_alphabet[] =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* Exec output is not secret, so a table lookup per 6 bits beats libsodium's
 * constant-time encoder (97 % of the broker's CPU on random output, bench). */
char *
sbx_base64_encode(char *dst, const unsigned char *src, size_t len)
{
	size_t i = 0;
	uint32_t v;

	for (; i + 3 <= len; i += 3) {
		v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8 | src[i + 2];
		*dst++ = b64_alphabet[v >> 18];
		*dst++ = b64_alphabet[(v >> 12) & 63];
		*dst++ = b64_alphabet[(v >> 6) & 63];
		*dst++ = b64_alphabet[v & 63];
	}
	if (len - i == 1) {
		v = (uint32_t)src[i] << 16;
		*dst++ = b64_alphabet[v >> 18];
		*dst++ = b64_alphabet[(v >> 12) & 63];
		*dst++ = '=';
		*dst++ = '=';
	} else if (len - i == 2) {
		v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8;
		*dst++ = b64_alphabet[v >> 18];
		*dst++ = b64_alphabet[(v >> 12) & 63];
		*dst++ = b64_alphabet[(v >> 6) & 63];
		*dst++ = '=';
	}
	return dst;
}
