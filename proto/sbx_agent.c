/* sbx_agent.c - helper protocol 4 frame codec (contract in sbx_agent.h); libc only, shared by sbx-helper and the broker. */
#include <string.h>

#include "sbx_agent.h"

uint32_t
sbx_agent_get32(const unsigned char *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

size_t
sbx_agent_take(unsigned char *dst, size_t *have, size_t cap,
    const unsigned char **src, size_t *len)
{
	size_t n = cap - *have;

	if (n > *len)
		n = *len;
	if (n > 0)
		memcpy(dst + *have, *src, n);
	*have += n;
	*src += n;
	*len -= n;
	return n;
}

void
sbx_agent_put32(unsigned char *p, uint32_t v)
{
	p[0] = (unsigned char)(v >> 24);
	p[1] = (unsigned char)(v >> 16);
	p[2] = (unsigned char)(v >> 8);
	p[3] = (unsigned char)v;
}

void
sbx_agent_hdr_put(unsigned char *h, int type, int flags, uint32_t stream, uint32_t len)
{
	h[0] = (unsigned char)type;
	h[1] = SBX_AGENT_PROTO;
	h[2] = (unsigned char)flags;
	h[3] = 0;
	sbx_agent_put32(h + 4, stream);
	sbx_agent_put32(h + 8, len);
}

/* What each type may carry: direction (1 agent->broker, 2 broker->agent,
 * 3 both), stream 0 or not, payload bounds, flags allowed. */
struct rule {
	int dir;
	int chan;            /* 1: stream id 0 */
	uint32_t min, max;
};

static const struct rule rules[] = {
	[SBX_AGENT_T_HELLO] = { 1, 1, SBX_AGENT_HELLO_LEN, SBX_AGENT_HELLO_LEN },
	[SBX_AGENT_T_PING] = { 2, 1, SBX_AGENT_PING_LEN, SBX_AGENT_PING_LEN },
	[SBX_AGENT_T_PONG] = { 1, 1, SBX_AGENT_PING_LEN, SBX_AGENT_PING_LEN },
	[SBX_AGENT_T_OPEN] = { 2, 0, 8, SBX_AGENT_OPEN_MAX },
	[SBX_AGENT_T_DATA] = { 3, 0, 1, SBX_AGENT_DATA_MAX },
	[SBX_AGENT_T_EOF] = { 2, 0, 0, 0 },
	[SBX_AGENT_T_WINDOW] = { 3, 0, SBX_AGENT_WINDOW_LEN, SBX_AGENT_WINDOW_LEN },
	[SBX_AGENT_T_CANCEL] = { 2, 0, 0, 0 },
	[SBX_AGENT_T_EXIT] = { 1, 0, SBX_AGENT_EXIT_LEN, SBX_AGENT_EXIT_LEN },
	[SBX_AGENT_T_REFUSE] = { 1, 0, 1, SBX_AGENT_CODE_MAX },
	[SBX_AGENT_T_CTRL] = { 2, 0, SBX_AGENT_CTRL_LEN, SBX_AGENT_CTRL_LEN },
	[SBX_AGENT_T_EVENT] = { 1, 0, 1, SBX_AGENT_EVENT_MAX },
};

/* The flags a type may carry in a direction. */
static int
flags_ok(int type, int flags, int from_agent)
{
	switch (type) {
	case SBX_AGENT_T_OPEN:
		return (flags & ~(SBX_AGENT_OPEN_STDIN | SBX_AGENT_OPEN_CTRL)) == 0;
	case SBX_AGENT_T_DATA:
		return from_agent ? (flags == 1 || flags == 2) : flags == 0;
	case SBX_AGENT_T_WINDOW:
		return from_agent ? flags == 0 : flags == 1;
	case SBX_AGENT_T_EOF:
	default:
		return flags == 0;
	}
}

int
sbx_agent_hdr_parse(const unsigned char *h, int from_agent, struct sbx_agent_frame *f,
    const char **why)
{
	const struct rule *r;
	int type = h[0];

	if (h[1] != SBX_AGENT_PROTO) {
		*why = "frame of another protocol version";
		return -1;
	}
	if (h[3] != 0) {
		*why = "frame header byte 3 not zero";
		return -1;
	}
	if (type < SBX_AGENT_T_HELLO || type > SBX_AGENT_T_EVENT) {
		*why = "unknown frame type";
		return -1;
	}
	r = &rules[type];
	if (!(r->dir & (from_agent ? 1 : 2))) {
		*why = "frame type not allowed in this direction";
		return -1;
	}
	f->type = (uint8_t)type;
	f->flags = h[2];
	f->stream = sbx_agent_get32(h + 4);
	f->len = sbx_agent_get32(h + 8);
	if (!flags_ok(type, f->flags, from_agent)) {
		*why = "frame flags not allowed for its type";
		return -1;
	}
	if (r->chan ? f->stream != 0 : (f->stream == 0 || f->stream > SBX_AGENT_STREAM_MAX)) {
		*why = "stream id not allowed for the frame type";
		return -1;
	}
	if (f->len < r->min || f->len > r->max) {
		*why = "frame length out of its type's bound";
		return -1;
	}
	return 0;
}

void
sbx_agent_dec_init(struct sbx_agent_dec *d, int from_agent, unsigned char *rec, size_t rec_cap)
{
	memset(d, 0, sizeof(*d));
	d->from_agent = from_agent;
	d->rec = rec;
	d->rec_cap = rec_cap;
}

void
sbx_agent_dec_link(struct sbx_agent_dec *d)
{
	d->link = 1;
}

static int
dec_fail(struct sbx_agent_dec *d, const char *why)
{
	d->failed = 1;
	d->why = why;
	return -1;
}

int
sbx_agent_dec_feed(struct sbx_agent_dec *d, const unsigned char *buf, size_t len,
    sbx_agent_frame_cb cb, void *arg)
{
	const char *why = NULL;
	size_t n;

	if (d->failed)
		return -1;
	while (len > 0 || (d->in_frame && d->left == 0)) {
		if (!d->in_frame) {
			sbx_agent_take(d->hdr, &d->hlen, SBX_AGENT_HDR, &buf, &len);
			if (d->hlen < SBX_AGENT_HDR)
				return 0;
			d->hlen = 0;
			if (sbx_agent_hdr_parse(d->hdr, d->from_agent, &d->f, &why) < 0)
				return dec_fail(d, why);
			if (d->f.type == SBX_AGENT_T_EVENT && !d->link)
				return dec_fail(d, "an event frame on an agent channel");
			if (d->f.type != SBX_AGENT_T_DATA && d->f.len > d->rec_cap)
				return dec_fail(d, "frame longer than this side accepts");
			d->in_frame = 1;
			d->left = d->f.len;
			d->rec_len = 0;
			continue;
		}
		if (d->f.type == SBX_AGENT_T_DATA) {
			n = d->left < len ? d->left : len;
			d->left -= (uint32_t)n;
			if (d->left == 0)
				d->in_frame = 0;
			if (cb(arg, &d->f, buf, n, d->left == 0) < 0)
				return dec_fail(d, "refused by the receiver");
			buf += n;
			len -= n;
			continue;
		}
		n = sbx_agent_take(d->rec, &d->rec_len, d->rec_len + d->left, &buf,
		    &len);
		d->left -= (uint32_t)n;
		if (d->left > 0)
			return 0;
		d->in_frame = 0;
		if (cb(arg, &d->f, d->rec, d->rec_len, 1) < 0)
			return dec_fail(d, "refused by the receiver");
	}
	return 0;
}

void
sbx_agent_hello_put(unsigned char *p, const struct sbx_agent_hello *hello)
{
	sbx_agent_put32(p, hello->proto);
	sbx_agent_put32(p + 4, hello->pid);
	sbx_agent_put32(p + 8, hello->window);
	sbx_agent_put32(p + 12, hello->streams);
}

int
sbx_agent_hello_parse(const unsigned char *p, size_t n, struct sbx_agent_hello *hello,
    const char **why)
{
	if (n != SBX_AGENT_HELLO_LEN) {
		*why = "hello of the wrong length";
		return -1;
	}
	hello->proto = sbx_agent_get32(p);
	hello->pid = sbx_agent_get32(p + 4);
	hello->window = sbx_agent_get32(p + 8);
	hello->streams = sbx_agent_get32(p + 12);
	if (hello->proto != SBX_AGENT_PROTO) {
		*why = "agent speaks another protocol version";
		return -1;
	}
	if (hello->pid <= 1 || hello->pid > 0x7fffffffu || hello->window == 0 ||
	    hello->window > SBX_AGENT_WINDOW_MAX || hello->streams == 0 ||
	    hello->streams > SBX_AGENT_STREAMS_MAX) {
		*why = "hello out of bounds";
		return -1;
	}
	return 0;
}

uint32_t
sbx_agent_window_parse(const unsigned char *p, size_t n)
{
	uint32_t v;

	if (n != SBX_AGENT_WINDOW_LEN)
		return 0;
	v = sbx_agent_get32(p);
	return v <= SBX_AGENT_WINDOW_MAX ? v : 0;
}

void
sbx_agent_exit_put(unsigned char *p, const struct sbx_agent_exit *ex)
{
	p[0] = (unsigned char)ex->how;
	p[1] = (unsigned char)(ex->how == SBX_AGENT_EXIT_EXITED ? ex->status : 0);
	p[2] = (unsigned char)(ex->how == SBX_AGENT_EXIT_SIGNALED ? ex->sig : 0);
	p[3] = 0;
}

int
sbx_agent_exit_parse(const unsigned char *p, size_t n, struct sbx_agent_exit *ex,
    const char **why)
{
	*why = "malformed exit record";
	if (n != SBX_AGENT_EXIT_LEN || p[3] != 0)
		return -1;
	memset(ex, 0, sizeof(*ex));
	if (p[0] == SBX_AGENT_EXIT_EXITED && p[2] == 0) {
		ex->how = p[0];
		ex->status = p[1];
		return 0;
	}
	if (p[0] == SBX_AGENT_EXIT_SIGNALED && p[1] == 0 && p[2] >= 1 && p[2] <= 64) {
		ex->how = p[0];
		ex->sig = p[2];
		return 0;
	}
	return -1;
}

void
sbx_agent_ctrl_put(unsigned char *p, const struct sbx_agent_ctrl *c)
{
	sbx_agent_put32(p, c->kind);
	if (c->kind == SBX_AGENT_CTRL_RESIZE) {
		/* A size that does not fit 16 bits goes as 0, which is refused. */
		uint32_t a = c->a > 0xffff ? 0 : c->a, b = c->b > 0xffff ? 0 : c->b;

		p[4] = (unsigned char)(a >> 8);
		p[5] = (unsigned char)a;
		p[6] = (unsigned char)(b >> 8);
		p[7] = (unsigned char)b;
	} else
		sbx_agent_put32(p + 4, c->a);
}

int
sbx_agent_ctrl_parse(const unsigned char *p, size_t n, struct sbx_agent_ctrl *c,
    const char **why)
{
	memset(c, 0, sizeof(*c));
	if (n != SBX_AGENT_CTRL_LEN) {
		*why = "control record of the wrong length";
		return -1;
	}
	c->kind = sbx_agent_get32(p);
	switch (c->kind) {
	case SBX_AGENT_CTRL_RESIZE:
		c->a = (uint32_t)p[4] << 8 | p[5];
		c->b = (uint32_t)p[6] << 8 | p[7];
		if (c->a < 1 || c->a > SBX_AGENT_CTRL_DIM_MAX || c->b < 1 ||
		    c->b > SBX_AGENT_CTRL_DIM_MAX) {
			*why = "terminal size out of 1..10000";
			return -1;
		}
		return 0;
	case SBX_AGENT_CTRL_SIGNAL:
		c->a = sbx_agent_get32(p + 4);
		if (c->a < 1 || c->a > SBX_AGENT_CTRL_SIG_MAX) {
			*why = "signal number out of 1..64";
			return -1;
		}
		return 0;
	default:
		*why = "unknown control record";
		return -1;
	}
}

int
sbx_agent_refuse_parse(const unsigned char *p, size_t n, char *code)
{
	size_t i;

	if (n == 0 || n > SBX_AGENT_CODE_MAX)
		return -1;
	for (i = 0; i < n; i++) {
		if (!((p[i] >= 'a' && p[i] <= 'z') || p[i] == '_'))
			return -1;
		code[i] = (char)p[i];
	}
	code[n] = '\0';
	return 0;
}

static int
env_ok(const char *s)
{
	return s[0] != '=' && strchr(s, '=') != NULL;
}

size_t
sbx_agent_open_len(const char *const *argv, const char *const *env)
{
	size_t n = 8, c = 0;
	const char *const *p;

	if (argv == NULL || argv[0] == NULL || argv[0][0] == '\0')
		return 0;
	for (p = argv; *p != NULL; p++, c++)
		n += strlen(*p) + 1;
	for (p = env; p != NULL && *p != NULL; p++, c++) {
		if (!env_ok(*p))
			return 0;
		n += strlen(*p) + 1;
	}
	if (c > SBX_AGENT_ARGS_MAX || n > SBX_AGENT_OPEN_MAX)
		return 0;
	return n;
}

size_t
sbx_agent_open_put(unsigned char *p, size_t cap, const char *const *argv,
    const char *const *env)
{
	size_t need = sbx_agent_open_len(argv, env), off = 8, l;
	uint32_t argc = 0, envc = 0;
	const char *const *s;

	if (need == 0 || need > cap)
		return 0;
	for (s = argv; *s != NULL; s++, argc++) {
		l = strlen(*s) + 1;
		memcpy(p + off, *s, l);
		off += l;
	}
	for (s = env; s != NULL && *s != NULL; s++, envc++) {
		l = strlen(*s) + 1;
		memcpy(p + off, *s, l);
		off += l;
	}
	sbx_agent_put32(p, argc);
	sbx_agent_put32(p + 4, envc);
	return off;
}

int
sbx_agent_open_parse(unsigned char *p, size_t n, char **argv, size_t argv_cap,
    char **env, size_t env_cap, const char **why)
{
	uint32_t argc, envc, i;
	size_t off = 8;
	unsigned char *nul;

	*why = "malformed open";
	if (n < 8 || n > SBX_AGENT_OPEN_MAX)
		return -1;
	argc = sbx_agent_get32(p);
	envc = sbx_agent_get32(p + 4);
	if (argc == 0 || argc > SBX_AGENT_ARGS_MAX || envc > SBX_AGENT_ARGS_MAX - argc ||
	    (size_t)argc >= argv_cap || (size_t)envc >= env_cap) {
		*why = "open with too many strings";
		return -1;
	}
	for (i = 0; i < argc + envc; i++) {
		if (off >= n || (nul = memchr(p + off, '\0', n - off)) == NULL) {
			*why = "open string without its NUL";
			return -1;
		}
		if (i < argc)
			argv[i] = (char *)(p + off);
		else {
			env[i - argc] = (char *)(p + off);
			if (!env_ok(env[i - argc])) {
				*why = "open env entry is not NAME=value";
				return -1;
			}
		}
		off = (size_t)(nul - p) + 1;
	}
	if (off != n) {
		*why = "bytes after the last open string";
		return -1;
	}
	if (argv[0][0] == '\0') {
		*why = "open with an empty mode";
		return -1;
	}
	argv[argc] = NULL;
	env[envc] = NULL;
	return 0;
}
