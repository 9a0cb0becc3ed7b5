/* api_term_load.c - sandbox-api terminals across restarts and over time: records read back from state_dir/terms (a terminal found running ends failed, api_restarted), terminal_retention and terminal_records_per_principal, open and close (adr/0051). Above api_term.c and api_term_ring.c. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <event2/event.h>
#include <jansson.h>

#include "api_term_int.h"
#include "sbx_log.h"
#include "sbx_msg.h"
#include "sbx_proto.h"
#include "sbx_time.h"

/* ------------------------------------------------------------------ */
/* Bounds, loading, closing                                            */

/* terminal_retention, then terminal_records_per_principal: ended
 * terminals without viewers, oldest first. */
static void
terms_bounds(struct api_server *s)
{
	struct api_term *t, *older, *u;
	int64_t now = sbx_wall_ms();
	long long n;

	for (t = s->terms; t != NULL && t->next != NULL; t = t->next)
		;
	for (; t != NULL; t = older) {
		older = t->prev;   /* walking towards the newest */
		if (!term_ended(t) || viewers_live(t) > 0)
			continue;
		n = 0;
		for (u = s->terms; u != NULL && u != t; u = u->next)
			if (term_ended(u) && strcmp(u->by, t->by) == 0)
				n++;
		if (now - t->ended_at > s->cfg->terminal_retention ||
		    n >= s->cfg->terminal_records_per_principal)
			term_forget(t);
	}
}

static void
sweep_fire(evutil_socket_t fd, short what, void *arg)
{
	struct api_server *s = arg;
	struct timeval tv = { 10, 0 };

	(void)fd;
	(void)what;
	terms_bounds(s);
	evtimer_add(s->terms_sweep, &tv);
}

/* Loads one terminal directory; a running one becomes failed. */
static void
term_load(struct api_server *s, const char *id)
{
	struct api_term *t;
	json_t *m = NULL, *v;
	char path[1024];
	struct dirent *de;
	DIR *d;
	unsigned long long first;
	char tail[8];

	if ((t = term_alloc(s)) == NULL)
		return;
	snprintf(t->id, sizeof(t->id), "%s", id);
	term_path(path, sizeof(path), t, "meta.json");
	if ((m = json_load_file(path, 0, NULL)) == NULL ||
	    !json_is_string(json_object_get(m, "npc")) ||
	    !json_is_string(json_object_get(m, "state"))) {
		log_warn("ignoring an unreadable terminal record", "terminal_id",
		    id, NULL);
		json_decref(m);
		term_free(t);
		return;
	}
#define STR(k) (json_string_value(json_object_get(m, k)) ?: "")
	snprintf(t->npc, sizeof(t->npc), "%s", STR("npc"));
	snprintf(t->state, sizeof(t->state), "%s", STR("state"));
	snprintf(t->sandbox_id, sizeof(t->sandbox_id), "%s", STR("sandbox_id"));
	snprintf(t->by, sizeof(t->by), "%s", STR("by"));
	snprintf(t->argv_preview, sizeof(t->argv_preview), "%s", STR("argv"));
	snprintf(t->term, sizeof(t->term), "%s", STR("term"));
	snprintf(t->signal, sizeof(t->signal), "%s", STR("signal"));
	snprintf(t->reason_code, sizeof(t->reason_code), "%s", STR("reason"));
	snprintf(t->reason, sizeof(t->reason), "%s", STR("message"));
#undef STR
	t->owner_id = json_integer_value(json_object_get(m, "owner_id"));
	t->pty = json_is_true(json_object_get(m, "pty"));
	t->cols = (int)json_integer_value(json_object_get(m, "cols"));
	t->rows = (int)json_integer_value(json_object_get(m, "rows"));
	v = json_object_get(m, "exit_code");
	t->code = json_is_integer(v) ? (int)json_integer_value(v) : -1;
	t->created_at = json_integer_value(json_object_get(m, "created_at"));
	t->ended_at = json_integer_value(json_object_get(m, "ended_at"));
	json_decref(m);
	term_path(path, sizeof(path), t, NULL);
	if ((d = opendir(path)) != NULL) {
		while ((de = readdir(d)) != NULL) {
			if (strlen(de->d_name) != 24 || sscanf(de->d_name,
			    "%20llu%7s", &first, tail) != 2 ||
			    strcmp(tail, ".log") != 0)
				continue;
			if (t->seg_cur == UINT64_MAX || first > t->seg_cur) {
				t->seg_prev = t->seg_cur;
				t->seg_cur = first;
			} else if (t->seg_prev == UINT64_MAX ||
			    first > t->seg_prev)
				t->seg_prev = first;
		}
		closedir(d);
	}
	/* The offsets go on from the log (a torn last record is left out). */
	ring_load(t);
	term_link(t);
	if (!term_ended(t)) {
		/* Its session died with the old api process: the broker kills
		 * a session whose client is gone. */
		term_end(t, "failed", "api_restarted", "The api restarted while "
		    "the terminal ran; the broker killed it when the api's "
		    "connection to it closed.");
	}
	ring_free(t);
}

int
api_terms_open(struct api_server *s, struct sbx_err *err)
{
	struct dirent *de;
	struct timeval tv = { 10, 0 };
	DIR *d;

	if ((s->terms_dir = malloc(strlen(s->cfg->state_dir) + 8)) == NULL)
		return sbx_err_oom(err);
	sprintf(s->terms_dir, "%s/terms", s->cfg->state_dir);
	if (mkdir(s->terms_dir, 0700) == -1 && errno != EEXIST)
		return sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_CANNOT_CREATE,
		    s->terms_dir, strerror(errno));
	if ((d = opendir(s->terms_dir)) == NULL)
		return sbx_err_set(err, SBX_E_CONFIG, "Cannot read %s: %s.",
		    s->terms_dir, strerror(errno));
	while ((de = readdir(d)) != NULL)
		if (de->d_name[0] == 't' && strlen(de->d_name) == TERM_ID_LEN)
			term_load(s, de->d_name);
	closedir(d);
	if ((s->terms_sweep = evtimer_new(s->base, sweep_fire, s)) == NULL)
		return sbx_err_oom(err);
	evtimer_add(s->terms_sweep, &tv);
	terms_bounds(s);
	return 0;
}

void
api_terms_close(struct api_server *s)
{
	struct api_term *t;
	struct sbx_op *op;

	while ((t = s->terms) != NULL) {
		if (!term_ended(t)) {
			op = t->op;
			t->op = NULL;
			sbx_op_cancel(op);
			t->creator = NULL;
			/* The same end as a crash's (term_load): a
			 * terminal does not outlive its api process. */
			term_end(t, "failed", "api_restarted", "The api stopped "
			    "while the terminal ran; the terminal was killed.");
		}
		term_unlink(t);
		term_free(t);
	}
	if (s->terms_sweep != NULL)
		event_free(s->terms_sweep);
	s->terms_sweep = NULL;
	free(s->terms_dir);
	s->terms_dir = NULL;
}
