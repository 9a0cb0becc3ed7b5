/* sbx_wire.c - every broker API body, encoded and decoded in both directions (contract in sbx_wire.h). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>
#include <sodium.h>

#include "sbx_ndjson.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_usage.h"
#include "sbx_wire.h"

const char *const sbx_wire_spec_fields[] = { "image", "egress", "egress_allow",
    "memory_bytes", "nano_cpus", "pids", NULL };
const char *const sbx_wire_exec_fields[] = { "argv", "cwd", "env", "stdin",
    "timeout_ms", "output_cap", NULL };

const char *
sbx_state_name(enum sbx_state st)
{
	switch (st) {
	case SBX_STATE_RUNNING:
		return "running";
	case SBX_STATE_STOPPED:
		return "stopped";
	case SBX_STATE_ABSENT:
		break;
	}
	return "absent";
}

static int
oom(struct sbx_err *err)
{
	return sbx_err_oom(err);
}

/* ------------------------------------------------------------------ */
/* Request bodies                                                      */

int
sbx_wire_fields_check(const json_t *obj, const char *const *allowed,
    struct sbx_err *err)
{
	const char *key;
	json_t *v;
	size_t i;

	if (!json_is_object(obj))
		return sbx_err_set(err, SBX_E_BAD_REQUEST,
		    SBX_MSG_BODY_NOT_OBJECT);
	json_object_foreach((json_t *)obj, key, v) {
		char shown[64];

		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(key, allowed[i]) == 0)
				break;
		if (allowed[i] != NULL)
			continue;
		/* Name the field, but only a bounded, printable part. */
		for (i = 0; key[i] != '\0' && i < sizeof(shown) - 1; i++)
			shown[i] = (key[i] >= 0x20 && key[i] < 0x7f) ? key[i] : '?';
		shown[i] = '\0';
		return sbx_err_set(err, SBX_E_UNKNOWN_FIELD, "Field \"%s\" is not "
		    "accepted here.", shown);
	}
	return 0;
}

int
sbx_wire_body_object(const char *buf, size_t len, const char *const *allowed,
    int empty_ok, json_t **out, struct sbx_err *err)
{
	json_error_t jerr;
	json_t *obj;

	*out = NULL;
	if (len == 0 && empty_ok) {
		if ((*out = json_object()) == NULL)
			return oom(err);
		return 0;
	}
	if (len == 0)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "A JSON body is "
		    "required.");
	obj = json_loadb(buf, len, JSON_REJECT_DUPLICATES, &jerr);
	if (obj == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The body is not valid "
		    "JSON (line %d, column %d).", jerr.line, jerr.column);
	if (sbx_wire_fields_check(obj, allowed, err) == -1) {
		json_decref(obj);
		return -1;
	}
	*out = obj;
	return 0;
}

/* An optional integer member >= 0 into *out (0 when absent). */
static int
opt_nonneg(const json_t *obj, const char *name, int64_t *out,
    struct sbx_err *err)
{
	json_t *v = json_object_get(obj, name);

	*out = 0;
	if (v == NULL)
		return 0;
	if (!json_is_integer(v))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"%s\" must be "
		    "an integer.", name);
	if (json_integer_value(v) < 0)
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"%s\" must not "
		    "be negative.", name);
	*out = json_integer_value(v);
	return 0;
}

/* A JSON string without NUL, or NULL with err. */
static const char *
plain_string(const json_t *v, const char *name, struct sbx_err *err)
{
	if (!json_is_string(v)) {
		sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"%s\" must be a "
		    "string.", name);
		return NULL;
	}
	if (strlen(json_string_value(v)) != json_string_length(v)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "Field \"%s\" contains a NUL "
		    "character.", name);
		return NULL;
	}
	return json_string_value(v);
}

int
sbx_wire_spec_decode(const json_t *body, const char *const *allowlist,
    struct sbx_spec *spec, struct sbx_err *err)
{
	const char *str;
	json_t *v;
	size_t i;

	memset(spec, 0, sizeof(*spec));
	if (!json_is_object(body))
		return sbx_err_set(err, SBX_E_BAD_REQUEST,
		    SBX_MSG_BODY_NOT_OBJECT);
	if ((v = json_object_get(body, "image")) != NULL) {
		if ((str = plain_string(v, "image", err)) == NULL)
			goto fail;
		spec->image = str;
		for (i = 0; allowlist != NULL && allowlist[i] != NULL; i++)
			if (strcmp(allowlist[i], str) == 0)
				break;
		if (allowlist != NULL && allowlist[i] == NULL) {
			sbx_err_set(err, SBX_E_IMAGE_NOT_ALLOWED, "That image is "
			    "not in the broker's allowlist.");
			goto fail;
		}
	}
	if ((v = json_object_get(body, "egress")) == NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "Field \"egress\" is required "
		    "(true or false).");
		goto fail;
	}
	if (!json_is_boolean(v)) {
		sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"egress\" must be true "
		    "or false.");
		goto fail;
	}
	spec->egress = json_is_true(v);
	if (opt_nonneg(body, "memory_bytes", &spec->memory_bytes, err) == -1 ||
	    opt_nonneg(body, "nano_cpus", &spec->nano_cpus, err) == -1 ||
	    opt_nonneg(body, "pids", &spec->pids, err) == -1)
		goto fail;
	return 0;
fail:
	memset(spec, 0, sizeof(*spec));
	return -1;
}

json_t *
sbx_wire_spec_encode(const struct sbx_spec *spec)
{
	json_t *o = json_pack("{s:b}", "egress", spec != NULL && spec->egress);

	if (o == NULL || spec == NULL)
		return o;
	if ((spec->image != NULL && json_object_set_new(o, "image",
	    json_string(spec->image)) == -1) ||
	    (spec->memory_bytes > 0 && json_object_set_new(o, "memory_bytes",
	    json_integer(spec->memory_bytes)) == -1) ||
	    (spec->nano_cpus > 0 && json_object_set_new(o, "nano_cpus",
	    json_integer(spec->nano_cpus)) == -1) ||
	    (spec->pids > 0 && json_object_set_new(o, "pids",
	    json_integer(spec->pids)) == -1)) {
		json_decref(o);
		return NULL;
	}
	/* adr/0026: the allowlist, '\n'-joined in the spec, an array here. */
	if (spec->egress && spec->egress_allow != NULL) {
		const char *s = spec->egress_allow, *nl;
		json_t *a = json_array();

		if (a == NULL || json_object_set_new(o, "egress_allow", a) == -1) {
			json_decref(o);
			return NULL;
		}
		while (*s != '\0') {
			nl = strchr(s, '\n');
			if (json_array_append_new(a, json_stringn(s, nl != NULL ?
			    (size_t)(nl - s) : strlen(s))) == -1) {
				json_decref(o);
				return NULL;
			}
			s = nl != NULL ? nl + 1 : s + strlen(s);
		}
	}
	return o;
}

/* An environment name: [A-Za-z_][A-Za-z0-9_]*, len bytes. */
static int
env_name_ok(const char *name, size_t len)
{
	size_t i;

	if (len == 0 || (name[0] >= '0' && name[0] <= '9'))
		return 0;
	for (i = 0; i < len; i++)
		if (!((name[i] >= 'a' && name[i] <= 'z') ||
		    (name[i] >= 'A' && name[i] <= 'Z') ||
		    (name[i] >= '0' && name[i] <= '9') || name[i] == '_'))
			return 0;
	return 1;
}

/*
 * "env": {"K":"V"} or ["K=V"] into one block: the NULL-terminated vector,
 * then the strings. Two passes: check and size, then copy.
 */
static int
env_decode(const json_t *v, const char ***out, struct sbx_err *err)
{
	const char *key, *val;
	const char **vec;
	char *p;
	json_t *e;
	size_t i, n, bytes;
	int obj = json_is_object(v);

	*out = NULL;
	if (!obj && !json_is_array(v))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"env\" must be "
		    "an object of strings or an array of \"K=V\" strings.");
	n = obj ? json_object_size(v) : json_array_size(v);
	if (n > SBX_EXEC_ENV_MAX)
		return sbx_err_set(err, SBX_E_LIMIT_EXCEEDED, "Field \"env\" has "
		    "more than %d entries.", SBX_EXEC_ENV_MAX);
	bytes = (n + 1) * sizeof(*vec);
	if (obj) {
		json_object_foreach((json_t *)v, key, e) {
			if ((val = plain_string(e, "env", err)) == NULL)
				return -1;
			if (!env_name_ok(key, strlen(key)))
				return sbx_err_set(err, SBX_E_BAD_REQUEST, "Env names "
				    "are [A-Za-z_][A-Za-z0-9_]*.");
			bytes += strlen(key) + 1 + strlen(val) + 1;
		}
	} else {
		json_array_foreach(v, i, e) {
			if ((val = plain_string(e, "env", err)) == NULL)
				return -1;
			if (strchr(val, '=') == NULL ||
			    !env_name_ok(val, (size_t)(strchr(val, '=') - val)))
				return sbx_err_set(err, SBX_E_BAD_REQUEST, "Each env "
				    "entry must be \"NAME=value\", NAME "
				    "[A-Za-z_][A-Za-z0-9_]*.");
			bytes += strlen(val) + 1;
		}
	}
	if ((vec = calloc(1, bytes)) == NULL)
		return oom(err);
	p = (char *)(vec + n + 1);
	i = 0;
	if (obj) {
		json_object_foreach((json_t *)v, key, e) {
			vec[i++] = p;
			p += sprintf(p, "%s=%s", key, json_string_value(e)) + 1;
		}
	} else {
		size_t j;

		json_array_foreach(v, j, e) {
			vec[i++] = p;
			p += sprintf(p, "%s", json_string_value(e)) + 1;
		}
	}
	*out = vec;
	return 0;
}

void
sbx_wire_exec_free(struct sbx_wire_exec *x)
{
	if (x == NULL)
		return;
	free(x->argv);
	free(x->env);
	if (x->stdin_buf != NULL) {
		sodium_memzero(x->stdin_buf, x->req.stdin_len);
		free(x->stdin_buf);
	}
	memset(x, 0, sizeof(*x));
}

int
sbx_wire_exec_decode(const json_t *body, struct sbx_wire_exec *x,
    struct sbx_err *err)
{
	return sbx_wire_exec_decode_flags(body, 0, x, err);
}

int
sbx_wire_exec_decode_flags(const json_t *body, unsigned flags,
    struct sbx_wire_exec *x, struct sbx_err *err)
{
	const char *str;
	json_t *v, *e;
	size_t i, n, blen;

	memset(x, 0, sizeof(*x));
	if (!json_is_object(body))
		return sbx_err_set(err, SBX_E_BAD_REQUEST,
		    SBX_MSG_BODY_NOT_OBJECT);
	v = json_object_get(body, "argv");
	if ((flags & SBX_WIRE_ARGV_OPTIONAL) &&
	    (v == NULL || (json_is_array(v) && json_array_size(v) == 0)))
		goto rest;
	if (v == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Field \"argv\" is "
		    "required.");
	if (!json_is_array(v))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"argv\" must be "
		    "an array of strings.");
	if ((n = json_array_size(v)) == 0 || n > SBX_EXEC_ARGV_MAX)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Field \"argv\" must "
		    "hold 1 to %d strings.", SBX_EXEC_ARGV_MAX);
	if ((x->argv = calloc(n + 1, sizeof(*x->argv))) == NULL)
		return oom(err);
	json_array_foreach(v, i, e)
		if ((x->argv[i] = plain_string(e, "argv", err)) == NULL)
			goto fail;
	if (x->argv[0][0] == '\0') {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "argv[0] must not be empty.");
		goto fail;
	}
	x->req.argv = x->argv;
rest:
	if ((v = json_object_get(body, "cwd")) != NULL) {
		if ((str = plain_string(v, "cwd", err)) == NULL ||
		    sbx_path_check(str, strlen(str), err) == -1)
			goto fail;
		x->req.cwd = str;
	}
	if ((v = json_object_get(body, "env")) != NULL) {
		if (env_decode(v, &x->env, err) == -1)
			goto fail;
		x->req.env = x->env;
	}
	if ((v = json_object_get(body, "stdin")) != NULL) {
		if (!json_is_string(v)) {
			sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"stdin\" must be a "
			    "base64 string.");
			goto fail;
		}
		blen = json_string_length(v);
		if ((x->stdin_buf = malloc(blen / 4 * 3 + 3)) == NULL) {
			oom(err);
			goto fail;
		}
		if (sodium_base642bin(x->stdin_buf, blen / 4 * 3 + 3,
		    json_string_value(v), blen, NULL, &x->req.stdin_len, NULL,
		    sodium_base64_VARIANT_ORIGINAL) != 0) {
			sbx_err_set(err, SBX_E_BAD_REQUEST, "Field \"stdin\" is not "
			    "valid base64.");
			goto fail;
		}
		x->req.stdin_data = x->stdin_buf;
	}
	if (opt_nonneg(body, "timeout_ms", &x->req.timeout_ms, err) == -1 ||
	    opt_nonneg(body, "output_cap", &x->req.output_cap, err) == -1)
		goto fail;
	return 0;
fail:
	sbx_wire_exec_free(x);
	return -1;
}

/* A string member, -1 when s is not UTF-8 (json_string refuses it). */
static int
set_str(json_t *o, const char *k, const char *s)
{
	return json_object_set_new(o, k, json_string(s));
}

json_t *
sbx_wire_exec_encode(const struct sbx_exec_req *req, struct sbx_err *err)
{
	json_t *o = NULL, *arr;
	char *b64;
	size_t i, b64len;

	if (req == NULL || req->argv == NULL || req->argv[0] == NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_NO_ARGV);
		return NULL;
	}
	if ((o = json_object()) == NULL || (arr = json_array()) == NULL)
		goto oom;
	json_object_set_new(o, "argv", arr);
	for (i = 0; req->argv[i] != NULL; i++)
		if (json_array_append_new(arr, json_string(req->argv[i])) == -1)
			goto notutf8;
	if (req->cwd != NULL && set_str(o, "cwd", req->cwd) == -1)
		goto notutf8;
	if (req->env != NULL) {
		if ((arr = json_array()) == NULL)
			goto oom;
		json_object_set_new(o, "env", arr);
		for (i = 0; req->env[i] != NULL; i++)
			if (json_array_append_new(arr, json_string(req->env[i])) ==
			    -1)
				goto notutf8;
	}
	if (req->stdin_data != NULL) {
		b64len = sodium_base64_ENCODED_LEN(req->stdin_len,
		    sodium_base64_VARIANT_ORIGINAL);
		if ((b64 = malloc(b64len)) == NULL)
			goto oom;
		sodium_bin2base64(b64, b64len, req->stdin_data, req->stdin_len,
		    sodium_base64_VARIANT_ORIGINAL);
		i = (size_t)set_str(o, "stdin", b64);
		sodium_memzero(b64, b64len);
		free(b64);
		if (i != 0)
			goto oom;
	}
	if ((req->timeout_ms > 0 && json_object_set_new(o, "timeout_ms",
	    json_integer(req->timeout_ms)) == -1) ||
	    (req->output_cap > 0 && json_object_set_new(o, "output_cap",
	    json_integer(req->output_cap)) == -1))
		goto oom;
	return o;
notutf8:
	json_decref(o);
	sbx_err_set(err, SBX_E_BAD_REQUEST, "argv, cwd and env must be UTF-8 "
	    "text.");
	return NULL;
oom:
	json_decref(o);
	oom(err);
	return NULL;
}

int
sbx_wire_mode_decode(const char *s, uint32_t *mode, struct sbx_err *err)
{
	unsigned long m;
	char *end;

	errno = 0;
	m = strtoul(s, &end, 8);
	if (s[0] < '0' || s[0] > '7' || strlen(s) > 4 || *end != '\0' ||
	    errno != 0 || m > 0777)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Parameter \"mode\" "
		    "must be octal permission bits such as 0644.");
	*mode = (uint32_t)m;
	return 0;
}

char *
sbx_wire_mode_encode(uint32_t mode, char out[8])
{
	snprintf(out, 8, "%04o", (unsigned)(mode & 07777));
	return out;
}

/* ------------------------------------------------------------------ */
/* Replies                                                             */

json_t *
sbx_wire_error_encode(const char *code, const char *message)
{
	return json_pack("{s:{s:s,s:s}}", "error", "code",
	    code != NULL && code[0] != '\0' ? code : SBX_E_INTERNAL, "message",
	    message != NULL ? message : "");
}

int
sbx_wire_error_decode(const char *buf, size_t len, struct sbx_err *out)
{
	json_t *root = NULL, *code, *msg;
	int rc = -1;

	sbx_err_clear(out);
	if (len > 0)
		root = json_loadb(buf, len, 0, NULL);
	code = json_object_get(json_object_get(root, "error"), "code");
	msg = json_object_get(json_object_get(root, "error"), "message");
	if (json_is_string(code) && json_string_length(code) > 0 &&
	    json_string_length(code) < sizeof(out->code)) {
		snprintf(out->code, sizeof(out->code), "%s",
		    json_string_value(code));
		snprintf(out->message, sizeof(out->message), "%s",
		    json_is_string(msg) ? json_string_value(msg) : out->code);
		rc = 0;
	}
	json_decref(root);
	return rc;
}

json_t *
sbx_wire_status_encode(const struct sbx_status *st, int with_usage)
{
	int absent = st->state == SBX_STATE_ABSENT;
	json_t *o;

	o = json_pack("{s:s,s:s,s:s?,s:b,s:o,s:o,s:s?}",
	    "id", st->id,
	    "state", sbx_state_name(st->state),
	    "image", absent ? NULL : st->image,
	    "egress", absent ? 0 : st->egress,
	    "created_at", !absent && st->created_at_ms > 0 ?
	    json_integer(st->created_at_ms) : json_null(),
	    "last_used_at", st->last_used_at_ms > 0 ?
	    json_integer(st->last_used_at_ms) : json_null(),
	    "stop_reason", !absent && st->stop_reason[0] != '\0' ?
	    st->stop_reason : NULL);
	if (o != NULL && with_usage &&
	    json_object_set_new(o, "usage", sbx_usage_json(&st->usage)) == -1) {
		json_decref(o);
		return NULL;
	}
	if (o != NULL && st->quota.present &&
	    json_object_set_new(o, "quota", sbx_quota_json(&st->quota)) == -1) {
		json_decref(o);
		return NULL;
	}
	return o;
}

static int64_t
int_member(const json_t *o, const char *k)
{
	json_t *v = json_object_get(o, k);

	return json_is_integer(v) ? (int64_t)json_integer_value(v) : 0;
}

static void
str_member(const json_t *o, const char *k, char *dst, size_t cap)
{
	json_t *v = json_object_get(o, k);

	snprintf(dst, cap, "%s", json_is_string(v) ? json_string_value(v) : "");
}

int
sbx_wire_status_decode(const json_t *o, struct sbx_status *st,
    struct sbx_err *err)
{
	const char *state;
	json_t *u;

	memset(st, 0, sizeof(*st));
	if (!json_is_object(o) || !json_is_string(json_object_get(o, "state")))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Not a status object.");
	str_member(o, "id", st->id, sizeof(st->id));
	state = json_string_value(json_object_get(o, "state"));
	if (strcmp(state, "running") == 0)
		st->state = SBX_STATE_RUNNING;
	else if (strcmp(state, "stopped") == 0)
		st->state = SBX_STATE_STOPPED;
	else
		st->state = SBX_STATE_ABSENT;
	str_member(o, "image", st->image, sizeof(st->image));
	st->egress = json_is_true(json_object_get(o, "egress"));
	st->created_at_ms = int_member(o, "created_at");
	st->last_used_at_ms = int_member(o, "last_used_at");
	str_member(o, "stop_reason", st->stop_reason, sizeof(st->stop_reason));
	if ((u = json_object_get(o, "usage")) != NULL &&
	    sbx_usage_from_json(u, &st->usage, err) == -1) {
		memset(st, 0, sizeof(*st));
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The status holds a "
		    "bad usage object.");
	}
	if ((u = json_object_get(o, "quota")) != NULL &&
	    sbx_quota_from_json(u, &st->quota, err) == -1) {
		memset(st, 0, sizeof(*st));
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "The status holds a "
		    "bad quota object.");
	}
	return 0;
}

int
sbx_wire_sandboxes_decode(const json_t *arr, struct sbx_status **sts,
    size_t *n, struct sbx_err *err)
{
	json_t *v;
	size_t i;

	*sts = NULL;
	*n = 0;
	if (!json_is_array(arr))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Not a list of "
		    "sandboxes.");
	if ((*sts = calloc(json_array_size(arr) + 1, sizeof(**sts))) == NULL)
		return oom(err);
	/* each entry names its sandbox: an id the rule refuses is a
	 * malformed answer (found by fuzzing) */
	json_array_foreach(arr, i, v)
		if (sbx_wire_status_decode(v, &(*sts)[i], err) == -1 ||
		    !sbx_id_valid((*sts)[i].id)) {
			free(*sts);
			*sts = NULL;
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "A sandbox of "
			    "the list is malformed.");
		}
	*n = json_array_size(arr);
	return 0;
}

json_t *
sbx_wire_dirents_encode(const struct sbx_dirent *ents, size_t n)
{
	char b64[sodium_base64_ENCODED_LEN(sizeof(ents[0].name),
	    sodium_base64_VARIANT_ORIGINAL)];
	json_t *arr, *o;
	size_t i, nl;
	int text;

	if ((arr = json_array()) == NULL)
		return NULL;
	for (i = 0; i < n; i++) {
		nl = strnlen(ents[i].name, sizeof(ents[i].name));
		text = sbx_utf8_valid((const unsigned char *)ents[i].name, nl);
		/* A name that is not UTF-8 cannot be a JSON string. */
		if (!text)
			sodium_bin2base64(b64, sizeof(b64),
			    (const unsigned char *)ents[i].name, nl,
			    sodium_base64_VARIANT_ORIGINAL);
		o = json_pack("{s:s,s:s,s:I,s:I,s:I}", text ? "name" : "name_b64",
		    text ? ents[i].name : b64,
		    "type", ents[i].type != NULL ? ents[i].type : "other",
		    "size", (json_int_t)ents[i].size,
		    "mode", (json_int_t)ents[i].mode,
		    "mtime", (json_int_t)ents[i].mtime);
		if (o == NULL || json_array_append_new(arr, o) == -1) {
			json_decref(arr);
			return NULL;
		}
	}
	return arr;
}

size_t
sbx_wire_cursor_encode(const char *name, char *out, size_t cap)
{
	size_t nl = name != NULL ? strnlen(name, SBX_PATH_SEGMENT_MAX + 1) : 0;

	if (cap == 0)
		return 0;
	out[0] = '\0';
	if (nl == 0 || nl > SBX_PATH_SEGMENT_MAX ||
	    cap < sodium_base64_ENCODED_LEN(nl,
	    sodium_base64_VARIANT_URLSAFE_NO_PADDING))
		return 0;
	sodium_bin2base64(out, cap, (const unsigned char *)name, nl,
	    sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	return strlen(out);
}

int
sbx_wire_cursor_decode(const char *cur, size_t len, char *name,
    struct sbx_err *err)
{
	size_t nl = 0;

	name[0] = '\0';
	if (len == 0)
		return 0;
	if (len > SBX_WIRE_CURSOR_MAX || sodium_base642bin((unsigned char *)name,
	    SBX_PATH_SEGMENT_MAX, cur, len, NULL, &nl, NULL,
	    sodium_base64_VARIANT_URLSAFE_NO_PADDING) != 0 || nl == 0 ||
	    memchr(name, '\0', nl) != NULL || memchr(name, '/', nl) != NULL) {
		name[0] = '\0';
		return sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_BAD_CURSOR);
	}
	name[nl] = '\0';
	return 0;
}

char *
sbx_wire_dirents_text(const struct sbx_dirent *ents, size_t n)
{
	json_t *arr = sbx_wire_dirents_encode(ents, n);
	char *t = arr != NULL ? json_dumps(arr, JSON_COMPACT) : NULL;
	size_t len;

	json_decref(arr);
	if (t == NULL)
		return NULL;
	/* "[e,...]" -> "e,..." */
	len = strlen(t);
	memmove(t, t + 1, len - 2);
	t[len - 2] = '\0';
	return t;
}

json_t *
sbx_wire_list_encode(const struct sbx_dirent *ents, size_t n, int truncated)
{
	char cursor[SBX_WIRE_CURSOR_MAX + 1];
	json_t *arr;

	if ((arr = sbx_wire_dirents_encode(ents, n)) == NULL)
		return NULL;
	/* The cursor names the last entry: the next page starts after it. */
	cursor[0] = '\0';
	if (truncated && n > 0)
		sbx_wire_cursor_encode(ents[n - 1].name, cursor, sizeof(cursor));
	return json_pack("{s:o,s:b,s:s?}", "entries", arr, "truncated",
	    truncated && n > 0, "cursor", cursor[0] != '\0' ? cursor : NULL);
}

/* "file", "dir", "symlink" or "other": the static names of sbx_dirent. */
static const char *
dirent_type(const json_t *x)
{
	static const char *const types[] = { "file", "dir", "symlink", NULL };
	size_t i;

	for (i = 0; json_is_string(x) && types[i] != NULL; i++)
		if (strcmp(json_string_value(x), types[i]) == 0)
			return types[i];
	return "other";
}

void
sbx_wire_dirent_decode(const json_t *v, struct sbx_dirent *e)
{
	json_t *x;
	size_t blen;

	memset(e, 0, sizeof(*e));
	e->type = dirent_type(json_object_get(v, "type"));
	e->size = int_member(v, "size");
	e->mode = (uint32_t)int_member(v, "mode");
	e->mtime = int_member(v, "mtime");
	if (json_is_string(x = json_object_get(v, "name")))
		snprintf(e->name, sizeof(e->name), "%s", json_string_value(x));
	else if (json_is_string(x = json_object_get(v, "name_b64")) &&
	    sodium_base642bin((unsigned char *)e->name, sizeof(e->name) - 1,
	    json_string_value(x), json_string_length(x), NULL, &blen, NULL,
	    sodium_base64_VARIANT_ORIGINAL) == 0)
		e->name[blen] = '\0';
	else
		e->name[0] = '\0';
}

int
sbx_wire_list_decode(const json_t *root, struct sbx_dirent **ents, size_t *n,
    int *truncated, struct sbx_err *err)
{
	const json_t *list;
	json_t *v;
	struct sbx_dirent *e;
	size_t i;

	*ents = NULL;
	*n = 0;
	*truncated = 0;
	/* The page object (?cursor= is always sent); a broker before
	 * adr/0013 answers the bare array. */
	list = json_is_array(root) ? root : json_object_get(root, "entries");
	if (!json_is_array(list))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Not a directory "
		    "listing.");
	if ((e = calloc(json_array_size(list) + 1, sizeof(*e))) == NULL)
		return oom(err);
	json_array_foreach(list, i, v)
		sbx_wire_dirent_decode(v, &e[i]);
	*truncated = json_is_true(json_object_get(root, "truncated"));
	*ents = e;
	*n = json_array_size(list);
	return 0;
}

json_t *
sbx_wire_health_encode(const struct sbx_health *h, const char *version,
    const char *driver)
{
	int ok = h != NULL && h->ok;

	return json_pack("{s:s,s:s?,s:s?,s:s?,s:s,s:s}",
	    "status", ok ? "ok" : "degraded",
	    "reason", ok || h == NULL ? NULL : h->reason,
	    "runtime", h != NULL && h->runtime[0] ? h->runtime : NULL,
	    "api_version", h != NULL && h->api_version[0] ? h->api_version : NULL,
	    "version", version != NULL ? version : "",
	    "driver", driver != NULL ? driver : "");
}

int
sbx_wire_health_decode(const json_t *o, struct sbx_health *h,
    struct sbx_err *err)
{
	memset(h, 0, sizeof(*h));
	if (!json_is_object(o))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Not a health object.");
	str_member(o, "status", h->status, sizeof(h->status));
	str_member(o, "reason", h->reason, sizeof(h->reason));
	str_member(o, "runtime", h->runtime, sizeof(h->runtime));
	str_member(o, "api_version", h->api_version, sizeof(h->api_version));
	h->ok = strcmp(h->status, "ok") == 0;
	return 0;
}

json_t *
sbx_wire_written_encode(const char *path, int64_t size)
{
	return json_pack("{s:s,s:I}", "path", path, "size", (json_int_t)size);
}
