/* sbx_ndjson.c - NDJSON exec event codec: strict UTF-8, encoder, incremental parser. */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>
#include <sodium.h>

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

/* Bytes that jansson's dump_string escapes: '"', '\\' and below 0x20. */
static int
needs_escape(unsigned char c)
{
	return c < 0x20 || c == '"' || c == '\\';
}

/* Length of s[0..len) once JSON-escaped exactly as jansson does it. */
static size_t
escaped_len(const unsigned char *s, size_t len)
{
	size_t i, n = len;

	for (i = 0; i < len; i++) {
		if (!needs_escape(s[i]))
			continue;
		switch (s[i]) {
		case '"': case '\\': case '\b': case '\f':
		case '\n': case '\r': case '\t':
			n += 1;
			break;
		default:
			n += 5;
			break;
		}
	}
	return n;
}

/* Writes the escaped form of s[0..len) at dst; returns the end. */
static char *
escape_into(char *dst, const unsigned char *s, size_t len)
{
	size_t i = 0, run;

	while (i < len) {
		run = i;
		while (run < len && !needs_escape(s[run]))
			run++;
		if (run > i) {
			memcpy(dst, s + i, run - i);
			dst += run - i;
			i = run;
			continue;
		}
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
 * The hot path of a 1 GiB stream: no jansson object, one exact-size
 * reservation in out, one pass to escape (or base64) straight into it. The
 * bytes match jansson's compact dump (checked by tests/unit/test_ndjson.c).
 */
int
sbx_ndjson_output(struct evbuffer *out, int stream, const unsigned char *buf,
    size_t len)
{
	static const char b64_mid[] = "\",\"" SBX_EVF_DATA_B64 "\":\"";
	static const char txt_mid[] = "\",\"" SBX_EVF_DATA "\":\"";
	static const char tail[] = "\"}\n";
	struct evbuffer_iovec v;
	const char *type;
	size_t pre, body, total;
	char *p;
	int text;

	if (out == NULL || (buf == NULL && len > 0) || len > SBX_NDJSON_MAX_CHUNK)
		return -1;
	if (stream == SBX_STREAM_STDOUT)
		type = SBX_EV_STDOUT;
	else if (stream == SBX_STREAM_STDERR)
		type = SBX_EV_STDERR;
	else
		return -1;
	text = sbx_utf8_valid(buf, len);
	/* {"type":"stdout","data":"  */
	pre = strlen("{\"" SBX_EVF_TYPE "\":\"") + strlen(type) +
	    (text ? sizeof(txt_mid) : sizeof(b64_mid)) - 1;
	/* sodium_base64_ENCODED_LEN counts a NUL, overwritten by the tail. */
	body = text ? escaped_len(buf, len) :
	    sodium_base64_ENCODED_LEN(len, sodium_base64_VARIANT_ORIGINAL) - 1;
	total = pre + body + sizeof(tail) - 1;
	if (evbuffer_reserve_space(out, (ev_ssize_t)(total + 1), &v, 1) < 1)
		return -1;
	p = v.iov_base;
	p += sprintf(p, "{\"" SBX_EVF_TYPE "\":\"%s%s", type,
	    text ? txt_mid : b64_mid);
	if (text)
		p = escape_into(p, buf, len);
	else {
		sodium_bin2base64(p, body + 1, buf, len,
		    sodium_base64_VARIANT_ORIGINAL);
		p += body;
	}
	memcpy(p, tail, sizeof(tail) - 1);
	v.iov_len = total;
	return evbuffer_commit_space(out, &v, 1);
}

/* ------------------------------------------------------------------ */
/* Decoder                                                             */

const char *
sbx_event_type_name(enum sbx_event_type t)
{
	switch (t) {
	case SBX_EVENT_START:  return SBX_EV_START;
	case SBX_EVENT_STDOUT: return SBX_EV_STDOUT;
	case SBX_EVENT_STDERR: return SBX_EV_STDERR;
	case SBX_EVENT_EXIT:   return SBX_EV_EXIT;
	case SBX_EVENT_ERROR:  return SBX_EV_ERROR;
	}
	return "";
}

/* Where the stream is in SPEC §5's order. */
enum parse_state {
	PS_INIT,    /* nothing yet: start (or a lone error) */
	PS_RUNNING, /* after start: output, exit, error */
	PS_EXITED,  /* after exit: at most one error */
	PS_DONE,    /* after error: nothing */
};

struct sbx_ndjson_parser {
	size_t max_line;
	sbx_ndjson_cb cb;
	void *arg;
	char *buf;              /* partial line carried between feeds */
	size_t len, cap;
	unsigned char *scratch; /* decoded data_b64 */
	size_t scratch_cap;
	uint64_t lineno;
	enum parse_state state;
	int stopped;
	struct sbx_err err;     /* why it stopped */
};

struct sbx_ndjson_parser *
sbx_ndjson_parser_new(size_t max_line, sbx_ndjson_cb cb, void *arg)
{
	struct sbx_ndjson_parser *p;

	if (cb == NULL)
		return NULL;
	if ((p = calloc(1, sizeof(*p))) == NULL)
		return NULL;
	p->max_line = max_line ? max_line : SBX_NDJSON_MAX_LINE_DEFAULT;
	p->cb = cb;
	p->arg = arg;
	p->state = PS_INIT;
	return p;
}

void
sbx_ndjson_parser_free(struct sbx_ndjson_parser *p)
{
	if (p == NULL)
		return;
	free(p->buf);
	free(p->scratch);
	free(p);
}

/* Stops the parser with a protocol error; returns -1. */
static int
proto_fail(struct sbx_ndjson_parser *p, struct sbx_err *err, const char *what)
{
	p->stopped = 1;
	sbx_err_set(&p->err, SBX_E_BAD_REQUEST, "%s: line %llu: %s",
	    SBX_PROTOCOL_ERROR, (unsigned long long)p->lineno, what);
	if (err != NULL)
		*err = p->err;
	return -1;
}

static int
stop_with(struct sbx_ndjson_parser *p, struct sbx_err *err, const char *code,
    const char *msg)
{
	p->stopped = 1;
	sbx_err_set(&p->err, code, "%s", msg);
	if (err != NULL)
		*err = p->err;
	return -1;
}

static int
get_int64(json_t *o, const char *key, int64_t *v)
{
	json_t *j = json_object_get(o, key);

	if (!json_is_integer(j))
		return -1;
	*v = json_integer_value(j);
	return 0;
}

static const char *
get_str(json_t *o, const char *key)
{
	return json_string_value(json_object_get(o, key));
}

/* Decodes data / data_b64 of an output event into ev. */
static int
decode_output(struct sbx_ndjson_parser *p, json_t *o, struct sbx_event *ev,
    const char **why)
{
	json_t *d = json_object_get(o, SBX_EVF_DATA);
	json_t *b = json_object_get(o, SBX_EVF_DATA_B64);
	const char *b64;
	size_t b64_len, need, bin_len = 0;
	unsigned char *ns;

	if ((d == NULL) == (b == NULL)) {
		*why = "output event needs exactly one of data, data_b64";
		return -1;
	}
	if (d != NULL) {
		if (!json_is_string(d)) {
			*why = "data is not a string";
			return -1;
		}
		ev->data = (const unsigned char *)json_string_value(d);
		ev->len = json_string_length(d);
		return 0;
	}
	if (!json_is_string(b)) {
		*why = "data_b64 is not a string";
		return -1;
	}
	b64 = json_string_value(b);
	b64_len = json_string_length(b);
	need = b64_len / 4 * 3 + 3;
	if (need > p->scratch_cap) {
		if ((ns = realloc(p->scratch, need)) == NULL) {
			*why = NULL;
			return -1;
		}
		p->scratch = ns;
		p->scratch_cap = need;
	}
	/* Padded standard alphabet, whole string, no ignored characters. */
	if (sodium_base642bin(p->scratch, p->scratch_cap, b64, b64_len, NULL,
	    &bin_len, NULL, sodium_base64_VARIANT_ORIGINAL) != 0) {
		*why = "data_b64 is not valid base64";
		return -1;
	}
	ev->data = p->scratch;
	ev->len = bin_len;
	return 0;
}

/* Checks obj against its event type and the stream order; fills ev. */
static int
decode_event(struct sbx_ndjson_parser *p, json_t *o, struct sbx_event *ev,
    const char **why)
{
	const char *type = get_str(o, SBX_EVF_TYPE);
	json_t *sig;
	int64_t code;

	memset(ev, 0, sizeof(*ev));
	ev->raw = o;
	if (type == NULL) {
		*why = "no string member \"type\"";
		return -1;
	}
	if (strcmp(type, SBX_EV_START) == 0) {
		ev->type = SBX_EVENT_START;
		ev->exec_id = get_str(o, SBX_EVF_EXEC_ID);
		if (ev->exec_id == NULL || get_int64(o, SBX_EVF_TS, &ev->ts)) {
			*why = "start needs exec_id (string) and ts (integer)";
			return -1;
		}
		if (p->state != PS_INIT) {
			*why = "start is not the first event";
			return -1;
		}
		p->state = PS_RUNNING;
	} else if (strcmp(type, SBX_EV_STDOUT) == 0 ||
	    strcmp(type, SBX_EV_STDERR) == 0) {
		if (type[3] == 'o') {
			ev->type = SBX_EVENT_STDOUT;
			ev->stream = SBX_STREAM_STDOUT;
		} else {
			ev->type = SBX_EVENT_STDERR;
			ev->stream = SBX_STREAM_STDERR;
		}
		if (decode_output(p, o, ev, why) != 0)
			return -1;
		if (p->state != PS_RUNNING) {
			*why = "output outside start..exit";
			return -1;
		}
	} else if (strcmp(type, SBX_EV_EXIT) == 0) {
		ev->type = SBX_EVENT_EXIT;
		sig = json_object_get(o, SBX_EVF_SIGNAL);
		if (get_int64(o, SBX_EVF_CODE, &code) || code < INT_MIN ||
		    code > INT_MAX || (!json_is_null(sig) && !json_is_string(sig)) ||
		    get_int64(o, SBX_EVF_DURATION_MS, &ev->duration_ms) ||
		    !json_is_boolean(json_object_get(o, SBX_EVF_TRUNCATED))) {
			*why = "exit needs code (integer), signal (string or "
			    "null), duration_ms (integer), truncated (boolean)";
			return -1;
		}
		ev->code = (int)code;
		ev->signal = json_string_value(sig);
		ev->truncated = json_is_true(json_object_get(o,
		    SBX_EVF_TRUNCATED));
		if (p->state != PS_RUNNING) {
			*why = "exit outside start..exit";
			return -1;
		}
		p->state = PS_EXITED;
	} else if (strcmp(type, SBX_EV_ERROR) == 0) {
		ev->type = SBX_EVENT_ERROR;
		ev->err_code = get_str(o, SBX_EVF_CODE);
		ev->err_message = get_str(o, SBX_EVF_MESSAGE);
		if (ev->err_code == NULL || ev->err_message == NULL) {
			*why = "error needs code and message (strings)";
			return -1;
		}
		if (p->state == PS_DONE) {
			*why = "event after error";
			return -1;
		}
		p->state = PS_DONE;
	} else {
		*why = "unknown event type";
		return -1;
	}
	return 0;
}

/* Parses one complete line (without '\n') and hands it to the callback. */
static int
handle_line(struct sbx_ndjson_parser *p, const char *line, size_t len,
    struct sbx_err *err)
{
	struct sbx_event ev;
	json_error_t jerr;
	json_t *o = NULL;
	const char *why = NULL;
	int rc = -1;

	p->lineno++;
	if (p->state == PS_DONE)
		return proto_fail(p, err, "event after error");
	/* Duplicate keys rejected: two parsers must never read one line two
	 * ways. NUL allowed: it is valid output, escaped as \u0000. */
	o = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &jerr);
	if (o == NULL) {
		rc = proto_fail(p, err, "not valid JSON");
		goto done;
	}
	if (!json_is_object(o)) {
		rc = proto_fail(p, err, "not a JSON object");
		goto done;
	}
	if (decode_event(p, o, &ev, &why) != 0) {
		if (why == NULL)
			rc = stop_with(p, err, SBX_E_INTERNAL, "out of memory");
		else
			rc = proto_fail(p, err, why);
		goto done;
	}
	if (p->cb(p->arg, &ev, line, len) != 0) {
		rc = stop_with(p, err, SBX_E_CANCELLED,
		    "event stream stopped by its consumer");
		goto done;
	}
	rc = 0;
done:
	json_decref(o);
	return rc;
}

/* Appends buf[0..len) to the carried partial line. */
static int
carry(struct sbx_ndjson_parser *p, const char *buf, size_t len)
{
	size_t ncap;
	char *nb;

	if (p->len + len > p->cap) {
		ncap = p->cap ? p->cap : 4096;
		while (ncap < p->len + len)
			ncap *= 2;
		if ((nb = realloc(p->buf, ncap)) == NULL)
			return -1;
		p->buf = nb;
		p->cap = ncap;
	}
	memcpy(p->buf + p->len, buf, len);
	p->len += len;
	return 0;
}

int
sbx_ndjson_parser_feed(struct sbx_ndjson_parser *p, const char *buf,
    size_t len, struct sbx_err *err)
{
	const char *nl, *line;
	size_t n, llen;

	if (p == NULL)
		return sbx_err_set(err, SBX_E_INTERNAL, "no parser");
	if (p->stopped) {
		if (err != NULL)
			*err = p->err;
		return -1;
	}
	if (buf == NULL && len > 0)
		return sbx_err_set(err, SBX_E_INTERNAL, "no buffer");
	while (len > 0) {
		nl = memchr(buf, '\n', len);
		n = nl != NULL ? (size_t)(nl - buf) : len;
		if (p->len + n > p->max_line) {
			p->lineno++;
			return proto_fail(p, err, "line too long");
		}
		if (nl == NULL)
			return carry(p, buf, len) == 0 ? 0 :
			    stop_with(p, err, SBX_E_INTERNAL, "out of memory");
		if (p->len == 0) {
			/* Whole line in this piece: no copy. */
			line = buf;
			llen = n;
		} else {
			if (carry(p, buf, n) != 0)
				return stop_with(p, err, SBX_E_INTERNAL,
				    "out of memory");
			line = p->buf;
			llen = p->len;
			p->len = 0;
		}
		if (handle_line(p, line, llen, err) != 0)
			return -1;
		buf += n + 1;
		len -= n + 1;
	}
	return 0;
}

int
sbx_ndjson_parser_finish(struct sbx_ndjson_parser *p, struct sbx_err *err)
{
	if (p == NULL)
		return sbx_err_set(err, SBX_E_INTERNAL, "no parser");
	if (p->stopped) {
		if (err != NULL)
			*err = p->err;
		return -1;
	}
	if (p->len > 0) {
		p->lineno++;
		return proto_fail(p, err, "stream ended inside a line");
	}
	if (p->state != PS_EXITED && p->state != PS_DONE)
		return proto_fail(p, err, "stream ended before exit or error");
	return 0;
}
