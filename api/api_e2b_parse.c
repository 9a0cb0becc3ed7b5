/* api_e2b_parse.c - what the E2B control plane reads and how its errors look: members, filters, templates, Host names (pure functions, no server; adr/0059). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <jansson.h>

#include "api_e2b_int.h"
#include "sbx_proto.h"

int
api_e2b_string_map(const json_t *v, const char *member, long long max,
    char **out, struct sbx_err *err)
{
	const char *k;
	json_t *x;
	char *text;

	*out = NULL;
	if (v == NULL || json_is_null(v)) {
		if ((*out = strdup("{}")) == NULL)
			return sbx_err_oom(err);
		return 0;
	}
	if (!json_is_object(v))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Member \"%s\" must "
		    "be an object of strings.", member);
	json_object_foreach((json_t *)v, k, x)
		if (!json_is_string(x) || k[0] == '\0' ||
		    strlen(json_string_value(x)) != json_string_length(x))
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "Member "
			    "\"%s\" must be an object of strings (names not "
			    "empty, no NUL).", member);
	if ((text = json_dumps(v, JSON_COMPACT | JSON_SORT_KEYS)) == NULL)
		return sbx_err_oom(err);
	if ((long long)strlen(text) > max) {
		free(text);
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Member \"%s\" is "
		    "larger than %lld bytes as JSON (e2b_%s_max).", member, max,
		    strcmp(member, "metadata") == 0 ? "metadata" : "envs");
	}
	*out = text;
	return 0;
}

int
api_e2b_timeout(const json_t *v, long long def_ms, long long max_ms,
    int64_t *ms, struct sbx_err *err)
{
	json_int_t t;

	if (v == NULL || json_is_null(v)) {
		*ms = def_ms;
		return 0;
	}
	if (!json_is_integer(v) || (t = json_integer_value(v)) < 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Member \"timeout\" "
		    "must be a whole number of seconds, 0 or more.");
	if (t > max_ms / 1000)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The timeout is at "
		    "most %lld seconds here (e2b_timeout_max).", max_ms / 1000);
	*ms = (int64_t)t * 1000;
	return 0;
}

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* Percent-decodes p (n bytes; '+' is a space, as a form's) into a new
 * string; NULL when malformed, holding a NUL, or out of memory. */
static char *
unescape(const char *p, size_t n)
{
	char *o = malloc(n + 1);
	size_t i, j = 0;
	int h, l;

	if (o == NULL)
		return NULL;
	for (i = 0; i < n; i++) {
		if (p[i] == '+')
			o[j++] = ' ';
		else if (p[i] != '%')
			o[j++] = p[i];
		else if (i + 2 < n && (h = hexval((unsigned char)p[i + 1])) >= 0 &&
		    (l = hexval((unsigned char)p[i + 2])) >= 0 && (h | l) != 0) {
			o[j++] = (char)(h << 4 | l);
			i += 2;
		} else {
			free(o);
			return NULL;
		}
	}
	o[j] = '\0';
	return o;
}

/* Decodes once more when the text still holds an escape (the SDK encodes
 * keys and values before URLSearchParams encodes the pair). */
static char *
unescape_twice(const char *p, size_t n)
{
	char *once = unescape(p, n), *twice;

	if (once == NULL || strchr(once, '%') == NULL)
		return once;
	twice = unescape(once, strlen(once));
	free(once);
	return twice;
}

int
api_e2b_metadata_filter(const char *q, json_t **out, struct sbx_err *err)
{
	const char *p = q, *amp, *eq;
	char *k = NULL, *v = NULL;
	json_t *o;

	*out = NULL;
	if ((o = json_object()) == NULL)
		return sbx_err_oom(err);
	while (p != NULL && *p != '\0') {
		amp = strchr(p, '&');
		if (amp == NULL)
			amp = p + strlen(p);
		eq = memchr(p, '=', (size_t)(amp - p));
		if (amp == p) {
			p = *amp != '\0' ? amp + 1 : amp;
			continue;
		}
		if (eq == NULL || eq == p ||
		    (k = unescape_twice(p, (size_t)(eq - p))) == NULL ||
		    (v = unescape_twice(eq + 1, (size_t)(amp - eq - 1))) == NULL ||
		    json_object_set_new(o, k, json_string(v)) == -1) {
			free(k);
			free(v);
			json_decref(o);
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "The metadata "
			    "filter must be key=value pairs joined by &, each "
			    "URL-encoded.");
		}
		free(k);
		free(v);
		k = v = NULL;
		p = *amp != '\0' ? amp + 1 : amp;
	}
	*out = o;
	return 0;
}

int
api_e2b_metadata_match(const char *metadata, const json_t *filter)
{
	json_t *md, *x;
	const char *k;
	json_t *want;
	int ok = 1;

	if (json_object_size(filter) == 0)
		return 1;
	if ((md = json_loads(metadata != NULL ? metadata : "{}", 0, NULL)) ==
	    NULL)
		return 0;
	json_object_foreach((json_t *)filter, k, want) {
		x = json_object_get(md, k);
		if (!json_is_string(x) || strcmp(json_string_value(x),
		    json_string_value(want)) != 0) {
			ok = 0;
			break;
		}
	}
	json_decref(md);
	return ok;
}

int
api_e2b_state_filter(const char *v, struct sbx_err *err)
{
	const char *p = v, *c;
	size_t n;
	int bits = 0;

	if (v == NULL || v[0] == '\0')
		return 3;
	while (*p != '\0') {
		c = p + strcspn(p, ",");
		n = (size_t)(c - p);
		if (n == 7 && strncmp(p, "running", 7) == 0)
			bits |= 1;
		else if (n == 6 && strncmp(p, "paused", 6) == 0)
			bits |= 2;
		else
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "The state "
			    "filter takes running and paused."), -1;
		p = *c != '\0' ? c + 1 : c;
	}
	return bits != 0 ? bits : 3;
}

int
api_e2b_template(char *const *list, const char *t, const char **image,
    size_t *imagelen)
{
	const char *eq;
	size_t n = strlen(t);

	for (; list != NULL && *list != NULL; list++) {
		if ((eq = strchr(*list, '=')) == NULL)
			continue;
		if ((size_t)(eq - *list) == n && strncmp(*list, t, n) == 0) {
			*image = eq + 1;
			*imagelen = strlen(eq + 1);
			return 1;
		}
	}
	return 0;
}

/* The name part of a host[:port] (n bytes): its length. */
static size_t
name_len(const char *h, size_t n)
{
	const char *c = memchr(h, ':', n);

	return c != NULL ? (size_t)(c - h) : n;
}

int
api_e2b_host_parse(const char *host, size_t hostlen, const char *domain,
    int *port, char *id, size_t idcap)
{
	size_t hn, dn, idn;
	const char *dash;
	long p = 0;
	size_t i;

	if (host == NULL || domain == NULL || domain[0] == '\0')
		return 0;
	hn = name_len(host, hostlen);
	dn = name_len(domain, strlen(domain));
	/* {port}-{id}.{domain}: at least "1-a." before the domain. */
	if (hn < dn + 4 || host[hn - dn - 1] != '.' ||
	    strncasecmp(host + hn - dn, domain, dn) != 0)
		return 0;
	if ((dash = memchr(host, '-', hn - dn - 1)) == NULL || dash == host ||
	    dash - host > 5)
		return 0;
	for (i = 0; host + i < dash; i++) {
		if (host[i] < '0' || host[i] > '9')
			return 0;
		p = p * 10 + (host[i] - '0');
	}
	if (p < 1 || p > 65535)
		return 0;
	idn = hn - dn - 1 - (size_t)(dash + 1 - host);
	if (idn == 0 || idn >= idcap)
		return 0;
	memcpy(id, dash + 1, idn);
	id[idn] = '\0';
	if (!api_npc_name_valid(id))
		return 0;
	*port = (int)p;
	return 1;
}

json_t *
api_e2b_error_json(const struct sbx_err *e, int status)
{
	return json_pack("{s:i,s:s}", "code", status, "message",
	    e->message[0] != '\0' ? e->message : e->code);
}

json_t *
api_e2b_envd_error_json(const struct sbx_err *e, int status)
{
	/* Connect protocol "Error Codes", HTTP to code. */
	static const struct {
		int status;
		const char *code;
	} map[] = {
		{ 400, "invalid_argument" }, { 401, "unauthenticated" },
		{ 403, "permission_denied" }, { 404, "not_found" },
		{ 408, "deadline_exceeded" }, { 409, "already_exists" },
		{ 413, "resource_exhausted" }, { 429, "resource_exhausted" },
		{ 501, "unimplemented" }, { 502, "unavailable" },
		{ 503, "unavailable" }, { 504, "unavailable" },
	};
	const char *code = "internal";
	size_t i;

	for (i = 0; i < sizeof(map) / sizeof(map[0]); i++)
		if (map[i].status == status)
			code = map[i].code;
	return json_pack("{s:s,s:s}", "code", code, "message",
	    e->message[0] != '\0' ? e->message : e->code);
}

void
api_e2b_time(int64_t ms, char *buf, size_t cap)
{
	time_t t = (time_t)(ms / 1000);
	struct tm tm;

	gmtime_r(&t, &tm);
	snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour,
	    tm.tm_min, tm.tm_sec, (int)(ms % 1000));
}
