/* sbx_ndjson_parse.c - NDJSON exec event codec, reading side: the canonical-line fast path and the incremental parser (contract in sbx_ndjson.h). */
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "sbx_ndjson.h"
#include "sbx_proto.h"

/* ------------------------------------------------------------------ */
/* Canonical output lines (what the encoder writes), recognised fast    */

/* Value of each base64 character (RFC 4648 §4 alphabet), 64 = invalid. */
static const unsigned char b64_val[256] = {
	64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
	64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
	64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 62, 64, 64, 64, 63,
	52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 64, 64, 64, 64, 64, 64,
	64,  0,  1,  2,  3,  4,  5,  6,  7,  8,  9, 10, 11, 12, 13, 14,
	15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 64, 64, 64, 64, 64,
	64, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,
	41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 64, 64, 64, 64, 64,
	64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
	64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
	64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
	64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
	64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
	64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
	64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
	64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64, 64,
};

static int
hexval(char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;  /* lower case is not what the encoder writes */
}

/* 1 when s[0..n) is exactly what sbx_json_escape writes for some bytes;
 * then *dlen is how many bytes they are. */
static int
canonical_escaped(const char *s, size_t n, size_t *dlen)
{
	size_t i = 0, d = n;
	int hi, lo, v;

	while (i < n) {
		unsigned char c = (unsigned char)s[i];

		if (c == '"' || c < 0x20)
			return 0;
		if (c != '\\') {
			i++;
			continue;
		}
		if (n - i < 2)
			return 0;
		switch (s[i + 1]) {
		case '"': case '\\': case 'b': case 'f':
		case 'n': case 'r': case 't':
			i += 2;
			d -= 1;
			continue;
		case 'u':
			if (n - i < 6 || s[i + 2] != '0' || s[i + 3] != '0')
				return 0;
			hi = hexval(s[i + 4]);
			lo = hexval(s[i + 5]);
			if (hi < 0 || hi > 1 || lo < 0)
				return 0;
			v = hi * 16 + lo;
			if (v == '\b' || v == '\f' || v == '\n' || v == '\r' ||
			    v == '\t')
				return 0;
			i += 6;
			d -= 5;
			continue;
		default:
			return 0;
		}
	}
	*dlen = d;
	return sbx_utf8_valid((const unsigned char *)s, n);
}

/* Decodes a canonical escaped string s[0..n) into dst; returns its length. */
static size_t
unescape_canonical(unsigned char *dst, const char *s, size_t n)
{
	const char *bs;
	size_t i = 0, k = 0, run;

	while (i < n) {
		bs = memchr(s + i, '\\', n - i);
		run = bs != NULL ? (size_t)(bs - (s + i)) : n - i;
		memcpy(dst + k, s + i, run);
		k += run;
		i += run;
		if (i >= n)
			break;
		switch (s[i + 1]) {
		case 'b': dst[k++] = '\b'; break;
		case 'f': dst[k++] = '\f'; break;
		case 'n': dst[k++] = '\n'; break;
		case 'r': dst[k++] = '\r'; break;
		case 't': dst[k++] = '\t'; break;
		case 'u':
			dst[k++] = (unsigned char)(hexval(s[i + 4]) * 16 +
			    hexval(s[i + 5]));
			i += 4;
			break;
		default: dst[k++] = (unsigned char)s[i + 1]; break;
		}
		i += 2;
	}
	return k;
}

/*
 * Strict check of padded standard base64 without decoding (the rules of
 * b64_decode below: length a multiple of 4, '=' only as the last one or
 * two characters, unused bits zero). Returns 1 with *dlen the decoded
 * length, or 0.
 */
static int
b64_strict(const char *src, size_t n, size_t *dlen)
{
	const unsigned char *s = (const unsigned char *)src;
	size_t i, pad = 0;

	if (n % 4 != 0)
		return 0;
	if (n > 0 && s[n - 1] == '=')
		pad = s[n - 2] == '=' ? 2 : 1;
	for (i = 0; i < n - pad; i++)
		if (b64_val[s[i]] == 64)
			return 0;
	if (pad == 2 && (b64_val[s[n - 3]] & 0x0F) != 0)
		return 0;
	if (pad == 1 && (b64_val[s[n - 2]] & 0x03) != 0)
		return 0;
	*dlen = n / 4 * 3 - pad;
	return 1;
}

/* sbx_ndjson_canonical_output, plus (full 1) the strict check of the
 * value, base64 included, and *dlen, the bytes it carries. */
static int
canonical_output(const char *line, size_t len, int *stream, int *b64,
    size_t *val_off, size_t *val_len, int full, size_t *dlen);

int
sbx_ndjson_canonical_output(const char *line, size_t len, int *stream,
    int *b64, size_t *val_off, size_t *val_len)
{
	size_t dlen;

	return canonical_output(line, len, stream, b64, val_off, val_len, 0,
	    &dlen);
}

static int
canonical_output(const char *line, size_t len, int *stream, int *b64,
    size_t *val_off, size_t *val_len, int full, size_t *dlen)
{
	static const char pre[] = "{\"" SBX_EVF_TYPE "\":\"std";
	static const char txt[] = "\",\"" SBX_EVF_DATA "\":\"";
	static const char bin[] = "\",\"" SBX_EVF_DATA_B64 "\":\"";
	size_t off, i, n;
	int st, isb;

	/* {"type":"std  out|err  ","data":"  S  "} */
	off = sizeof(pre) - 1;
	if (len < off + 3 + sizeof(txt) - 1 + 2 ||
	    memcmp(line, pre, off) != 0)
		return 0;
	if (memcmp(line + off, "out", 3) == 0)
		st = SBX_STREAM_STDOUT;
	else if (memcmp(line + off, "err", 3) == 0)
		st = SBX_STREAM_STDERR;
	else
		return 0;
	off += 3;
	if (memcmp(line + off, txt, sizeof(txt) - 1) == 0) {
		isb = 0;
		off += sizeof(txt) - 1;
	} else if (len >= off + sizeof(bin) - 1 + 2 &&
	    memcmp(line + off, bin, sizeof(bin) - 1) == 0) {
		isb = 1;
		off += sizeof(bin) - 1;
	} else
		return 0;
	if (line[len - 2] != '"' || line[len - 1] != '}')
		return 0;
	n = len - 2 - off;
	if (isb) {
		if (full) {
			if (!b64_strict(line + off, n, dlen))
				return 0;
		} else {
			for (i = 0; i < n; i++)
				if (b64_val[(unsigned char)line[off + i]] ==
				    64 && line[off + i] != '=')
					return 0;
		}
	} else if (!canonical_escaped(line + off, n, dlen))
		return 0;
	*stream = st;
	*b64 = isb;
	*val_off = off;
	*val_len = n;
	return 1;
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
	case SBX_EVENT_QUOTA:  return SBX_EV_QUOTA;
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
	int undecoded;          /* sbx_ndjson_parser_undecoded */
	int quota_seen;         /* a quota event came (at most one) */
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
sbx_ndjson_parser_undecoded(struct sbx_ndjson_parser *p, int on)
{
	if (p != NULL)
		p->undecoded = on != 0;
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


/*
 * Strict decoder of padded standard base64: length a multiple of 4, '='
 * only as the last one or two characters, unused bits zero (so every byte
 * string has exactly one accepted spelling, the one the encoder writes).
 * dst has room for n / 4 * 3 bytes. Returns 0 with *outlen, or -1.
 * Not constant-time: output is not a secret, and this is the hot path.
 */
static int
b64_decode(unsigned char *dst, const char *src, size_t n, size_t *outlen)
{
	const unsigned char *s = (const unsigned char *)src;
	size_t i, k = 0, pad = 0;
	unsigned a, b, c, d;

	if (n % 4 != 0)
		return -1;
	if (n > 0 && s[n - 1] == '=')
		pad = s[n - 2] == '=' ? 2 : 1;
	for (i = 0; i + 4 <= n - (pad ? 4 : 0); i += 4) {
		a = b64_val[s[i]];
		b = b64_val[s[i + 1]];
		c = b64_val[s[i + 2]];
		d = b64_val[s[i + 3]];
		if ((a | b | c | d) & 64)
			return -1;
		dst[k++] = (unsigned char)(a << 2 | b >> 4);
		dst[k++] = (unsigned char)(b << 4 | c >> 2);
		dst[k++] = (unsigned char)(c << 6 | d);
	}
	if (pad) {
		a = b64_val[s[i]];
		b = b64_val[s[i + 1]];
		c = pad == 2 ? 0 : b64_val[s[i + 2]];
		if ((a | b | c) & 64)
			return -1;
		if (pad == 2 ? (b & 0x0F) != 0 : (c & 0x03) != 0)
			return -1;
		dst[k++] = (unsigned char)(a << 2 | b >> 4);
		if (pad == 1)
			dst[k++] = (unsigned char)(b << 4 | c >> 2);
	}
	*outlen = k;
	return 0;
}

/* Makes p->scratch hold at least need bytes. */
static int
scratch_reserve(struct sbx_ndjson_parser *p, size_t need)
{
	unsigned char *ns;

	if (need <= p->scratch_cap)
		return 0;
	if ((ns = realloc(p->scratch, need)) == NULL)
		return -1;
	p->scratch = ns;
	p->scratch_cap = need;
	return 0;
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
	if (scratch_reserve(p, need) != 0) {
		*why = NULL;
		return -1;
	}
	/* Padded standard alphabet, whole string, no ignored characters. */
	if (b64_decode(p->scratch, b64, b64_len, &bin_len) != 0) {
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
		/* code is an exit status, 0..255 (SPEC §5): a caller passes
		 * it on as its own (the CLI's exit code; found by fuzzing) */
		if (get_int64(o, SBX_EVF_CODE, &code) || code < 0 ||
		    code > 255 || (!json_is_null(sig) && !json_is_string(sig)) ||
		    get_int64(o, SBX_EVF_DURATION_MS, &ev->duration_ms) ||
		    !json_is_boolean(json_object_get(o, SBX_EVF_TRUNCATED))) {
			*why = "exit needs code (integer 0..255), signal (string or "
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
	} else if (strcmp(type, SBX_EV_QUOTA) == 0) {
		ev->type = SBX_EVENT_QUOTA;
		ev->err_message = get_str(o, SBX_EVF_MESSAGE);
		if (get_int64(o, SBX_EVF_BYTES, &ev->work_bytes) ||
		    get_int64(o, SBX_EVF_QUOTA, &ev->work_quota) ||
		    ev->work_bytes < 0 || ev->work_quota < 0 ||
		    ev->err_message == NULL) {
			*why = "quota needs bytes and quota (integers >= 0) and "
			    "message (string)";
			return -1;
		}
		if (p->state != PS_RUNNING || p->quota_seen) {
			*why = "quota outside start..exit or twice";
			return -1;
		}
		p->quota_seen = 1;
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

/* Hands one decoded event to the callback: 0, or -1 (cancelled) when the
 * consumer stops the stream. */
static int
hand_on(struct sbx_ndjson_parser *p, const struct sbx_event *ev,
    const char *line, size_t len, struct sbx_err *err)
{
	if (p->cb(p->arg, ev, line, len) != 0)
		return stop_with(p, err, SBX_E_CANCELLED,
		    "event stream stopped by its consumer");
	return 0;
}

/*
 * The hot path: a line exactly as sbx_ndjson_output writes it, decoded
 * without the general JSON parser. Builds the same raw object the parser
 * would, so callers cannot tell the paths apart.
 */
static int
handle_canonical(struct sbx_ndjson_parser *p, const char *line, size_t len,
    int stream, int b64, size_t off, size_t vlen, struct sbx_err *err)
{
	struct sbx_event ev;
	json_t *o = NULL, *val = NULL;
	size_t bin_len = 0;
	int rc = -1;

	if (p->state != PS_RUNNING)
		return proto_fail(p, err, "output outside start..exit");
	if (scratch_reserve(p, b64 ? vlen / 4 * 3 + 3 : vlen + 1) != 0)
		return stop_with(p, err, SBX_E_INTERNAL, SBX_MSG_OOM);
	memset(&ev, 0, sizeof(ev));
	ev.type = stream == SBX_STREAM_STDOUT ? SBX_EVENT_STDOUT :
	    SBX_EVENT_STDERR;
	ev.stream = stream;
	if (b64) {
		if (b64_decode(p->scratch, line + off, vlen, &bin_len) != 0)
			return proto_fail(p, err, "data_b64 is not valid base64");
		val = json_stringn_nocheck(line + off, vlen);
	} else {
		bin_len = unescape_canonical(p->scratch, line + off, vlen);
		val = json_stringn_nocheck((const char *)p->scratch, bin_len);
	}
	ev.data = p->scratch;
	ev.len = bin_len;
	if (val == NULL || (o = json_object()) == NULL ||
	    json_object_set_new_nocheck(o, SBX_EVF_TYPE,
	    json_string_nocheck(sbx_event_type_name(ev.type))) != 0) {
		json_decref(val);
		rc = stop_with(p, err, SBX_E_INTERNAL, SBX_MSG_OOM);
		goto done;
	}
	/* set_new steals val, also when it fails */
	if (json_object_set_new_nocheck(o, b64 ? SBX_EVF_DATA_B64 :
	    SBX_EVF_DATA, val) != 0) {
		rc = stop_with(p, err, SBX_E_INTERNAL, SBX_MSG_OOM);
		goto done;
	}
	ev.raw = o;
	rc = hand_on(p, &ev, line, len, err);
done:
	json_decref(o);
	return rc;
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
	size_t off, vlen, dlen;
	int rc = -1, stream, b64;

	p->lineno++;
	if (p->state == PS_DONE)
		return proto_fail(p, err, "event after error");
	if (p->undecoded && canonical_output(line, len, &stream, &b64, &off,
	    &vlen, 1, &dlen)) {
		/* Checked as strictly as decoding would, not decoded. */
		if (p->state != PS_RUNNING)
			return proto_fail(p, err, "output outside start..exit");
		memset(&ev, 0, sizeof(ev));
		ev.type = stream == SBX_STREAM_STDOUT ? SBX_EVENT_STDOUT :
		    SBX_EVENT_STDERR;
		ev.stream = stream;
		ev.len = dlen;
		ev.undecoded = 1;
		return hand_on(p, &ev, line, len, err);
	}
	if (sbx_ndjson_canonical_output(line, len, &stream, &b64, &off, &vlen))
		return handle_canonical(p, line, len, stream, b64, off, vlen,
		    err);
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
			rc = stop_with(p, err, SBX_E_INTERNAL, SBX_MSG_OOM);
		else
			rc = proto_fail(p, err, why);
		goto done;
	}
	rc = hand_on(p, &ev, line, len, err);
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
		return sbx_err_set(err, SBX_E_INTERNAL, SBX_MSG_NO_PARSER);
	if (p->stopped) {
		if (err != NULL)
			*err = p->err;
		return -1;
	}
	if (buf == NULL && len > 0)
		return sbx_err_set(err, SBX_E_INTERNAL, SBX_MSG_NO_BUFFER);
	while (len > 0) {
		nl = memchr(buf, '\n', len);
		n = nl != NULL ? (size_t)(nl - buf) : len;
		if (p->len + n > p->max_line) {
			p->lineno++;
			return proto_fail(p, err, "line too long");
		}
		if (nl == NULL)
			return carry(p, buf, len) == 0 ? 0 :
			    stop_with(p, err, SBX_E_INTERNAL, SBX_MSG_OOM);
		if (p->len == 0) {
			/* Whole line in this piece: no copy. */
			line = buf;
			llen = n;
		} else {
			if (carry(p, buf, n) != 0)
				return stop_with(p, err, SBX_E_INTERNAL,
				    SBX_MSG_OOM);
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
		return sbx_err_set(err, SBX_E_INTERNAL, SBX_MSG_NO_PARSER);
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
