/* sbx_sse.c - Server-Sent Events encoder and the NDJSON -> SSE mapping of exec events. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <jansson.h>

#include "sbx_ndjson.h"
#include "sbx_proto.h"
#include "sbx_sse.h"

/* 1 when s holds CR, LF or NUL within its first len bytes. */
static int
has_break(const char *s, size_t len)
{
	return memchr(s, '\r', len) != NULL || memchr(s, '\n', len) != NULL ||
	    memchr(s, '\0', len) != NULL;
}

/* Length of the next line break at s[0..len): 2 for CRLF, 1 for CR/LF. */
static size_t
break_len(const char *s, size_t len)
{
	if (s[0] == '\r' && len > 1 && s[1] == '\n')
		return 2;
	return 1;
}

/* Offset of the first CR or LF in s[0..len), or len. */
static size_t
line_end(const char *s, size_t len)
{
	size_t i;

	for (i = 0; i < len; i++)
		if (s[i] == '\r' || s[i] == '\n')
			break;
	return i;
}

int
sbx_sse_event(struct evbuffer *out, uint64_t id, const char *event,
    const char *data, size_t len)
{
	static const char dpre[] = "data: ";
	struct evbuffer_iovec v;
	char idline[40];
	size_t idlen = 0, evlen = 0, total, pieces = 1, i, e;
	char *p;

	if (out == NULL || (data == NULL && len > 0))
		return -1;
	if (data == NULL)
		data = "";
	if (event != NULL) {
		evlen = strlen(event);
		if (evlen == 0 || has_break(event, evlen))
			return -1;
	}
	if (id != 0)
		idlen = (size_t)snprintf(idline, sizeof(idline),
		    "id: %" PRIu64 "\n", id);
	/* Each line break becomes "\ndata: "; count them to reserve room
	 * for the whole event at once, so it goes in whole or not at all. */
	for (i = 0; i < len; i += e) {
		e = line_end(data + i, len - i);
		if (i + e == len)
			break;
		e += break_len(data + i + e, len - i - e);
		pieces++;
	}
	total = idlen + (event ? strlen("event: ") + evlen + 1 : 0) +
	    pieces * (sizeof(dpre) - 1 + 1) + 1 + len;
	if (evbuffer_reserve_space(out, (ev_ssize_t)total, &v, 1) < 1)
		return -1;
	p = v.iov_base;
	memcpy(p, idline, idlen);
	p += idlen;
	if (event != NULL) {
		memcpy(p, "event: ", 7);
		p += 7;
		memcpy(p, event, evlen);
		p += evlen;
		*p++ = '\n';
	}
	i = 0;
	for (;;) {
		e = line_end(data + i, len - i);
		memcpy(p, dpre, sizeof(dpre) - 1);
		p += sizeof(dpre) - 1;
		memcpy(p, data + i, e);
		p += e;
		*p++ = '\n';
		if (i + e == len)
			break;
		i += e + break_len(data + i + e, len - i - e);
	}
	*p++ = '\n';
	v.iov_len = (size_t)(p - (char *)v.iov_base);
	return evbuffer_commit_space(out, &v, 1);
}

int
sbx_sse_comment(struct evbuffer *out, const char *text)
{
	size_t n = text != NULL ? strlen(text) : 0;
	struct evbuffer_iovec v;
	char *p;

	if (out == NULL || has_break(text != NULL ? text : "", n))
		return -1;
	if (evbuffer_reserve_space(out, (ev_ssize_t)(n + 4), &v, 1) < 1)
		return -1;
	p = v.iov_base;
	*p++ = ':';
	if (n > 0) {
		*p++ = ' ';
		memcpy(p, text, n);
		p += n;
	}
	*p++ = '\n';
	*p++ = '\n';
	v.iov_len = (size_t)(p - (char *)v.iov_base);
	return evbuffer_commit_space(out, &v, 1);
}

/*
 * One event whose data is head || mid || tail on a single line, mid
 * JSON-escaped first when escape_mid is set. The callers know none of the
 * parts can hold CR or LF (JSON text from the encoder, or escaped here).
 */
static int
sse_put_line(struct evbuffer *out, uint64_t id, const char *event,
    const char *head, size_t hlen, const char *mid, size_t mlen,
    int escape_mid, const char *tail, size_t tlen)
{
	struct evbuffer_iovec v;
	size_t elen = strlen(event), body, total;
	char *p;
	int n;

	body = escape_mid ? sbx_json_escaped_len((const unsigned char *)mid,
	    mlen) : mlen;
	/* "id: " 20 digits "\n" "event: " E "\n" "data: " ... "\n\n" */
	total = 4 + 20 + 1 + 7 + elen + 1 + 6 + hlen + body + tlen + 2;
	if (evbuffer_reserve_space(out, (ev_ssize_t)total, &v, 1) < 1)
		return -1;
	p = v.iov_base;
	if (id != 0) {
		n = snprintf(p, 26, "id: %" PRIu64 "\n", id);
		p += n;
	}
	memcpy(p, "event: ", 7);
	p += 7;
	memcpy(p, event, elen);
	p += elen;
	memcpy(p, "\ndata: ", 7);
	p += 7;
	memcpy(p, head, hlen);
	p += hlen;
	if (escape_mid)
		p = sbx_json_escape(p, (const unsigned char *)mid, mlen);
	else {
		memcpy(p, mid, mlen);
		p += mlen;
	}
	memcpy(p, tail, tlen);
	p += tlen;
	*p++ = '\n';
	*p++ = '\n';
	v.iov_len = (size_t)(p - (char *)v.iov_base);
	return evbuffer_commit_space(out, &v, 1);
}

/* SSE event names we forward: [a-z][a-z0-9_]{0,31}. */
static int
type_ok(const char *t)
{
	size_t i;

	if (t == NULL || t[0] < 'a' || t[0] > 'z')
		return 0;
	for (i = 1; t[i] != '\0'; i++) {
		if (i >= 32)
			return 0;
		if (!((t[i] >= 'a' && t[i] <= 'z') ||
		    (t[i] >= '0' && t[i] <= '9') || t[i] == '_'))
			return 0;
	}
	return 1;
}

/* The mapping itself, on a parsed object (not modified). */
static int
sse_from_object(struct evbuffer *out, uint64_t id, json_t *obj,
    struct sbx_err *err)
{
	json_t *copy = NULL;
	const char *type;
	char *data = NULL;
	size_t n;
	int rc = -1;

	if (!json_is_object(obj)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "%s: not a JSON object",
		    SBX_PROTOCOL_ERROR);
		goto done;
	}
	type = json_string_value(json_object_get(obj, SBX_EVF_TYPE));
	if (!type_ok(type)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST,
		    "%s: missing or malformed \"type\"", SBX_PROTOCOL_ERROR);
		goto done;
	}
	/* A shallow copy keeps member order (jansson objects iterate in
	 * insertion order) and shares the values, so no big string is
	 * copied. It also holds the type string alive past the delete. */
	if ((copy = json_copy(obj)) == NULL ||
	    json_object_del(copy, SBX_EVF_TYPE) != 0)
		goto oom;
	if ((n = json_dumpb(copy, NULL, 0, JSON_COMPACT)) == 0 ||
	    (data = malloc(n)) == NULL ||
	    json_dumpb(copy, data, n, JSON_COMPACT) != n)
		goto oom;
	if (sbx_sse_event(out, id, type, data, n) != 0)
		goto oom;
	rc = 0;
	goto done;
oom:
	sbx_err_oom(err);
done:
	free(data);
	json_decref(copy);
	return rc;
}

/*
 * A line the encoder wrote has "type" first and is compact, so the object
 * without it is "{" + what follows "\"type\":\"T\","; jansson would
 * re-dump exactly those bytes (proto/sbx_ndjson.h). Returns 1 when mapped,
 * 0 when line does not have that shape, -1 when out of memory.
 */
static int
sse_type_first(struct evbuffer *out, uint64_t id, const char *line, size_t len)
{
	static const char pre[] = "{\"" SBX_EVF_TYPE "\":\"";
	char type[33];
	size_t i, t;

	if (len < sizeof(pre) + 2 || memcmp(line, pre, sizeof(pre) - 1) != 0)
		return 0;
	i = sizeof(pre) - 1;
	for (t = 0; i < len && t < sizeof(type) - 1 &&
	    ((line[i] >= 'a' && line[i] <= 'z') ||
	    (t > 0 && ((line[i] >= '0' && line[i] <= '9') || line[i] == '_')));
	    i++, t++)
		type[t] = line[i];
	type[t] = '\0';
	if (t == 0 || i + 1 >= len || line[i] != '"' || line[len - 1] != '}')
		return 0;
	i++;
	if (line[i] == '}' && i + 1 == len)
		return sbx_sse_event(out, id, type, "{}", 2) == 0 ? 1 : -1;
	/* sse_put_line writes one data line: no CR or LF may be in it */
	if (line[i] != ',' || memchr(line, '\n', len) != NULL ||
	    memchr(line, '\r', len) != NULL)
		return 0;
	return sse_put_line(out, id, type, "{", 1, line + i + 1, len - i - 1, 0,
	    "", 0) == 0 ? 1 : -1;
}

/* The one NDJSON line -> SSE event path; own: the line is this process's
 * encoder's (sbx_sse_from_own_ndjson), so it may skip the JSON parse. */
static int
sse_from_line(struct evbuffer *out, uint64_t id, const char *line, size_t len,
    int own, struct sbx_err *err)
{
	json_error_t jerr;
	json_t *o = NULL;
	size_t n, off, vlen, skip;
	int rc, stream, b64;

	if (out == NULL || (line == NULL && len > 0))
		return sbx_err_set(err, SBX_E_INTERNAL, SBX_MSG_NO_BUFFER);
	/* Hot path: an output line as the encoder writes it maps to
	 * '{' + the line after its "type" member, which is exactly what
	 * jansson would write for the object without "type". */
	n = len;
	if (n > 0 && line[n - 1] == '\n')
		n--;
	if (n > 0 && line[n - 1] == '\r')
		n--;
	if (sbx_ndjson_canonical_output(line, n, &stream, &b64, &off, &vlen)) {
		skip = strlen("{\"" SBX_EVF_TYPE "\":\"stdout\",");
		if (sse_put_line(out, id, stream == SBX_STREAM_STDOUT ?
		    SBX_EV_STDOUT : SBX_EV_STDERR, "{", 1, line + skip,
		    n - skip, 0, "", 0) != 0)
			return sbx_err_oom(err);
		return 0;
	}
	if (own && (rc = sse_type_first(out, id, line, n)) != 0)
		return rc == 1 ? 0 : sbx_err_oom(err);
	o = json_loadb(line, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL,
	    &jerr);
	if (o == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s: not valid JSON",
		    SBX_PROTOCOL_ERROR);
	rc = sse_from_object(out, id, o, err);
	json_decref(o);
	return rc;
}

int
sbx_sse_from_ndjson(struct evbuffer *out, uint64_t id, const char *line,
    size_t len, struct sbx_err *err)
{
	return sse_from_line(out, id, line, len, 0, err);
}

int
sbx_sse_from_own_ndjson(struct evbuffer *out, uint64_t id, const char *line,
    size_t len, struct sbx_err *err)
{
	return sse_from_line(out, id, line, len, 1, err);
}

int
sbx_sse_from_output_line(struct evbuffer *out, uint64_t id, const char *line,
    size_t len, struct sbx_err *err)
{
	static const char pre[] = "{\"" SBX_EVF_TYPE "\":\"std";
	const size_t skip = strlen("{\"" SBX_EVF_TYPE "\":\"stdout\",");
	const char *type;

	if (out == NULL || (line == NULL && len > 0))
		return sbx_err_set(err, SBX_E_INTERNAL, SBX_MSG_NO_BUFFER);
	/* {"type":"std  out|err  ",  ...}: the type is all that is read */
	if (len < skip + 2 || memcmp(line, pre, sizeof(pre) - 1) != 0 ||
	    line[skip - 2] != '"' || line[skip - 1] != ',' ||
	    line[skip] != '"' || line[len - 1] != '}')
		goto bad;
	if (memcmp(line + sizeof(pre) - 1, "out", 3) == 0)
		type = SBX_EV_STDOUT;
	else if (memcmp(line + sizeof(pre) - 1, "err", 3) == 0)
		type = SBX_EV_STDERR;
	else
		goto bad;
	/* sse_put_line writes one data line: nothing may end it */
	if (has_break(line, len))
		goto bad;
	if (sse_put_line(out, id, type, "{", 1, line + skip, len - skip, 0,
	    "", 0) != 0)
		return sbx_err_oom(err);
	return 0;
bad:
	return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s: not an output event "
	    "line", SBX_PROTOCOL_ERROR);
}

int
sbx_sse_from_event(struct evbuffer *out, uint64_t id,
    const struct sbx_event *ev, struct sbx_err *err)
{
	static const char txt[] = "{\"" SBX_EVF_DATA "\":\"";
	static const char bin[] = "{\"" SBX_EVF_DATA_B64 "\":\"";
	json_t *v;
	int b64;

	if (out == NULL || ev == NULL || ev->raw == NULL)
		return sbx_err_set(err, SBX_E_INTERNAL, "no event");
	/* Hot path: {"type":..., "data"|"data_b64": S} and nothing else maps
	 * to {"data":"S"} with S escaped as jansson does, written directly. */
	if ((ev->type == SBX_EVENT_STDOUT || ev->type == SBX_EVENT_STDERR) &&
	    json_object_size(ev->raw) == 2) {
		b64 = (v = json_object_get(ev->raw, SBX_EVF_DATA)) == NULL;
		if (b64)
			v = json_object_get(ev->raw, SBX_EVF_DATA_B64);
		if (json_is_string(v) && json_is_string(json_object_get(ev->raw,
		    SBX_EVF_TYPE))) {
			if (sse_put_line(out, id, sbx_event_type_name(ev->type),
			    b64 ? bin : txt, (b64 ? sizeof(bin) : sizeof(txt)) - 1,
			    json_string_value(v), json_string_length(v), 1,
			    "\"}", 2) != 0)
				return sbx_err_oom(err);
			return 0;
		}
	}
	return sse_from_object(out, id, ev->raw, err);
}
