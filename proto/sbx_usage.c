/* sbx_usage.c - /work usage to and from JSON; the ?usage= query flag. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_usage.h"

json_t *
sbx_usage_json(const struct sbx_usage *u)
{
	json_t *o;

	if (u == NULL || !u->present)
		return json_null();
	o = json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:b}",
	    "bytes", (json_int_t)u->bytes,
	    "apparent_bytes", (json_int_t)u->apparent_bytes,
	    "files", (json_int_t)u->files,
	    "dirs", (json_int_t)u->dirs,
	    "entries", (json_int_t)u->entries,
	    "elapsed_ms", (json_int_t)u->elapsed_ms,
	    "partial", u->partial);
	if (o != NULL && u->partial && u->partial_reason[0] != '\0')
		json_object_set_new(o, "partial_reason",
		    json_string(u->partial_reason));
	return o;
}

json_t *
sbx_quota_json(const struct sbx_quota *q)
{
	if (q == NULL || !q->present)
		return json_null();
	return json_pack("{s:I,s:o,s:o}", "bytes", (json_int_t)q->bytes,
	    "used", q->used >= 0 ? json_integer(q->used) : json_null(),
	    "age_ms", q->age_ms >= 0 ? json_integer(q->age_ms) : json_null());
}

/* An integer >= 0 or null (-1) at key of o into *v; -1 when neither. */
static int
int_or_null(const json_t *o, const char *key, int64_t *v)
{
	const json_t *m = json_object_get(o, key);

	if (json_is_null(m)) {
		*v = -1;
		return 0;
	}
	if (!json_is_integer(m) || json_integer_value(m) < 0)
		return -1;
	*v = json_integer_value(m);
	return 0;
}

int
sbx_quota_from_json(const json_t *o, struct sbx_quota *q, struct sbx_err *err)
{
	const json_t *b;

	memset(q, 0, sizeof(*q));
	if (json_is_null(o))
		return 0;
	b = json_object_get(o, "bytes");
	if (!json_is_object(o) || !json_is_integer(b) ||
	    json_integer_value(b) <= 0 || int_or_null(o, "used", &q->used) ||
	    int_or_null(o, "age_ms", &q->age_ms)) {
		memset(q, 0, sizeof(*q));
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "not a quota object");
	}
	q->bytes = json_integer_value(b);
	q->present = 1;
	return 0;
}

int
sbx_usage_from_json(const json_t *o, struct sbx_usage *u, struct sbx_err *err)
{
	static const char *const ints[] = { "bytes", "apparent_bytes", "files",
	    "dirs", "entries", "elapsed_ms", NULL };
	static const char *const reasons[] = { "max_entries", "timeout",
	    "unreadable", NULL };
	int64_t *dst[6];
	const json_t *v;
	const char *why;
	size_t i;

	memset(u, 0, sizeof(*u));
	if (json_is_null(o))
		return 0;
	if (!json_is_object(o))
		goto bad;
	dst[0] = &u->bytes;
	dst[1] = &u->apparent_bytes;
	dst[2] = &u->files;
	dst[3] = &u->dirs;
	dst[4] = &u->entries;
	dst[5] = &u->elapsed_ms;
	for (i = 0; ints[i] != NULL; i++) {
		v = json_object_get(o, ints[i]);
		if (!json_is_integer(v) || json_integer_value(v) < 0)
			goto bad;
		*dst[i] = json_integer_value(v);
	}
	v = json_object_get(o, "partial");
	if (!json_is_boolean(v))
		goto bad;
	u->partial = json_is_true(v);
	if (u->partial) {
		why = json_string_value(json_object_get(o, "partial_reason"));
		for (i = 0; why != NULL && reasons[i] != NULL; i++)
			if (strcmp(why, reasons[i]) == 0)
				break;
		if (why == NULL || reasons[i] == NULL)
			goto bad;
		snprintf(u->partial_reason, sizeof(u->partial_reason), "%s", why);
	}
	u->present = 1;
	return 0;
bad:
	memset(u, 0, sizeof(*u));
	return sbx_err_set(err, SBX_E_RUNTIME, "not a usage object");
}

int
sbx_query_flag(const char *query, const char *name, struct sbx_err *err)
{
	char *v = NULL;
	size_t n = 0;
	int r;

	if (query == NULL)
		return 0;
	switch (sbx_query_param(query, name, &v, &n, err)) {
	case -1:
		return -1;
	case 0:
		return 0;
	default:
		break;
	}
	r = n != 1 ? -1 : v[0] == '1' ? 1 : v[0] == '0' ? 0 : -1;
	free(v);
	if (r < 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Parameter \"%s\" must "
		    "be 1 or 0.", name);
	return r;
}
