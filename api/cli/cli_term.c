/* cli_term.c - sbxctl shell, sbxctl attach, and sbxctl exec -i: terminals of the api (docs/api.md "Terminals") made and attached by WebSocket (cli_term_ws.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jansson.h>

#include "cli_http.h"
#include "sbx_proto.h"

#include "cli_int.h"

/* The id of a terminal the api answered with; NULL when it has none that
 * is safe to put in a path. */
static const char *
term_id(json_t *ans)
{
	const char *id = json_string_value(json_object_get(ans, "id"));

	if (id == NULL || id[0] == '\0' || strlen(id) > 63 || strspn(id,
	    "abcdefghijklmnopqrstuvwxyz0123456789") != strlen(id)) {
		errmsg("the server's answer has no terminal id.");
		return NULL;
	}
	return id;
}

/* POST …/terminals with body (stolen); *ans the answer. */
static int
term_create(struct ctx *x, json_t *body, json_t **ans)
{
	int rc;

	if (body == NULL) {
		errmsg(SBX_MSG_OOM);
		return CX_ERR;
	}
	rc = npc_call(x, "POST", x->o.pos[0], "/sandbox/terminals", body, ans);
	json_decref(body);
	return rc;
}

/*
 * exec -i's POST …/terminals: like term_create, but an api without
 * terminals (404 "No such route.", an older api) is told apart and
 * nothing printed: returns CX_NO_TERMINALS then.
 */
static int
term_create_or_none(struct ctx *x, json_t *body, json_t **ans)
{
	struct cli_body b = { SBX_CT_JSON, NULL, 0, -1 };
	struct cli_resp r;
	struct cli_conn *c = NULL;
	struct sbx_err err;
	char target[1024], *req, *txt = NULL;
	json_t *j = NULL;
	const char *msg;
	size_t len = 0;
	int rc;

	*ans = NULL;
	if (npc_target(target, sizeof(target), x->o.pos[0],
	    "/sandbox/terminals", NULL) == -1)
		return usage_err(NULL, "the NPC name is too long.");
	if ((req = json_dumps(body, JSON_COMPACT)) == NULL) {
		errmsg(SBX_MSG_OOM);
		return CX_ERR;
	}
	b.data = req;
	b.len = strlen(req);
	sbx_err_clear(&err);
	if ((c = cli_http_request(&x->url, "POST", target, x->key, &b, &r,
	    &err)) == NULL) {
		rc = fail_err(&err);
		goto done;
	}
	if (r.status == 201 || r.status == 200) {
		rc = (txt = cli_http_read_all(c, JSON_MAX, &len, &err)) == NULL ?
		    fail_err(&err) : (*ans = json_loadb(txt, len, 0, NULL)) ==
		    NULL ? (errmsg("the server's answer is not JSON."), CX_ERR) :
		    CX_OK;
		goto done;
	}
	if (r.status != 404) {
		rc = fail_resp(c, &r);
		goto done;
	}
	txt = cli_http_read_all(c, 1024 * 1024, &len, &err);
	j = txt != NULL ? json_loadb(txt, len, 0, NULL) : NULL;
	msg = jraw(json_object_get(j, "error"), "message");
	if (strcmp(msg, "No such route.") == 0)
		rc = CX_NO_TERMINALS;
	else {
		errmsg("%s", jstr(json_object_get(j, "error"), "message"));
		rc = CX_NOTFOUND;
	}
done:
	json_decref(j);
	free(txt);
	free(req);
	cli_http_close(c);
	return rc;
}

/* Deletes terminal id (sbxctl exec -i interrupted: the command is
 * cancelled, as sbxctl exec's is). */
static void
term_delete(struct ctx *x, const char *id)
{
	char suffix[256];
	json_t *ans = NULL;

	snprintf(suffix, sizeof(suffix), "/sandbox/terminals/%s", id);
	cli_http_clear_interrupt();
	(void)npc_call(x, "DELETE", x->o.pos[0], suffix, NULL, &ans);
	json_decref(ans);
}

int
c_shell(struct ctx *x)
{
	struct term_attach t;
	json_t *body, *argv = NULL, *ans = NULL;
	const char *term = getenv("TERM");
	int cols, rows, rc, i;

	cli_term_size(&cols, &rows);
	body = json_pack("{s:b,s:i,s:i}", "pty", 1, "cols", cols, "rows", rows);
	if (body != NULL && term != NULL && term[0] != '\0' && strlen(term) < 64
	    && strspn(term, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	    "0123456789._+-") == strlen(term))
		json_object_set_new(body, "term", json_string(term));
	if (body != NULL && x->o.rest != NULL && x->o.rest[0] != NULL) {
		if ((argv = json_array()) == NULL) {
			json_decref(body);
			body = NULL;
		}
		for (i = 0; argv != NULL && x->o.rest[i] != NULL; i++)
			json_array_append_new(argv, json_string(x->o.rest[i]));
		if (argv != NULL)
			json_object_set_new(body, "argv", argv);
	}
	if (body != NULL && x->o.cwd != NULL)
		json_object_set_new(body, "cwd", json_string(x->o.cwd));
	if ((rc = term_create(x, body, &ans)) != CX_OK)
		return rc;
	memset(&t, 0, sizeof(t));
	t.npc = x->o.pos[0];
	if ((t.id = term_id(ans)) == NULL) {
		json_decref(ans);
		return CX_ERR;
	}
	t.raw = isatty(STDIN_FILENO);
	t.input = 1;
	rc = cli_term_run(x, &t);
	json_decref(ans);
	return rc;
}

/* Whether id can be a terminal id (letters and digits, as the api makes
 * them): one that cannot is refused here and never changes the path. */
static int
term_id_ok(const char *id)
{
	return id[0] != '\0' && strlen(id) <= 63 &&
	    strspn(id, "abcdefghijklmnopqrstuvwxyz0123456789") == strlen(id);
}

int
c_attach(struct ctx *x)
{
	struct term_attach t;
	const char *id = x->o.pos[1];

	if (!term_id_ok(id))
		return usage_err(x->cmd, "ID is a terminal id as `sbxctl shell` "
		    "printed it (letters and digits).");
	memset(&t, 0, sizeof(t));
	t.npc = x->o.pos[0];
	t.id = id;
	t.raw = isatty(STDIN_FILENO);
	t.input = 1;
	return cli_term_run(x, &t);
}

int
cli_exec_stream(struct ctx *x, json_t *body)
{
	struct term_attach t;
	json_t *ans = NULL;
	int rc;

	json_object_set_new(body, "pty", json_false());
	rc = term_create_or_none(x, body, &ans);
	json_decref(body);
	if (rc != CX_OK)
		return rc;
	memset(&t, 0, sizeof(t));
	t.npc = x->o.pos[0];
	if ((t.id = term_id(ans)) == NULL) {
		json_decref(ans);
		return CX_ERR;
	}
	t.input = 1;
	t.cancel_on_signal = 1;
	rc = cli_term_run(x, &t);
	if (rc == CX_INTR)
		term_delete(x, t.id);
	json_decref(ans);
	return rc;
}

/* sbxctl terminals NPC [list | kill ID] [--json]: the NPC's terminals, newest
 * first (GET …/terminals), or one killed (DELETE …/terminals/ID); docs/cli.md. */
int
c_terminals(struct ctx *x)
{
	const char *act = x->o.npos > 1 ? x->o.pos[1] : "list";
	const char *id = x->o.npos > 2 ? x->o.pos[2] : NULL;
	json_t *j = NULL, *v;
	char suffix[128], when[32], argv[41];
	size_t i;
	int rc;

	if (strcmp(act, "kill") == 0) {
		if (id == NULL || !term_id_ok(id))
			return usage_err(x->cmd, "kill needs a terminal ID as `sbxctl "
			    "terminals NPC` lists it.");
		snprintf(suffix, sizeof(suffix), "/sandbox/terminals/%s", id);
		if ((rc = npc_call(x, "DELETE", x->o.pos[0], suffix, NULL, &j)) !=
		    CX_OK)
			return rc;
		return print_answer(x, j, "%s: terminal %s %s\n", x->o.pos[0], id,
		    jstr(j, "state"));
	}
	if (strcmp(act, "list") != 0 || id != NULL)
		return usage_err(x->cmd, "the action is list (the default) or kill ID.");
	if ((rc = npc_view(x, "GET", x->o.pos[0], "/sandbox/terminals", &j)) !=
	    CX_OK || j == NULL)
		return rc;
	printf("%-26s %-8s %7s  %-16s  %s\n", "ID", "STATE", "VIEWERS", "CREATED",
	    "COMMAND");
	json_array_foreach(json_object_get(j, "terminals"), i, v) {
		snprintf(argv, sizeof(argv), "%s", jstr(v, "argv")[0] != '\0' ?
		    jstr(v, "argv") : "(login shell)");
		printf("%-26s %-8s %7" JSON_INTEGER_FORMAT "  %-16s  %s\n",
		    jstr(v, "id"), jstr(v, "state"),
		    json_integer_value(json_object_get(v, "viewers")),
		    ms_time(json_object_get(v, "created_at"), when, sizeof(when)),
		    argv);
	}
	json_decref(j);
	return CX_OK;
}
