/*
 * fuzz_wire.c - libFuzzer target: proto/sbx_wire.c, the broker API bodies.
 *
 * The input is one body, read as every request body the broker decodes
 * (exec, ensure) and as every answer the broker-client driver decodes
 * (status, sandbox list, list page, health, error). Invariants:
 *  - a refusal sets a code of proto/sbx_proto.h with a message, and leaves
 *    the outputs zeroed / NULL;
 *  - an accepted exec body re-encodes (sbx_wire_exec_encode) to a body that
 *    decodes to the same argv, cwd, env (as "K=V"), stdin bytes, timeout
 *    and output cap, within SBX_EXEC_ARGV_MAX / SBX_EXEC_ENV_MAX;
 *  - an accepted ensure body round-trips the same way;
 *  - decoded status, list and sandbox answers re-encode and decode to the
 *    same values (names, types, sizes; ids that pass sbx_id_valid);
 *  - a decoded list cursor has no NUL or '/' and re-encodes to the input.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "fuzz.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_wire.h"

static void
refused(const struct sbx_err *err)
{
	FUZZ_ASSERT(err->code[0] != '\0' && err->message[0] != '\0');
}

static void
exec_body(const char *buf, size_t len)
{
	struct sbx_wire_exec x, y;
	struct sbx_err err;
	json_t *body, *enc;
	size_t i;

	sbx_err_clear(&err);
	if (sbx_wire_body_object(buf, len, sbx_wire_exec_fields, 0, &body,
	    &err) == -1) {
		FUZZ_ASSERT(body == NULL);
		refused(&err);
		return;
	}
	if (sbx_wire_exec_decode(body, &x, &err) == -1) {
		refused(&err);
		FUZZ_ASSERT(x.argv == NULL && x.env == NULL && x.stdin_buf == NULL);
		json_decref(body);
		return;
	}
	for (i = 0; x.req.argv[i] != NULL; i++)
		;
	FUZZ_ASSERT(i >= 1 && i <= SBX_EXEC_ARGV_MAX && x.req.argv[0][0] != '\0');
	for (i = 0; x.req.env != NULL && x.req.env[i] != NULL; i++)
		FUZZ_ASSERT(strchr(x.req.env[i], '=') != NULL);
	FUZZ_ASSERT(i <= SBX_EXEC_ENV_MAX);
	FUZZ_ASSERT(x.req.cwd == NULL ||
	    sbx_path_check(x.req.cwd, strlen(x.req.cwd), NULL) == 0);
	enc = sbx_wire_exec_encode(&x.req, &err);
	/* jansson strings are UTF-8 already, so re-encoding cannot fail */
	FUZZ_ASSERT(enc != NULL);
	FUZZ_ASSERT(sbx_wire_exec_decode(enc, &y, &err) == 0);
	for (i = 0; x.req.argv[i] != NULL; i++)
		FUZZ_ASSERT(y.req.argv[i] != NULL &&
		    strcmp(x.req.argv[i], y.req.argv[i]) == 0);
	FUZZ_ASSERT(y.req.argv[i] == NULL);
	FUZZ_ASSERT((x.req.cwd == NULL) == (y.req.cwd == NULL));
	FUZZ_ASSERT(x.req.cwd == NULL || strcmp(x.req.cwd, y.req.cwd) == 0);
	FUZZ_ASSERT((x.req.env == NULL) == (y.req.env == NULL));
	for (i = 0; x.req.env != NULL && x.req.env[i] != NULL; i++)
		FUZZ_ASSERT(y.req.env[i] != NULL &&
		    strcmp(x.req.env[i], y.req.env[i]) == 0);
	FUZZ_ASSERT(x.req.stdin_len == y.req.stdin_len);
	FUZZ_ASSERT(x.req.stdin_len == 0 ||
	    memcmp(x.req.stdin_data, y.req.stdin_data, x.req.stdin_len) == 0);
	FUZZ_ASSERT(x.req.timeout_ms == y.req.timeout_ms &&
	    x.req.output_cap == y.req.output_cap);
	sbx_wire_exec_free(&y);
	sbx_wire_exec_free(&x);
	json_decref(enc);
	json_decref(body);
}

static void
spec_body(const char *buf, size_t len)
{
	struct sbx_spec s, t;
	struct sbx_err err;
	json_t *body, *enc;

	if (sbx_wire_body_object(buf, len, sbx_wire_spec_fields, 1, &body,
	    &err) == -1)
		return;
	if (sbx_wire_spec_decode(body, NULL, &s, &err) == -1) {
		refused(&err);
		FUZZ_ASSERT(s.image == NULL && s.pids == 0);
		json_decref(body);
		return;
	}
	FUZZ_ASSERT(s.memory_bytes >= 0 && s.nano_cpus >= 0 && s.pids >= 0);
	FUZZ_ASSERT((enc = sbx_wire_spec_encode(&s)) != NULL);
	FUZZ_ASSERT(sbx_wire_spec_decode(enc, NULL, &t, &err) == 0);
	FUZZ_ASSERT(t.egress == s.egress && t.memory_bytes == s.memory_bytes &&
	    t.nano_cpus == s.nano_cpus && t.pids == s.pids);
	FUZZ_ASSERT((s.image == NULL) == (t.image == NULL));
	FUZZ_ASSERT(s.image == NULL || strcmp(s.image, t.image) == 0);
	json_decref(enc);
	json_decref(body);
}

static void
answers(const char *buf, size_t len)
{
	struct sbx_status st, st2, *sts;
	struct sbx_dirent *ents, *e2;
	struct sbx_health h;
	struct sbx_err err;
	json_t *root, *enc;
	size_t n, n2, i;
	int tr, tr2;

	(void)sbx_wire_error_decode(buf, len, &err);
	FUZZ_ASSERT(strlen(err.code) < sizeof(err.code));
	if ((root = json_loadb(buf, len, 0, NULL)) == NULL)
		return;
	if (sbx_wire_status_decode(root, &st, &err) == 0) {
		FUZZ_ASSERT((enc = sbx_wire_status_encode(&st, st.usage.present)) !=
		    NULL || !json_is_object(root));
		if (enc != NULL && sbx_wire_status_decode(enc, &st2, &err) == 0) {
			FUZZ_ASSERT(strcmp(st.id, st2.id) == 0 &&
			    st.state == st2.state);
		}
		json_decref(enc);
	}
	if (sbx_wire_sandboxes_decode(root, &sts, &n, &err) == 0) {
		for (i = 0; i < n; i++)
			FUZZ_ASSERT(sbx_id_valid(sts[i].id));
		free(sts);
	} else
		FUZZ_ASSERT(sts == NULL && n == 0);
	if (sbx_wire_list_decode(root, &ents, &n, &tr, &err) == 0) {
		FUZZ_ASSERT((enc = sbx_wire_list_encode(ents, n, tr)) != NULL);
		FUZZ_ASSERT(sbx_wire_list_decode(enc, &e2, &n2, &tr2, &err) == 0);
		FUZZ_ASSERT(n2 == n && tr2 == (tr && n > 0));
		for (i = 0; i < n; i++)
			FUZZ_ASSERT(strcmp(ents[i].name, e2[i].name) == 0 &&
			    strcmp(ents[i].type, e2[i].type) == 0 &&
			    ents[i].size == e2[i].size &&
			    ents[i].mode == e2[i].mode);
		free(e2);
		free(ents);
		json_decref(enc);
	}
	(void)sbx_wire_health_decode(root, &h, &err);
	json_decref(root);
}

static void
cursor(const char *buf, size_t len)
{
	char name[SBX_PATH_SEGMENT_MAX + 1], back[SBX_WIRE_CURSOR_MAX + 1];
	struct sbx_err err;

	if (sbx_wire_cursor_decode(buf, len, name, &err) == -1) {
		refused(&err);
		return;
	}
	FUZZ_ASSERT(strchr(name, '/') == NULL);
	if (len > 0) {
		FUZZ_ASSERT(name[0] != '\0');
		FUZZ_ASSERT(sbx_wire_cursor_encode(name, back, sizeof(back)) > 0);
	}
}

/* A session body: decoded, re-encoded and decoded again to the same. */
static void
session_body(const char *buf, size_t len)
{
	struct sbx_wire_session s, t;
	struct sbx_err err;
	json_t *body, *enc;
	size_t i;

	sbx_err_clear(&err);
	if (sbx_wire_body_object(buf, len, sbx_wire_session_fields, 0, &body,
	    &err) == -1) {
		refused(&err);
		return;
	}
	if (sbx_wire_session_decode(body, &s, &err) == -1) {
		refused(&err);
		FUZZ_ASSERT(s.x.argv == NULL && s.x.env == NULL);
		json_decref(body);
		return;
	}
	FUZZ_ASSERT(s.req.kind != SBX_SESSION_PTY ||
	    (s.req.cols >= 1 && s.req.cols <= SBX_SESSION_SIZE_MAX &&
	    s.req.rows >= 1 && s.req.rows <= SBX_SESSION_SIZE_MAX));
	FUZZ_ASSERT(s.req.kind != SBX_SESSION_PORT ||
	    (s.req.port >= 1 && s.req.port <= 65535));
	FUZZ_ASSERT(s.req.kind != SBX_SESSION_EXEC || s.req.exec.argv != NULL);
	enc = sbx_wire_session_encode(&s.req, &err);
	FUZZ_ASSERT(enc != NULL);
	FUZZ_ASSERT(sbx_wire_session_decode(enc, &t, &err) == 0);
	FUZZ_ASSERT(t.req.kind == s.req.kind && t.req.cols == s.req.cols &&
	    t.req.rows == s.req.rows && t.req.port == s.req.port);
	FUZZ_ASSERT((s.req.term == NULL) == (t.req.term == NULL));
	FUZZ_ASSERT(s.req.term == NULL || strcmp(s.req.term, t.req.term) == 0);
	FUZZ_ASSERT((s.req.exec.argv == NULL) == (t.req.exec.argv == NULL));
	for (i = 0; s.req.exec.argv != NULL && s.req.exec.argv[i] != NULL; i++)
		FUZZ_ASSERT(t.req.exec.argv[i] != NULL &&
		    strcmp(s.req.exec.argv[i], t.req.exec.argv[i]) == 0);
	sbx_wire_session_free(&t);
	sbx_wire_session_free(&s);
	json_decref(enc);
	json_decref(body);
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	const char *buf = (const char *)data;

	exec_body(buf, size);
	session_body(buf, size);
	spec_body(buf, size);
	answers(buf, size);
	cursor(buf, size);
	return 0;
}
