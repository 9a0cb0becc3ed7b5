/* api_browser_cdp_parse.c - the pure checks of what a browser in a sandbox sends the api over CDP (api_browser_cdp.h, adr/0065): an HTTP answer's head, the page target of /json/list, a base64 PNG or JPEG. No I/O; touches only its arguments. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include <jansson.h>
#include <sodium.h>

#include "api_browser_cdp.h"
#include "sbx_proto.h"

/* The value of header name in the head's lines [p, end), into out. */
static void
head_value(const char *p, const char *end, const char *name, char *out,
    size_t cap)
{
	size_t nl = strlen(name), n;
	const char *e, *v;

	if (out == NULL || cap == 0)
		return;
	out[0] = '\0';
	while (p < end) {
		e = memchr(p, '\n', (size_t)(end - p));
		if (e == NULL)
			e = end;
		if ((size_t)(e - p) > nl && p[nl] == ':' &&
		    strncasecmp(p, name, nl) == 0) {
			v = p + nl + 1;
			while (v < e && (*v == ' ' || *v == '\t'))
				v++;
			n = (size_t)(e - v);
			while (n > 0 && (v[n - 1] == '\r' || v[n - 1] == ' ' ||
			    v[n - 1] == '\t'))
				n--;
			if (n >= cap)
				n = cap - 1;
			memcpy(out, v, n);
			out[n] = '\0';
			return;
		}
		p = e + 1;
	}
}

int
api_cdp_http_head(const char *buf, size_t len, size_t max, int *status,
    size_t *head_len, long *clen, char *upgrade, char *connection,
    char *accept, size_t cap, struct sbx_err *err)
{
	size_t look = len < max ? len : max, i;
	const char *end = NULL, *sp;
	char cl[24];
	long v = 0;

	for (i = 0; i + 3 < look; i++)
		if (memcmp(buf + i, "\r\n\r\n", 4) == 0) {
			end = buf + i + 4;
			break;
		}
	if (end == NULL) {
		if (len < max)
			return 0;
		return sbx_err_set(err, SBX_E_RUNTIME, "The browser's answer "
		    "has no end of head within %zu bytes.", max);
	}
	/* "HTTP/1.x NNN ..." (RFC 9112 §4) */
	if ((size_t)(end - buf) < 12 || memcmp(buf, "HTTP/1.", 7) != 0 ||
	    buf[8] != ' ' || (sp = buf + 9, sp[0] < '1' || sp[0] > '5') ||
	    sp[1] < '0' || sp[1] > '9' || sp[2] < '0' || sp[2] > '9' ||
	    (sp[3] != ' ' && sp[3] != '\r'))
		return sbx_err_set(err, SBX_E_RUNTIME, "The browser's answer "
		    "is not HTTP/1.1.");
	*status = (sp[0] - '0') * 100 + (sp[1] - '0') * 10 + (sp[2] - '0');
	*head_len = (size_t)(end - buf);
	head_value(buf, end, "Content-Length", cl, sizeof(cl));
	*clen = -1;
	if (cl[0] != '\0') {
		for (i = 0; cl[i] != '\0'; i++) {
			if (cl[i] < '0' || cl[i] > '9' || i >= 10)
				return sbx_err_set(err, SBX_E_RUNTIME, "The "
				    "browser's answer has a bad Content-Length.");
			v = v * 10 + (cl[i] - '0');
		}
		if (v >= 0x7fffffffL)
			return sbx_err_set(err, SBX_E_RUNTIME, "The browser's "
			    "answer has a bad Content-Length.");
		*clen = v;
	}
	head_value(buf, end, "Upgrade", upgrade, cap);
	head_value(buf, end, "Connection", connection, cap);
	head_value(buf, end, "Sec-WebSocket-Accept", accept, cap);
	return 1;
}

int
api_cdp_pick_page(const char *body, size_t len, char *id, size_t cap,
    struct sbx_err *err)
{
	json_t *a, *t;
	const char *type, *tid;
	size_t i, n;

	a = json_loadb(body, len, JSON_REJECT_DUPLICATES, NULL);
	if (!json_is_array(a)) {
		json_decref(a);
		return sbx_err_set(err, SBX_E_RUNTIME, "The browser's list of "
		    "targets is not a JSON array.");
	}
	json_array_foreach(a, i, t) {
		type = json_string_value(json_object_get(t, "type"));
		if (type == NULL || strcmp(type, "page") != 0)
			continue;
		tid = json_string_value(json_object_get(t, "id"));
		n = tid != NULL ? strlen(tid) : 0;
		if (n == 0 || n > API_CDP_ID_MAX || n >= cap ||
		    strspn(tid, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
		    "0123456789_-") != n) {
			json_decref(a);
			return sbx_err_set(err, SBX_E_RUNTIME, "The browser's "
			    "page target has an id that is not [A-Za-z0-9_-]{1,%d}.",
			    API_CDP_ID_MAX);
		}
		memcpy(id, tid, n + 1);
		json_decref(a);
		return 0;
	}
	json_decref(a);
	return sbx_err_set(err, SBX_E_NOT_FOUND, "The browser in this sandbox "
	    "has no page open.");
}

static unsigned
be32(const unsigned char *p)
{
	return (unsigned)p[0] << 24 | (unsigned)p[1] << 16 |
	    (unsigned)p[2] << 8 | p[3];
}

/* Width and height of a JPEG's first frame header (0, 0: none found). */
static void
jpeg_size(const unsigned char *p, size_t n, unsigned *w, unsigned *h)
{
	size_t i = 2, seg;
	unsigned char m;

	*w = *h = 0;
	while (i + 4 <= n) {
		if (p[i] != 0xff)
			return;
		while (i < n && p[i] == 0xff)
			i++;
		if (i >= n)
			return;
		m = p[i++];
		if ((m >= 0xd0 && m <= 0xd7) || m == 0x01)
			continue;
		if (m == 0xda || m == 0xd9 || i + 2 > n)
			return;
		seg = (size_t)p[i] << 8 | p[i + 1];
		if (seg < 2)
			return;
		if (m >= 0xc0 && m <= 0xcf && m != 0xc4 && m != 0xc8 &&
		    m != 0xcc) {
			if (i + 7 > n || seg < 7)
				return;
			*h = (unsigned)p[i + 3] << 8 | p[i + 4];
			*w = (unsigned)p[i + 5] << 8 | p[i + 6];
			return;
		}
		i += seg;
	}
}

int
api_cdp_image_decode(const char *b64, size_t n, size_t max,
    enum api_cdp_image kind, unsigned char **out, size_t *outlen,
    unsigned *w, unsigned *h, struct sbx_err *err)
{
	static const unsigned char sig[8] = { 0x89, 'P', 'N', 'G', '\r', '\n',
	    0x1a, '\n' };
	const char *what = kind == API_CDP_PNG ? "PNG" : "JPEG";
	unsigned char *p;
	size_t cap = n / 4 * 3, len = 0;

	*out = NULL;
	*outlen = 0;
	*w = *h = 0;
	if (n % 4 != 0)
		return sbx_err_set(err, SBX_E_RUNTIME, "The browser's %s is not "
		    "base64.", what);
	if (cap > max + 2)
		return sbx_err_set(err, SBX_E_TOO_LARGE, "The browser's %s is "
		    "over %zu bytes.", what, max);
	if ((p = malloc(cap > 0 ? cap : 1)) == NULL)
		return sbx_err_oom(err);
	if (sodium_base642bin(p, cap, b64, n, NULL, &len, NULL,
	    sodium_base64_VARIANT_ORIGINAL) != 0) {
		free(p);
		return sbx_err_set(err, SBX_E_RUNTIME, "The browser's %s is not "
		    "base64.", what);
	}
	if (len > max) {
		free(p);
		return sbx_err_set(err, SBX_E_TOO_LARGE, "The browser's %s is "
		    "over %zu bytes.", what, max);
	}
	if (kind == API_CDP_PNG) {
		if (len < 33 || memcmp(p, sig, 8) != 0 || be32(p + 8) != 13 ||
		    memcmp(p + 12, "IHDR", 4) != 0) {
			free(p);
			return sbx_err_set(err, SBX_E_RUNTIME, "The browser's "
			    "screenshot is not a PNG.");
		}
		*w = be32(p + 16);
		*h = be32(p + 20);
		if (*w == 0 || *h == 0 || *w > 32767 || *h > 32767) {
			free(p);
			*w = *h = 0;
			return sbx_err_set(err, SBX_E_RUNTIME, "The browser's "
			    "PNG has a bad size.");
		}
	} else {
		if (len < 4 || p[0] != 0xff || p[1] != 0xd8 || p[2] != 0xff) {
			free(p);
			return sbx_err_set(err, SBX_E_RUNTIME, "The browser's "
			    "frame is not a JPEG.");
		}
		jpeg_size(p, len, w, h);
	}
	*out = p;
	*outlen = len;
	return 0;
}
