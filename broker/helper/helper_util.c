/* helper_util.c - sbx-helper errors, full reads/writes, byte pumps, control records and a tiny buffered JSON writer (libc, and the frame codec of proto/sbx_agent.c: sbx_agent_take for output framing, the CTRL parser): the helper's ground floor, it calls no other helper file. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "helper.h"
#include "sbx_agent.h"

int
helper_err_set(struct helper_err *err, const char *code, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL)
		return -1;
	err->code = code;
	err->errnum = 0;
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return -1;
}

static int
errno_set(struct helper_err *err, int errnum, const char *what)
{
	switch (errnum) {
	case ENOENT:
		return helper_err_set(err, SBX_E_NOT_FOUND, "%s: no such file or directory", what);
	case ENOTDIR:
		return helper_err_set(err, SBX_E_NOT_FOUND, "%s: a path component is not a directory",
		    what);
	case EXDEV:
		return helper_err_set(err, SBX_E_PATH_OUTSIDE_WORK,
		    "%s: the path leaves /work (through a symlink or mount)", what);
	case EACCES:
	case EPERM:
	case EROFS:
		return helper_err_set(err, SBX_E_FORBIDDEN, "%s: %s", what, strerror(errnum));
	case ENAMETOOLONG:
	case EISDIR:
	case ELOOP:
	case EEXIST:
	case ENOTEMPTY:
		return helper_err_set(err, SBX_E_BAD_REQUEST, "%s: %s", what, strerror(errnum));
	default:
		return helper_err_set(err, SBX_E_INTERNAL, "%s: %s", what, strerror(errnum));
	}
}

int
helper_err_errno(struct helper_err *err, int errnum, const char *what)
{
	int rc;

	rc = errno_set(err, errnum, what);
	if (err != NULL)
		err->errnum = errnum;
	return rc;
}

int
helper_err_name_path(struct helper_err *err, const char *rel)
{
	const char *sep = rel[0] != '\0' ? "/" : "";

	if (err == NULL)
		return -1;
	switch (err->errnum) {
	case ENOENT:
		snprintf(err->message, sizeof(err->message), "/work%s%.150s does "
		    "not exist; check the name, or list its directory.", sep, rel);
		break;
	case ENOTDIR:
		snprintf(err->message, sizeof(err->message), "/work%s%.150s is not "
		    "a directory, or a part of that path is a file; check the "
		    "path.", sep, rel);
		break;
	case EISDIR:
		helper_err_is_dir(err, rel);
		break;
	default:
		break;
	}
	return -1;
}

int
helper_err_is_dir(struct helper_err *err, const char *rel)
{
	helper_err_set(err, SBX_E_BAD_REQUEST, "/work%s%.150s is a directory; "
	    "read or write a file in it, or list it.", rel[0] != '\0' ? "/" : "",
	    rel);
	if (err != NULL)
		err->errnum = EISDIR;
	return -1;
}

int
helper_err_exit_code(const struct helper_err *err)
{
	static const struct {
		const char *code;
		int exit_code;
	} map[] = {
		{ SBX_E_BAD_REQUEST, SBX_HELPER_EXIT_BAD_REQUEST },
		{ SBX_E_PATH_OUTSIDE_WORK, SBX_HELPER_EXIT_PATH_OUTSIDE_WORK },
		{ SBX_E_NOT_FOUND, SBX_HELPER_EXIT_NOT_FOUND },
		{ SBX_E_TOO_LARGE, SBX_HELPER_EXIT_TOO_LARGE },
		{ SBX_E_FORBIDDEN, SBX_HELPER_EXIT_FORBIDDEN },
		{ SBX_E_CANCELLED, SBX_HELPER_EXIT_CANCELLED },
		{ SBX_E_PORT_CLOSED, SBX_HELPER_EXIT_PORT_CLOSED },
	};
	size_t i;

	if (err == NULL || err->code == NULL)
		return SBX_HELPER_EXIT_INTERNAL;
	for (i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (strcmp(map[i].code, err->code) == 0)
			return map[i].exit_code;
	return SBX_HELPER_EXIT_INTERNAL;
}

/* The error line into o (fd unused: the caller takes o->buf). */
static void
err_line(struct helper_out *o, const struct helper_err *err, size_t max_msg)
{
	const char *code;
	size_t mlen;

	code = err != NULL && err->code != NULL ? err->code : SBX_E_INTERNAL;
	helper_out_str(o, "{\"sbx_helper\":");
	helper_out_u64(o, SBX_HELPER_PROTO);
	helper_out_str(o, ",\"error\":{\"code\":");
	helper_out_json_str(o, code, strlen(code));
	helper_out_str(o, ",\"message\":");
	if (err != NULL && err->code != NULL) {
		mlen = strlen(err->message);
		helper_out_json_str(o, err->message, mlen < max_msg ? mlen : max_msg);
	} else
		helper_out_str(o, "\"unknown error\"");
	helper_out_str(o, "}}\n");
}

void
helper_err_print(const struct helper_err *err)
{
	static struct helper_out out; /* 64 KiB: not on the stack */

	helper_out_init(&out, 2);
	err_line(&out, err, sizeof(err->message));
	(void)helper_out_flush(&out);
}

size_t
helper_err_json(const struct helper_err *err, char *buf, size_t size)
{
	static struct helper_out out;
	size_t max_msg = sizeof(err->message);

	/* A message of n bytes takes at most 6n escaped (\u00XX). */
	for (;;) {
		helper_out_init(&out, -1);
		err_line(&out, err, max_msg);
		if (out.len <= size || max_msg == 0)
			break;
		max_msg /= 2;
	}
	if (out.len > size)
		out.len = 0;
	memcpy(buf, out.buf, out.len);
	return out.len;
}

ssize_t
helper_read_full(int fd, void *buf, size_t n)
{
	size_t got = 0;
	ssize_t r;

	while (got < n) {
		r = read(fd, (char *)buf + got, n - got);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

int
helper_write_all(int fd, const void *buf, size_t n)
{
	size_t done = 0;
	ssize_t r;

	while (done < n) {
		r = write(fd, (const char *)buf + done, n - done);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0)
			return -1;
		done += (size_t)r;
	}
	return 0;
}

void
helper_out_init(struct helper_out *o, int fd)
{
	o->fd = fd;
	o->failed = 0;
	o->err_no = 0;
	o->len = 0;
}

static void
out_drain(struct helper_out *o)
{
	if (o->len > 0 && !o->failed && helper_write_all(o->fd, o->buf, o->len) < 0) {
		o->failed = 1;
		o->err_no = errno;
	}
	o->len = 0;
}

void
helper_out_bytes(struct helper_out *o, const void *p, size_t n)
{
	const unsigned char *s = p;

	while (n > 0) {
		if (o->len == sizeof(o->buf))
			out_drain(o);
		sbx_agent_take((unsigned char *)o->buf, &o->len, sizeof(o->buf), &s,
		    &n);
	}
}

void
helper_out_str(struct helper_out *o, const char *s)
{
	helper_out_bytes(o, s, strlen(s));
}

void
helper_out_u64(struct helper_out *o, uint64_t v)
{
	char tmp[24];
	size_t i = sizeof(tmp);

	do {
		tmp[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v != 0);
	helper_out_bytes(o, tmp + i, sizeof(tmp) - i);
}

void
helper_out_i64(struct helper_out *o, int64_t v)
{
	if (v < 0) {
		helper_out_bytes(o, "-", 1);
		/* -(v + 1) + 1 avoids overflow on INT64_MIN. */
		helper_out_u64(o, (uint64_t)(-(v + 1)) + 1);
	} else
		helper_out_u64(o, (uint64_t)v);
}

/*
 * Length of the valid UTF-8 sequence at s (n bytes left), or 0 when the
 * byte at s does not start one. RFC 3629: no overlong forms, no surrogates
 * (U+D800..DFFF), nothing above U+10FFFF.
 */
static size_t
utf8_seq_len(const unsigned char *s, size_t n)
{
	unsigned char c = s[0];

	if (c < 0x80)
		return 1;
	if (c >= 0xc2 && c <= 0xdf) {
		if (n >= 2 && (s[1] & 0xc0) == 0x80)
			return 2;
		return 0;
	}
	if (c >= 0xe0 && c <= 0xef) {
		if (n < 3 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80)
			return 0;
		if (c == 0xe0 && s[1] < 0xa0) /* overlong */
			return 0;
		if (c == 0xed && s[1] >= 0xa0) /* surrogate */
			return 0;
		return 3;
	}
	if (c >= 0xf0 && c <= 0xf4) {
		if (n < 4 || (s[1] & 0xc0) != 0x80 || (s[2] & 0xc0) != 0x80 ||
		    (s[3] & 0xc0) != 0x80)
			return 0;
		if (c == 0xf0 && s[1] < 0x90) /* overlong */
			return 0;
		if (c == 0xf4 && s[1] >= 0x90) /* > U+10FFFF */
			return 0;
		return 4;
	}
	return 0;
}

int
helper_out_json_str(struct helper_out *o, const char *str, size_t n)
{
	static const char hex[] = "0123456789abcdef";
	const unsigned char *s = (const unsigned char *)str;
	int valid = 1;
	size_t i = 0, k;
	char esc[6];

	helper_out_bytes(o, "\"", 1);
	while (i < n) {
		k = utf8_seq_len(s + i, n - i);
		if (k == 0) {
			helper_out_str(o, "\\ufffd");
			valid = 0;
			i++;
			continue;
		}
		if (k > 1) {
			helper_out_bytes(o, s + i, k);
			i += k;
			continue;
		}
		switch (s[i]) {
		case '"':
			helper_out_str(o, "\\\"");
			break;
		case '\\':
			helper_out_str(o, "\\\\");
			break;
		case '\n':
			helper_out_str(o, "\\n");
			break;
		case '\r':
			helper_out_str(o, "\\r");
			break;
		case '\t':
			helper_out_str(o, "\\t");
			break;
		default:
			if (s[i] < 0x20 || s[i] == 0x7f) {
				memcpy(esc, "\\u00", 4);
				esc[4] = hex[s[i] >> 4];
				esc[5] = hex[s[i] & 0xf];
				helper_out_bytes(o, esc, sizeof(esc));
			} else
				helper_out_bytes(o, s + i, 1);
		}
		i++;
	}
	helper_out_bytes(o, "\"", 1);
	return valid;
}

void
helper_out_json_b64(struct helper_out *o, const unsigned char *s, size_t n)
{
	static const char tbl[] =
	    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	char q[4];
	size_t i;
	uint32_t v;

	helper_out_bytes(o, "\"", 1);
	for (i = 0; i + 2 < n; i += 3) {
		v = (uint32_t)s[i] << 16 | (uint32_t)s[i + 1] << 8 | s[i + 2];
		q[0] = tbl[v >> 18 & 63];
		q[1] = tbl[v >> 12 & 63];
		q[2] = tbl[v >> 6 & 63];
		q[3] = tbl[v & 63];
		helper_out_bytes(o, q, 4);
	}
	if (i < n) {
		v = (uint32_t)s[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)s[i + 1] << 8;
		q[0] = tbl[v >> 18 & 63];
		q[1] = tbl[v >> 12 & 63];
		q[2] = i + 1 < n ? tbl[v >> 6 & 63] : '=';
		q[3] = '=';
		helper_out_bytes(o, q, 4);
	}
	helper_out_bytes(o, "\"", 1);
}

int
helper_out_flush(struct helper_out *o)
{
	out_drain(o);
	if (o->failed) {
		errno = o->err_no;
		return -1;
	}
	return 0;
}

uint64_t
helper_mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

int
helper_pump_fill(struct helper_pump *p)
{
	ssize_t n;

	if (p->eof || p->len > p->off)
		return p->eof ? -1 : 0;
	p->off = p->len = 0;
	do
		n = read(p->from, p->buf, sizeof(p->buf));
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (n <= 0) {
		p->eof = 1;   /* EIO: a pty whose every slave closed */
		return -1;
	}
	p->len = (size_t)n;
	return 1;
}

int
helper_write_some(int fd, const unsigned char *buf, size_t *off, size_t len)
{
	ssize_t n;

	while (*off < len) {
		n = write(fd, buf + *off, len - *off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
			return 0;
		if (n <= 0)
			return -1;
		*off += (size_t)n;
	}
	return 1;
}

int
helper_pump_flush(struct helper_pump *p)
{
	int r = helper_write_some(p->to, p->buf, &p->off, p->len);

	if (r == 1)
		p->off = p->len = 0;
	return r;
}

int
helper_ctrl_read(int fd, struct sbx_agent_ctrl *c)
{
	unsigned char p[SBX_AGENT_CTRL_LEN];
	const char *why;
	ssize_t n;

	do
		n = read(fd, p, sizeof(p));
	while (n < 0 && errno == EINTR);
	if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
		return 0;
	if (n <= 0)
		return -1;
	/* The agent writes whole records (8 bytes < PIPE_BUF: atomic). */
	if (n != (ssize_t)sizeof(p) || sbx_agent_ctrl_parse(p, sizeof(p), c, &why) < 0)
		memset(c, 0, sizeof(*c));
	return 1;
}
