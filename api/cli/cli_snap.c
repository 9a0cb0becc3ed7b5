/* cli_snap.c - sbxctl snapshot and fork (docs/cli.md, adr/0068): snapshots of an NPC's /work created, listed, deleted, and a fork into another NPC, over the api's snapshot routes; calls cli_util.c only. */
#include <stdio.h>
#include <string.h>

#include <jansson.h>

#include "sbx_proto.h"

#include "cli_int.h"

static int
snap_list(struct ctx *x)
{
	json_t *j = NULL, *arr, *v;
	char when[32];
	size_t i;
	int rc;

	if ((rc = npc_view(x, "GET", x->o.pos[0], "/sandbox/snapshots", &j)) !=
	    CX_OK || j == NULL)
		return rc;
	arr = json_object_get(j, "snapshots");
	printf("%-32s %14s  %s\n", "NAME", "BYTES", "CREATED");
	json_array_foreach(arr, i, v)
		printf("%-32s %14" JSON_INTEGER_FORMAT "  %s\n", jstr(v, "name"),
		    json_integer_value(json_object_get(v, "size_bytes")),
		    ms_time(json_object_get(v, "created_at"), when,
		    sizeof(when)));
	json_decref(j);
	return CX_OK;
}

/* sbxctl snapshot NPC create|list|delete [NAME] */
int
c_snapshot(struct ctx *x)
{
	const char *act = x->o.pos[1];
	const char *name = x->o.npos > 2 ? x->o.pos[2] : NULL;
	json_t *body, *j = NULL;
	char suffix[128];
	int rc;

	if (strcmp(act, "list") == 0) {
		if (name != NULL)
			return usage_err(x->cmd, "list takes no NAME.");
		return snap_list(x);
	}
	if (strcmp(act, "create") != 0 && strcmp(act, "delete") != 0)
		return usage_err(x->cmd, "the action is create, list or delete.");
	if (name == NULL)
		return usage_err(x->cmd, "%s needs a snapshot NAME.", act);
	if (act[0] == 'c') {
		if ((body = json_pack("{s:s}", "name", name)) == NULL) {
			errmsg(SBX_MSG_OOM);
			return CX_ERR;
		}
		rc = npc_call(x, "POST", x->o.pos[0], "/sandbox/snapshots", body,
		    &j);
		json_decref(body);
		if (rc != CX_OK)
			return rc;
		return print_answer(x, j, "%s: snapshot %s taken (%" 
		    JSON_INTEGER_FORMAT " bytes)\n", x->o.pos[0], jstr(j, "name"),
		    json_integer_value(json_object_get(j, "size_bytes")));
	}
	/* The server checks the name; one that cannot be a segment is refused
	 * here so it never changes the path. */
	if (strspn(name, "abcdefghijklmnopqrstuvwxyz0123456789-") !=
	    strlen(name) || strlen(name) > 32)
		return usage_err(x->cmd, "%s", SBX_MSG_BAD_SNAPSHOT);
	snprintf(suffix, sizeof(suffix), "/sandbox/snapshots/%s", name);
	if ((rc = npc_call(x, "DELETE", x->o.pos[0], suffix, NULL, &j)) != CX_OK)
		return rc;
	return print_answer(x, j, "%s: snapshot %s deleted\n", x->o.pos[0],
	    name);
}

/* sbxctl fork NPC NEW */
int
c_fork(struct ctx *x)
{
	json_t *body, *j = NULL;
	int rc;

	if ((body = json_pack("{s:s}", "npc", x->o.pos[1])) == NULL) {
		errmsg(SBX_MSG_OOM);
		return CX_ERR;
	}
	rc = npc_call(x, "POST", x->o.pos[0], "/sandbox/fork", body, &j);
	json_decref(body);
	if (rc != CX_OK)
		return rc;
	return print_answer(x, j, "%s: forked from %s (%s)\n", jstr(j, "npc"),
	    x->o.pos[0], jstr(j, "state"));
}
