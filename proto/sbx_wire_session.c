/* sbx_wire_session.c - the session request body of the broker API (POST /v1/sandboxes/{id}/session, adr/0050), both directions; contract in sbx_wire.h. Touches nothing but its arguments. */
#include <string.h>

#include <jansson.h>

#include "sbx_proto.h"
#include "sbx_wire.h"

const char *const sbx_wire_session_fields[] = { "kind", "argv", "cwd", "env",
    "timeout_ms", "output_cap", "cols", "rows", "term", "port", NULL };

/* Which members each kind takes besides "kind". */
static const char *const exec_members[] = { "argv", "cwd", "env",
    "timeout_ms", "output_cap", NULL };
static const char *const pty_members[] = { "argv", "cwd", "env",
    "timeout_ms", "output_cap", "cols", "rows", "term", NULL };
static const char *const port_members[] = { "port", NULL };

static const char *
kind_name(enum sbx_session_kind k)
{
	switch (k) {
	case SBX_SESSION_EXEC:
		return "exec";
	case SBX_SESSION_PTY:
		return "pty";
	case SBX_SESSION_PORT:
		return "port";
	}
	return NULL;
}

/* 1 when every member of body but "kind" is in allowed, else -1 with err
 * naming the first one that is not (names come from the fixed field list,
 * so they are printable). */
static int
members_of_kind(const json_t *body, const char *kind,
    const char *const *allowed, struct sbx_err *err)
{
	const char *key;
	json_t *v;
	size_t i;

	json_object_foreach((json_t *)body, key, v) {
		if (strcmp(key, "kind") == 0)
			continue;
		for (i = 0; allowed[i] != NULL; i++)
			if (strcmp(key, allowed[i]) == 0)
				break;
		if (allowed[i] == NULL && strlen(key) < 16)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "Field \"%s\" "
			    "does not apply to a session of kind %s.", key, kind);
		if (allowed[i] == NULL)
			return sbx_err_set(err, SBX_E_BAD_REQUEST, "A field does "
			    "not apply to a session of kind %s.", kind);
	}
	return 0;
}

/* A required integer member in lo..hi. */
static int
int_in(const json_t *body, const char *name, long lo, long hi, int *out,
    struct sbx_err *err)
{
	json_t *v = json_object_get(body, name);

	if (v == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Field \"%s\" is "
		    "required.", name);
	if (!json_is_integer(v))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"%s\" must be "
		    "an integer.", name);
	if (json_integer_value(v) < lo || json_integer_value(v) > hi)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Field \"%s\" must be "
		    "%ld to %ld.", name, lo, hi);
	*out = (int)json_integer_value(v);
	return 0;
}

/* 1 when t[0..n) is a TERM value: [A-Za-z0-9._+-]{1,64}. */
static int
term_ok(const char *t, size_t n)
{
	size_t i;

	if (n == 0 || n > SBX_SESSION_TERM_MAX)
		return 0;
	for (i = 0; i < n; i++) {
		char c = t[i];

		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		    (c >= '0' && c <= '9') || c == '.' || c == '_' ||
		    c == '+' || c == '-'))
			return 0;
	}
	return 1;
}

static int
pty_decode(const json_t *body, struct sbx_wire_session *s,
    struct sbx_err *err)
{
	json_t *v;

	if (int_in(body, "cols", 1, SBX_SESSION_SIZE_MAX, &s->req.cols,
	    err) == -1 ||
	    int_in(body, "rows", 1, SBX_SESSION_SIZE_MAX, &s->req.rows,
	    err) == -1)
		return -1;
	if ((v = json_object_get(body, "term")) == NULL)
		return 0;
	if (!json_is_string(v))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"term\" must be "
		    "a string.");
	if (!term_ok(json_string_value(v), json_string_length(v)))
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Field \"term\" must be "
		    "1 to %d of A-Z a-z 0-9 . _ + -.", SBX_SESSION_TERM_MAX);
	s->req.term = json_string_value(v);
	return 0;
}

int
sbx_wire_session_decode(const json_t *body, struct sbx_wire_session *s,
    struct sbx_err *err)
{
	const char *k;
	json_t *v;

	memset(s, 0, sizeof(*s));
	if (!json_is_object(body))
		return sbx_err_set(err, SBX_E_BAD_REQUEST,
		    SBX_MSG_BODY_NOT_OBJECT);
	if ((v = json_object_get(body, "kind")) == NULL)
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Field \"kind\" is "
		    "required.");
	if (!json_is_string(v))
		return sbx_err_set(err, SBX_E_WRONG_TYPE, "Field \"kind\" must be "
		    "a string.");
	k = json_string_value(v);
	if (strcmp(k, "exec") == 0 && json_string_length(v) == 4)
		s->req.kind = SBX_SESSION_EXEC;
	else if (strcmp(k, "pty") == 0 && json_string_length(v) == 3)
		s->req.kind = SBX_SESSION_PTY;
	else if (strcmp(k, "port") == 0 && json_string_length(v) == 4)
		s->req.kind = SBX_SESSION_PORT;
	else
		return sbx_err_set(err, SBX_E_BAD_REQUEST, "Field \"kind\" must be "
		    "\"exec\", \"pty\" or \"port\".");
	switch (s->req.kind) {
	case SBX_SESSION_EXEC:
		if (members_of_kind(body, "exec", exec_members, err) == -1 ||
		    sbx_wire_exec_decode_flags(body, 0, &s->x, err) == -1)
			goto fail;
		break;
	case SBX_SESSION_PTY:
		if (members_of_kind(body, "pty", pty_members, err) == -1 ||
		    sbx_wire_exec_decode_flags(body, SBX_WIRE_ARGV_OPTIONAL,
		    &s->x, err) == -1 || pty_decode(body, s, err) == -1)
			goto fail;
		break;
	case SBX_SESSION_PORT:
		if (members_of_kind(body, "port", port_members, err) == -1 ||
		    int_in(body, "port", 1, 65535, &s->req.port, err) == -1)
			goto fail;
		break;
	}
	s->req.exec = s->x.req;
	return 0;
fail:
	sbx_wire_session_free(s);
	return -1;
}

void
sbx_wire_session_free(struct sbx_wire_session *s)
{
	if (s == NULL)
		return;
	sbx_wire_exec_free(&s->x);
	memset(s, 0, sizeof(*s));
}

static int
set_int(json_t *o, const char *k, long v)
{
	return json_object_set_new(o, k, json_integer(v));
}

json_t *
sbx_wire_session_encode(const struct sbx_session_req *req,
    struct sbx_err *err)
{
	struct sbx_exec_req ex;
	const char *kind = req != NULL ? kind_name(req->kind) : NULL;
	json_t *o;

	if (kind == NULL) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "A session's kind must be "
		    "exec, pty or port.");
		return NULL;
	}
	if (req->kind == SBX_SESSION_PORT) {
		if (req->port < 1 || req->port > 65535) {
			sbx_err_set(err, SBX_E_BAD_REQUEST, SBX_MSG_PORT_RANGE);
			return NULL;
		}
		if ((o = json_object()) == NULL ||
		    set_int(o, "port", req->port) == -1)
			goto oom;
	} else {
		ex = req->exec;
		ex.stdin_data = NULL;
		ex.stdin_len = 0;
		if (req->kind == SBX_SESSION_PTY) {
			if (req->cols < 1 || req->cols > SBX_SESSION_SIZE_MAX ||
			    req->rows < 1 || req->rows > SBX_SESSION_SIZE_MAX ||
			    (req->term != NULL &&
			    !term_ok(req->term, strlen(req->term)))) {
				sbx_err_set(err, SBX_E_BAD_REQUEST, "A terminal "
				    "needs cols and rows 1 to %d and a TERM of "
				    "[A-Za-z0-9._+-]{1,%d}.", SBX_SESSION_SIZE_MAX,
				    SBX_SESSION_TERM_MAX);
				return NULL;
			}
			if (ex.argv != NULL && ex.argv[0] == NULL)
				ex.argv = NULL;
		}
		if (ex.argv == NULL && req->kind == SBX_SESSION_PTY) {
			/* No argv: encode with a stand-in, then drop it. */
			static const char *const stand[] = { "-", NULL };

			ex.argv = stand;
			if ((o = sbx_wire_exec_encode(&ex, err)) == NULL)
				return NULL;
			json_object_del(o, "argv");
		} else if ((o = sbx_wire_exec_encode(&ex, err)) == NULL)
			return NULL;
		if (req->kind == SBX_SESSION_PTY &&
		    (set_int(o, "cols", req->cols) == -1 ||
		    set_int(o, "rows", req->rows) == -1 ||
		    (req->term != NULL && json_object_set_new(o, "term",
		    json_string(req->term)) == -1)))
			goto oom;
	}
	if (json_object_set_new(o, "kind", json_string(kind)) == -1)
		goto oom;
	return o;
oom:
	json_decref(o);
	sbx_err_oom(err);
	return NULL;
}
