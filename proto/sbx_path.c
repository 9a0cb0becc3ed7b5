/* sbx_path.c - sandbox id and /work path rules, query-string extraction decoded once. */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "sbx_path.h"
#include "sbx_proto.h"

int
sbx_id_valid(const char *id)
{
	size_t i;

	if (id == NULL)
		return 0;
	for (i = 0; id[i] != '\0'; i++) {
		unsigned char c = (unsigned char)id[i];

		if (i >= SBX_ID_MAX)
			return 0;
		if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'))
			continue;
		if (c == '-' && i > 0)
			continue;
		return 0;
	}
	return i > 0;
}

/*
 * Code points refused because a normaliser downstream could turn them into
 * '.' or '/'. Generated with Python 3 unicodedata (Unicode 14.0.0): every
 * code point >= 0x80 whose NFKC form contains '.' or '/', plus the slash
 * confusables U+2044, U+2215, U+2571, U+29F8 that NFKC leaves alone.
 */
static const struct {
	uint32_t lo, hi;
} lookalikes[] = {
	{ 0x2024, 0x2026 },   /* ONE DOT LEADER .. HORIZONTAL ELLIPSIS */
	{ 0x2044, 0x2044 },   /* FRACTION SLASH */
	{ 0x2100, 0x2101 },   /* ACCOUNT OF .. ADDRESSED TO THE SUBJECT */
	{ 0x2105, 0x2106 },   /* CARE OF .. CADA UNA */
	{ 0x2215, 0x2215 },   /* DIVISION SLASH */
	{ 0x2488, 0x249B },   /* DIGIT ONE FULL STOP .. NUMBER TWENTY FULL STOP */
	{ 0x2571, 0x2571 },   /* BOX DRAWINGS LIGHT DIAGONAL UPPER RIGHT TO LOWER LEFT */
	{ 0x29F8, 0x29F8 },   /* BIG SOLIDUS */
	{ 0x33C2, 0x33C2 },   /* SQUARE AM */
	{ 0x33C7, 0x33C7 },   /* SQUARE CO */
	{ 0x33D8, 0x33D8 },   /* SQUARE PM */
	{ 0xFE19, 0xFE19 },   /* PRESENTATION FORM FOR VERTICAL HORIZONTAL ELLIPSIS */
	{ 0xFE30, 0xFE30 },   /* PRESENTATION FORM FOR VERTICAL TWO DOT LEADER */
	{ 0xFE52, 0xFE52 },   /* SMALL FULL STOP */
	{ 0xFF0E, 0xFF0F },   /* FULLWIDTH FULL STOP .. FULLWIDTH SOLIDUS */
	{ 0x1F100, 0x1F100 }, /* DIGIT ZERO FULL STOP */
};

static int
is_lookalike(uint32_t cp)
{
	size_t i;

	for (i = 0; i < sizeof(lookalikes) / sizeof(lookalikes[0]); i++)
		if (cp >= lookalikes[i].lo && cp <= lookalikes[i].hi)
			return 1;
	return 0;
}

/*
 * Decodes one UTF-8 sequence at s (n bytes available). Returns its length
 * and stores the code point, or 0 for an invalid sequence (truncated,
 * overlong, surrogate, above U+10FFFF, stray continuation byte).
 */
static size_t
utf8_decode(const unsigned char *s, size_t n, uint32_t *cp)
{
	uint32_t c, min;
	size_t len, i;

	if (s[0] < 0x80) {
		*cp = s[0];
		return 1;
	} else if ((s[0] & 0xe0) == 0xc0) {
		len = 2, c = s[0] & 0x1f, min = 0x80;
	} else if ((s[0] & 0xf0) == 0xe0) {
		len = 3, c = s[0] & 0x0f, min = 0x800;
	} else if ((s[0] & 0xf8) == 0xf0) {
		len = 4, c = s[0] & 0x07, min = 0x10000;
	} else
		return 0;
	if (n < len)
		return 0;
	for (i = 1; i < len; i++) {
		if ((s[i] & 0xc0) != 0x80)
			return 0;
		c = (c << 6) | (s[i] & 0x3f);
	}
	if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff))
		return 0;
	*cp = c;
	return len;
}

static int
refuse(struct sbx_err *err, const char *why)
{
	return sbx_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "The path %s.", why);
}

int
sbx_path_check(const char *path, size_t len, struct sbx_err *err)
{
	const unsigned char *p = (const unsigned char *)path;
	size_t i, n, seg, wlen = sizeof(SBX_WORK_ROOT) - 1;
	uint32_t cp;

	if (path == NULL || len == 0)
		return refuse(err, "is empty: it must be absolute and under /work");
	if (len > SBX_PATH_MAX)
		return refuse(err, "is longer than 4096 bytes");
	if (memchr(path, '\0', len) != NULL)
		return refuse(err, "contains a NUL byte");
	for (i = 0; i < len; i += n) {
		if ((n = utf8_decode(p + i, len - i, &cp)) == 0)
			return refuse(err, "is not valid UTF-8");
		if (cp < 0x20 || cp == 0x7f || (cp >= 0x80 && cp <= 0x9f))
			return refuse(err, "contains a control character");
		if (is_lookalike(cp))
			return refuse(err, "contains a Unicode look-alike of '.' or '/'");
	}
	if (p[0] != '/')
		return refuse(err, "must be absolute (start with /work)");
	if (len < wlen || memcmp(path, SBX_WORK_ROOT, wlen) != 0 ||
	    (len > wlen && p[wlen] != '/'))
		return refuse(err, "must be /work or start with /work/");

	/* Walk the segments after the leading '/'; "/work" itself is one. */
	for (i = 1; i <= len; i = seg + 1) {
		for (seg = i; seg < len && p[seg] != '/'; seg++)
			;
		n = seg - i;
		if (n == 0)
			return refuse(err, "has an empty segment ('//' or a trailing '/')");
		if ((n == 1 && p[i] == '.') || (n == 2 && p[i] == '.' && p[i + 1] == '.'))
			return refuse(err, "has a '.' or '..' segment");
		if (n > SBX_PATH_SEGMENT_MAX)
			return refuse(err, "has a segment longer than 255 bytes");
	}
	return 0;
}

static int
hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

char *
sbx_percent_decode(const char *s, size_t len, int plus_is_space, size_t *outlen)
{
	char *out = NULL;
	size_t i, o = 0;
	int hi, lo;

	if ((out = malloc(len + 1)) == NULL)
		return NULL;
	for (i = 0; i < len; i++) {
		if (s[i] == '%') {
			if (len - i < 3)
				goto bad;
			if ((hi = hexval((unsigned char)s[i + 1])) < 0 ||
			    (lo = hexval((unsigned char)s[i + 2])) < 0)
				goto bad;
			out[o++] = (char)(hi << 4 | lo);
			i += 2;
		} else if (s[i] == '+' && plus_is_space)
			out[o++] = ' ';
		else
			out[o++] = s[i];
	}
	out[o] = '\0';
	if (outlen != NULL)
		*outlen = o;
	return out;
bad:
	free(out);
	errno = EINVAL;
	return NULL;
}

char *
sbx_query_encode(const char *s, size_t len)
{
	static const char hex[] = "0123456789ABCDEF";
	char *out = NULL;
	size_t i, o = 0;

	if (len > (SIZE_MAX - 1) / 3 || (out = malloc(len * 3 + 1)) == NULL)
		return NULL;
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)s[i];

		if ((c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
		    (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '_' ||
		    c == '~' || c == '/')
			out[o++] = (char)c;
		else {
			out[o++] = '%';
			out[o++] = hex[c >> 4];
			out[o++] = hex[c & 0xf];
		}
	}
	out[o] = '\0';
	return out;
}

int
sbx_query_param(const char *query, const char *name, char **out, size_t *outlen,
    struct sbx_err *err)
{
	const char *p, *amp, *eq;
	char *key = NULL, *val = NULL;
	size_t klen, vlen = 0;
	int found = 0;

	*out = NULL;
	if (outlen != NULL)
		*outlen = 0;
	if (query == NULL)
		return 0;
	for (p = query; *p != '\0'; p = *amp != '\0' ? amp + 1 : amp) {
		if ((amp = strchr(p, '&')) == NULL)
			amp = p + strlen(p);
		if (amp == p)
			continue;
		eq = memchr(p, '=', (size_t)(amp - p));
		if ((key = sbx_percent_decode(p, (size_t)((eq ? eq : amp) - p), 1,
		    &klen)) == NULL)
			goto decode_fail;
		if (klen != strlen(name) || memcmp(key, name, klen) != 0) {
			free(key);
			key = NULL;
			continue;
		}
		free(key);
		key = NULL;
		if (found) {
			sbx_err_set(err, SBX_E_BAD_REQUEST,
			    "The query parameter '%s' is given more than once.", name);
			goto fail;
		}
		found = 1;
		if (eq == NULL)
			val = sbx_percent_decode("", 0, 1, &vlen);
		else
			val = sbx_percent_decode(eq + 1, (size_t)(amp - eq - 1), 1, &vlen);
		if (val == NULL)
			goto decode_fail;
		*out = val;
		if (outlen != NULL)
			*outlen = vlen;
	}
	return found;

decode_fail:
	if (errno == ENOMEM)
		sbx_err_oom(err);
	else
		sbx_err_set(err, SBX_E_BAD_REQUEST,
		    "The query string has a '%%' not followed by two hex "
		    "digits.");
fail:
	free(key);
	free(*out);
	*out = NULL;
	if (outlen != NULL)
		*outlen = 0;
	return -1;
}

int
sbx_query_path(const char *query, const char *name, char **out, size_t *outlen,
    struct sbx_err *err)
{
	size_t len = 0;
	int r;

	if ((r = sbx_query_param(query, name, out, &len, err)) < 0)
		return -1;
	if (r == 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST,
		    "The query parameter '%s' is required.", name);
	if (sbx_path_check(*out, len, err) != 0) {
		free(*out);
		*out = NULL;
		return -1;
	}
	if (outlen != NULL)
		*outlen = len;
	return 0;
}
