/* sbx_list_out.c - a list page's JSON reply encoded in slices over turns of the event loop (adr/0030). */
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>

#include "sbx_list_out.h"
#include "sbx_proto.h"
#include "sbx_wire.h"

struct sbx_list_out {
	struct sbx_dirent *ents;    /* a copy: the driver's are borrowed */
	size_t n, next;
	int truncated, obj;
	struct evbuffer *text;      /* the reply so far */
	struct event *ev;           /* the next slice (a 0 s timer: after I/O) */
	sbx_list_out_done done;
	void *arg;
};

void
sbx_list_out_free(struct sbx_list_out *lo)
{
	if (lo == NULL)
		return;
	if (lo->ev != NULL)
		event_free(lo->ev);
	if (lo->text != NULL)
		evbuffer_free(lo->text);
	free(lo->ents);
	free(lo);
}

static void
list_oom(struct sbx_list_out *lo)
{
	struct sbx_err err;

	sbx_err_oom(&err);
	lo->done(lo->arg, &err, NULL, lo->truncated, "");
}

static void
list_finish(struct sbx_list_out *lo)
{
	char cursor[SBX_WIRE_CURSOR_MAX + 1];
	int trunc = lo->truncated && lo->n > 0, r;

	cursor[0] = '\0';
	if (trunc)
		sbx_wire_cursor_encode(lo->ents[lo->n - 1].name, cursor,
		    sizeof(cursor));
	if (!lo->obj)
		r = evbuffer_add(lo->text, "]", 1);
	else if (trunc)
		r = evbuffer_add_printf(lo->text, "],\"truncated\":true,"
		    "\"cursor\":\"%s\"}", cursor);
	else
		r = evbuffer_add_printf(lo->text, "],\"truncated\":false,"
		    "\"cursor\":null}");
	if (r < 0) {
		list_oom(lo);
		return;
	}
	lo->done(lo->arg, NULL, lo->text, lo->truncated, cursor);
}

static void
list_slice(evutil_socket_t fd, short what, void *arg)
{
	static const struct timeval now = { 0, 0 };
	struct sbx_list_out *lo = arg;
	size_t k = lo->n - lo->next, len;
	char *t;

	(void)fd;
	(void)what;
	if (k > SBX_LIST_SLICE)
		k = SBX_LIST_SLICE;
	if (k == 0) {           /* an empty directory: ents is NULL */
		list_finish(lo);
		return;
	}
	if ((t = sbx_wire_dirents_text(lo->ents + lo->next, k)) == NULL) {
		list_oom(lo);
		return;
	}
	/* after a comma unless it is the first slice */
	len = strlen(t);
	if (len > 0 && ((lo->next > 0 && evbuffer_add(lo->text, ",", 1) < 0) ||
	    evbuffer_add(lo->text, t, len) < 0)) {
		free(t);
		list_oom(lo);
		return;
	}
	free(t);
	lo->next += k;
	if (lo->next < lo->n)
		evtimer_add(lo->ev, &now);
	else
		list_finish(lo);
}

int
sbx_list_out_start(struct sbx_list_out **out, struct event_base *base,
    const struct sbx_dirent *ents, size_t n, int truncated, int obj,
    sbx_list_out_done done, void *arg, struct sbx_err *err)
{
	struct sbx_list_out *lo;

	*out = NULL;
	if ((lo = calloc(1, sizeof(*lo))) == NULL ||
	    (n > 0 && (lo->ents = malloc(n * sizeof(*ents))) == NULL) ||
	    (lo->text = evbuffer_new()) == NULL ||
	    (lo->ev = evtimer_new(base, list_slice, lo)) == NULL ||
	    evbuffer_add_printf(lo->text, "%s", obj ?
	    "{\"entries\":[" : "[") < 0) {
		sbx_list_out_free(lo);
		return sbx_err_oom(err);
	}
	if (n > 0)
		memcpy(lo->ents, ents, n * sizeof(*ents));
	lo->n = n;
	lo->truncated = truncated;
	lo->obj = obj;
	lo->done = done;
	lo->arg = arg;
	*out = lo;
	list_slice(-1, 0, lo);
	return 0;
}
