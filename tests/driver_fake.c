/* driver_fake.c - in-memory SandboxDriver for unit tests of callers (SPEC §3, tests only). */
#include <sys/queue.h>
#include <sys/time.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>

#include "driver_fake.h"
#include "driver_fake_int.h"
#include "sbx_path.h"
#include "sbx_proto.h"

struct fake_file {
	LIST_ENTRY(fake_file) link;
	char *path;
	unsigned char *data;
	size_t len;
	uint32_t mode;
	int64_t mtime;
};

struct fake_sbx {
	LIST_ENTRY(fake_sbx) link;
	char id[64];
	enum sbx_state state;
	char image[256];
	int egress;
	int64_t created_at_ms;
	unsigned generation;        /* container number, for container_id */
	unsigned mutating;          /* ensure/stop/destroy in flight */
	LIST_HEAD(, fake_file) files;
	/* A snapshot (adr/0068): id "<of>.snap.<name>", never a sandbox. */
	int snap;
	char snap_of[64], snap_name[40], snap_owner[72];
	int64_t snap_at;
};

enum fake_kind { K_STATUS, K_DONE, K_LIST, K_SANDBOXES, K_HEALTH, K_STREAM,
    K_JSON };
enum fake_snap { SN_CREATE = 1, SN_LIST, SN_DELETE, SN_COPY };

static void fill_usage(const struct fake_sbx *, struct sbx_usage *);

struct fake_driver;

struct fake_op {
	struct sbx_op base;         /* first: sbx_op_* find the driver */
	int is_session;             /* 0 (struct fake_head) */
	TAILQ_ENTRY(fake_op) link;
	struct fake_driver *fd;
	enum fake_kind kind;
	enum sbx_fake_op op;
	struct event *ev;
	char id[64];
	char path[4096];
	struct sbx_err fail;        /* set: terminal callback reports it */
	int mutating;               /* counted in fake_sbx.mutating */
	/* callbacks */
	sbx_status_cb status_cb;
	sbx_done_cb done_cb;
	sbx_list_cb list_cb;
	char list_after[256];       /* page: names after this ("" none) */
	size_t list_limit;
	sbx_sandboxes_cb sandboxes_cb;
	sbx_health_cb health_cb;
	sbx_json_cb json_cb;
	void *arg;
	/* snapshots (adr/0068) */
	enum fake_snap snap;
	char snap_name[40], snap_from[64], snap_owner[72];
	int snap_has_name;
	uint64_t snap_max;
	struct sbx_spec spec;
	char spec_image[256];
	/* streams */
	struct sbx_sink sink;
	struct sbx_fake_step *steps; /* owned copy; data pointers into stepdata */
	size_t nsteps, step;
	unsigned rep;
	int started, paused, in_cb, cancelled, is_exec;
	unsigned char *stepdata;
	int64_t cap;                 /* exec output_cap (0: none), bytes */
	int64_t emitted;             /* stdout+stderr bytes given to the sink */
	/* write */
	unsigned char *wdata;
	size_t wlen;
	uint32_t wmode;
};

struct fake_driver {
	struct sbx_driver base;     /* first */
	LIST_HEAD(, fake_sbx) sbxs;
	TAILQ_HEAD(, fake_op) ops;
	struct sbx_fake_stats stats;
	struct sbx_fake_exec_seen last_exec;
	struct sbx_fake_step *script;
	size_t nscript;
	unsigned char *scriptdata;
	unsigned delay_ms;
	char fail_code[SBX_FAKE_NOPS][48];
	int fail_sync[SBX_FAKE_NOPS];
	char health_reason[256];
	unsigned exec_seq;
	struct fake_sessions sessions;  /* driver_fake_session.c */
};

static int64_t
now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The SPEC §4 rules, the same code every caller and driver uses. */
static int
id_ok(const char *id)
{
	return sbx_id_valid(id);
}

static int
path_ok(const char *p)
{
	return p != NULL && sbx_path_check(p, strlen(p), NULL) == 0;
}

static struct fake_sbx *
sbx_find(struct fake_driver *fd, const char *id, int create)
{
	struct fake_sbx *s;

	LIST_FOREACH(s, &fd->sbxs, link)
		if (strcmp(s->id, id) == 0)
			return s;
	if (!create)
		return NULL;
	if ((s = calloc(1, sizeof(*s))) == NULL)
		return NULL;
	snprintf(s->id, sizeof(s->id), "%s", id);
	LIST_INIT(&s->files);
	LIST_INSERT_HEAD(&fd->sbxs, s, link);
	return s;
}

static struct fake_file *
file_find(struct fake_sbx *s, const char *path)
{
	struct fake_file *f;

	LIST_FOREACH(f, &s->files, link)
		if (strcmp(f->path, path) == 0)
			return f;
	return NULL;
}

static void
files_clear(struct fake_sbx *s)
{
	struct fake_file *f;

	while ((f = LIST_FIRST(&s->files)) != NULL) {
		LIST_REMOVE(f, link);
		free(f->path);
		free(f->data);
		free(f);
	}
}

static void
fill_status(const struct fake_sbx *s, const char *id, struct sbx_status *st)
{
	memset(st, 0, sizeof(*st));
	snprintf(st->id, sizeof(st->id), "%s", id);
	if (s == NULL || s->state == SBX_STATE_ABSENT)
		return;
	st->state = s->state;
	snprintf(st->image, sizeof(st->image), "%s", s->image);
	st->egress = s->egress;
	st->created_at_ms = s->created_at_ms;
	snprintf(st->container_id, sizeof(st->container_id), "fake-%s-%u",
	    s->id, s->generation);
	if (s->state == SBX_STATE_STOPPED)
		snprintf(st->stop_reason, sizeof(st->stop_reason), "operator");
}

static void op_tick(evutil_socket_t fd, short what, void *arg);

static void
op_arm(struct fake_op *o)
{
	struct timeval tv;

	tv.tv_sec = o->fd->delay_ms / 1000;
	tv.tv_usec = (o->fd->delay_ms % 1000) * 1000;
	event_add(o->ev, &tv);
}

static struct fake_op *
op_new(struct fake_driver *fd, enum sbx_fake_op op, enum fake_kind kind,
    const char *id, struct sbx_err *err)
{
	struct fake_op *o;

	fd->stats.calls[op]++;
	if (fd->fail_code[op][0] != '\0' && fd->fail_sync[op]) {
		sbx_err_set(err, fd->fail_code[op], "The fake was told to fail.");
		fd->fail_code[op][0] = '\0';
		return NULL;
	}
	if (id != NULL && !id_ok(id)) {
		sbx_err_bad_id(err);
		return NULL;
	}
	if ((o = calloc(1, sizeof(*o))) == NULL) {
		sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
		return NULL;
	}
	o->base.driver = &fd->base;
	o->fd = fd;
	o->op = op;
	o->kind = kind;
	if (id != NULL)
		snprintf(o->id, sizeof(o->id), "%s", id);
	if ((o->ev = event_new(fd->base.base, -1, 0, op_tick, o)) == NULL) {
		free(o);
		sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
		return NULL;
	}
	if (fd->fail_code[op][0] != '\0') {
		sbx_err_set(&o->fail, fd->fail_code[op],
		    "The fake was told to fail.");
		fd->fail_code[op][0] = '\0';
	}
	TAILQ_INSERT_TAIL(&fd->ops, o, link);
	fd->stats.ops_live++;
	return o;
}

static void
op_free(struct fake_op *o)
{
	struct fake_driver *fd = o->fd;
	struct fake_sbx *s;

	TAILQ_REMOVE(&fd->ops, o, link);
	fd->stats.ops_live--;
	if (o->is_exec)
		fd->stats.execs_live--;
	if (o->mutating && (s = sbx_find(fd, o->id, 0)) != NULL)
		s->mutating--;
	event_free(o->ev);
	free(o->steps);
	free(o->stepdata);
	free(o->wdata);
	free(o);
}

static void
mutating_begin(struct fake_op *o)
{
	struct fake_sbx *s = sbx_find(o->fd, o->id, 1);

	if (s == NULL)
		return;
	o->mutating = 1;
	s->mutating++;
	if (s->mutating > o->fd->stats.max_mutating_per_id)
		o->fd->stats.max_mutating_per_id = s->mutating;
}

static int
dirent_cmp(const void *a, const void *b)
{
	return strcmp(((const struct sbx_dirent *)a)->name,
	    ((const struct sbx_dirent *)b)->name);
}

/* ---------- snapshots (adr/0068) ---------- */

static void
snap_id(char *buf, size_t cap, const char *of, const char *name)
{
	snprintf(buf, cap, "%s.snap.%s", of, name);
}

/* dst's files become copies of src's; 0, or -1 out of memory. */
static int
files_copy(struct fake_sbx *dst, const struct fake_sbx *src)
{
	struct fake_file *f, *g;

	LIST_FOREACH(f, &src->files, link) {
		if ((g = calloc(1, sizeof(*g))) == NULL ||
		    (g->path = strdup(f->path)) == NULL ||
		    (f->len > 0 && (g->data = malloc(f->len)) == NULL)) {
			if (g != NULL)
				free(g->path);
			free(g);
			return -1;
		}
		if (f->len > 0)
			memcpy(g->data, f->data, f->len);
		g->len = f->len;
		g->mode = f->mode;
		g->mtime = f->mtime;
		LIST_INSERT_HEAD(&dst->files, g, link);
	}
	return 0;
}

static json_t *
snap_obj(const struct fake_sbx *sn)
{
	const struct fake_file *f;
	json_int_t size = 0;

	LIST_FOREACH(f, &sn->files, link)
		size += (json_int_t)f->len;
	return json_pack("{s:s, s:s, s:o, s:I, s:I}", "name", sn->snap_name,
	    "sandbox_id", sn->snap_of, "owner", sn->snap_owner[0] ?
	    json_string(sn->snap_owner) : json_null(), "size_bytes", size,
	    "created_at", (json_int_t)sn->snap_at);
}

static int
snap_cmp(const void *a, const void *b)
{
	json_t *x = *(json_t *const *)a, *y = *(json_t *const *)b;
	int c = strcmp(json_string_value(json_object_get(x, "sandbox_id")),
	    json_string_value(json_object_get(y, "sandbox_id")));

	return c != 0 ? c : strcmp(json_string_value(json_object_get(x,
	    "name")), json_string_value(json_object_get(y, "name")));
}

/* The op's effect; the JSON answer (create, list; owned) or NULL. */
static char *
fake_snap_run(struct fake_driver *fd, struct fake_op *o, struct sbx_err *err)
{
	struct fake_sbx *s = sbx_find(fd, o->id, 0), *src, *sn;
	json_t *arr, *items[256], *out;
	char sid[128], *text = NULL;
	size_t n = 0, i;

	switch (o->snap) {
	case SN_CREATE:
		if (s == NULL || s->state == SBX_STATE_ABSENT) {
			sbx_err_set(err, SBX_E_NOT_FOUND, SBX_MSG_NO_SANDBOX, o->id);
			return NULL;
		}
		snap_id(sid, sizeof(sid), o->id, o->snap_name);
		if (sbx_find(fd, sid, 0) != NULL) {
			sbx_err_set(err, SBX_E_CONFLICT, "sandbox %s has a snapshot "
			    "named %s already", o->id, o->snap_name);
			return NULL;
		}
		if ((sn = sbx_find(fd, sid, 1)) == NULL || files_copy(sn, s) == -1) {
			sbx_err_set(err, SBX_E_INTERNAL, "oom");
			return NULL;
		}
		sn->snap = 1;
		snprintf(sn->snap_of, sizeof(sn->snap_of), "%s", o->id);
		snprintf(sn->snap_name, sizeof(sn->snap_name), "%s", o->snap_name);
		snprintf(sn->snap_owner, sizeof(sn->snap_owner), "%s", o->snap_owner);
		sn->snap_at = now_ms();
		out = snap_obj(sn);
		if (o->snap_max > 0 && json_integer_value(json_object_get(out,
		    "size_bytes")) > (json_int_t)o->snap_max) {
			json_decref(out);
			files_clear(sn);
			LIST_REMOVE(sn, link);
			free(sn);
			sbx_err_set(err, SBX_E_QUOTA, "/work is over max_bytes");
			return NULL;
		}
		text = json_dumps(out, JSON_COMPACT);
		json_decref(out);
		return text;
	case SN_LIST:
		LIST_FOREACH(sn, &fd->sbxs, link)
			if (sn->snap && n < 256 && (o->id[0] == '\0' ||
			    strcmp(sn->snap_of, o->id) == 0) && (o->snap_owner[0] ==
			    '\0' || strcmp(sn->snap_owner, o->snap_owner) == 0))
				items[n++] = snap_obj(sn);
		qsort(items, n, sizeof(*items), snap_cmp);
		arr = json_array();
		for (i = 0; i < n; i++)
			json_array_append_new(arr, items[i]);
		out = json_pack("{s:o}", "snapshots", arr);
		text = json_dumps(out, JSON_COMPACT);
		json_decref(out);
		return text;
	case SN_DELETE:
		snap_id(sid, sizeof(sid), o->id, o->snap_name);
		if ((sn = sbx_find(fd, sid, 0)) == NULL) {
			sbx_err_set(err, SBX_E_NOT_FOUND, "sandbox %s has no snapshot "
			    "named %s", o->id, o->snap_name);
			return NULL;
		}
		files_clear(sn);
		LIST_REMOVE(sn, link);
		free(sn);
		return NULL;
	case SN_COPY:
		if (o->snap_has_name) {
			snap_id(sid, sizeof(sid), o->snap_from, o->snap_name);
			src = sbx_find(fd, sid, 0);
		} else {
			src = sbx_find(fd, o->snap_from, 0);
			if (src != NULL && src->state == SBX_STATE_ABSENT)
				src = NULL;
		}
		if (src == NULL) {
			sbx_err_set(err, SBX_E_NOT_FOUND, "no such snapshot or "
			    "sandbox");
			return NULL;
		}
		if (s != NULL && (s->state != SBX_STATE_ABSENT ||
		    !LIST_EMPTY(&s->files))) {
			sbx_err_set(err, SBX_E_CONFLICT, "sandbox %s has a /work "
			    "already: a copy makes a new sandbox only", o->id);
			return NULL;
		}
		if ((s = sbx_find(fd, o->id, 1)) == NULL || files_copy(s, src) == -1)
			sbx_err_set(err, SBX_E_INTERNAL, "oom");
		return NULL;
	}
	return NULL;
}

static struct fake_op *
snap_op(struct sbx_driver *d, const char *id, enum fake_snap what,
    const char *name, struct sbx_err *err)
{
	struct fake_op *o;

	if (name != NULL && !sbx_snapshot_name_valid(name)) {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "%s", SBX_MSG_BAD_SNAPSHOT);
		return NULL;
	}
	if ((o = op_new((struct fake_driver *)d, SBX_FAKE_SNAPSHOT,
	    what == SN_CREATE || what == SN_LIST ? K_JSON : K_DONE, id,
	    err)) == NULL)
		return NULL;
	o->snap = what;
	if (name != NULL) {
		snprintf(o->snap_name, sizeof(o->snap_name), "%s", name);
		o->snap_has_name = 1;
	}
	return o;
}

static struct sbx_op *
fake_snapshot_create(struct sbx_driver *d, const char *id,
    const struct sbx_snapshot_req *req, sbx_json_cb cb, void *arg,
    struct sbx_err *err)
{
	struct fake_op *o;

	if ((o = snap_op(d, id, SN_CREATE, req != NULL ? req->name : "",
	    err)) == NULL)
		return NULL;
	snprintf(o->snap_owner, sizeof(o->snap_owner), "%s",
	    req->owner != NULL ? req->owner : "");
	o->snap_max = req->max_bytes;
	o->json_cb = cb;
	o->arg = arg;
	op_arm(o);
	return &o->base;
}

static struct sbx_op *
fake_snapshot_list(struct sbx_driver *d, const char *id, const char *owner,
    sbx_json_cb cb, void *arg, struct sbx_err *err)
{
	struct fake_op *o;

	if ((o = snap_op(d, id, SN_LIST, NULL, err)) == NULL)
		return NULL;
	snprintf(o->snap_owner, sizeof(o->snap_owner), "%s",
	    owner != NULL ? owner : "");
	o->json_cb = cb;
	o->arg = arg;
	op_arm(o);
	return &o->base;
}

static struct sbx_op *
fake_snapshot_delete(struct sbx_driver *d, const char *id, const char *name,
    sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	struct fake_op *o;

	if ((o = snap_op(d, id, SN_DELETE, name != NULL ? name : "",
	    err)) == NULL)
		return NULL;
	o->done_cb = cb;
	o->arg = arg;
	op_arm(o);
	return &o->base;
}

static struct sbx_op *
fake_snapshot_copy(struct sbx_driver *d, const char *id, const char *from,
    const char *name, sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	struct fake_op *o;

	if (!id_ok(from)) {
		sbx_err_bad_id(err);
		return NULL;
	}
	if ((o = snap_op(d, id, SN_COPY, name, err)) == NULL)
		return NULL;
	snprintf(o->snap_from, sizeof(o->snap_from), "%s", from);
	o->done_cb = cb;
	o->arg = arg;
	op_arm(o);
	return &o->base;
}

/* Terminal callbacks of the non-stream operations. */
static void
finish_simple(struct fake_op *o)
{
	struct fake_driver *fd = o->fd;
	struct fake_sbx *s = sbx_find(fd, o->id, 0);
	struct sbx_status st, *all = NULL;
	struct sbx_dirent *ents = NULL;
	struct sbx_health h;
	struct sbx_err err;
	size_t n = 0, cap = 0;
	int list_trunc = 0;
	struct fake_file *f;
	struct fake_op copy = *o;
	const struct sbx_err *e = sbx_err_is_set(&o->fail) ? &o->fail : NULL;
	char *snap_text = NULL;

	sbx_err_clear(&err);
	/* The op is freed before its callback: the handle is dead for the caller. */
	if (e != NULL)
		err = *e;
	else {
		switch (o->op) {
		case SBX_FAKE_ENSURE:
			if (s == NULL)
				s = sbx_find(fd, o->id, 1);
			if (s->state == SBX_STATE_ABSENT ||
			    (s->egress != o->spec.egress)) {
				s->generation++;
				fd->stats.containers_created++;
				/* a new container is younger than the one it
				 * replaces, even within one millisecond */
				s->created_at_ms = now_ms() > s->created_at_ms ?
				    now_ms() : s->created_at_ms + 1;
			}
			s->state = SBX_STATE_RUNNING;
			s->egress = o->spec.egress;
			snprintf(s->image, sizeof(s->image), "%s",
			    o->spec_image[0] ? o->spec_image : "sbx-default");
			break;
		case SBX_FAKE_STOP:
			if (s == NULL || s->state == SBX_STATE_ABSENT)
				sbx_err_set(&err, SBX_E_NOT_FOUND,
				    "No such sandbox.");
			else
				s->state = SBX_STATE_STOPPED;
			break;
		case SBX_FAKE_RECOVER:
			/* Fake execs live in this process: nothing outlives it. */
			break;
		case SBX_FAKE_DESTROY:
			if (s != NULL) {
				s->state = SBX_STATE_ABSENT;
				files_clear(s);
			}
			break;
		case SBX_FAKE_WRITE:
			if (s == NULL || s->state == SBX_STATE_ABSENT) {
				sbx_err_set(&err, SBX_E_NOT_FOUND,
				    "No such sandbox.");
				break;
			}
			if (s->state != SBX_STATE_RUNNING) {
				sbx_err_set(&err, SBX_E_NOT_RUNNING,
				    "Sandbox is stopped.");
				break;
			}
			if ((f = file_find(s, o->path)) == NULL) {
				if ((f = calloc(1, sizeof(*f))) == NULL ||
				    (f->path = strdup(o->path)) == NULL) {
					free(f);
					sbx_err_set(&err, SBX_E_INTERNAL, "oom");
					break;
				}
				LIST_INSERT_HEAD(&s->files, f, link);
			}
			free(f->data);
			f->data = o->wdata;
			f->len = o->wlen;
			o->wdata = NULL;
			f->mode = o->wmode ? o->wmode : 0644;
			f->mtime = now_ms() / 1000;
			break;
		case SBX_FAKE_LIST:
			if (s == NULL || s->state == SBX_STATE_ABSENT) {
				sbx_err_set(&err, SBX_E_NOT_FOUND,
				    "No such sandbox.");
				break;
			}
			LIST_FOREACH(f, &s->files, link) {
				size_t pl = strlen(o->path);
				const char *rest;
				if (strncmp(f->path, o->path, pl) != 0 ||
				    f->path[pl] != '/')
					continue;
				rest = f->path + pl + 1;
				if (n == cap) {
					struct sbx_dirent *ne;
					cap = cap ? cap * 2 : 8;
					ne = realloc(ents, cap * sizeof(*ents));
					if (ne == NULL)
						break;
					ents = ne;
				}
				memset(&ents[n], 0, sizeof(ents[n]));
				if (strchr(rest, '/') != NULL) {
					snprintf(ents[n].name,
					    sizeof(ents[n].name), "%.*s",
					    (int)(strchr(rest, '/') - rest), rest);
					ents[n].type = "dir";
					ents[n].mode = 0755;
				} else {
					snprintf(ents[n].name,
					    sizeof(ents[n].name), "%s", rest);
					ents[n].type = "file";
					ents[n].size = (int64_t)f->len;
					ents[n].mode = f->mode;
				}
				ents[n].mtime = f->mtime;
				n++;
			}
			/* One page, as the vtable says: sorted, unique names after
			 * list_after, at most list_limit. */
			if (n > 0) {
				size_t i, m = 0;

				qsort(ents, n, sizeof(*ents), dirent_cmp);
				for (i = 0; i < n; i++) {
					if (strcmp(ents[i].name, o->list_after) <= 0 ||
					    (m > 0 && strcmp(ents[m - 1].name,
					    ents[i].name) == 0))
						continue;
					ents[m++] = ents[i];
				}
				n = m;
				if (o->list_limit > 0 && n > o->list_limit) {
					n = o->list_limit;
					list_trunc = 1;
				}
			}
			break;
		case SBX_FAKE_SNAPSHOT:
			snap_text = fake_snap_run(fd, o, &err);
			break;
		default:
			break;
		}
	}
	op_free(o);
	switch (copy.kind) {
	case K_JSON:
		copy.json_cb(copy.arg, sbx_err_is_set(&err) ? &err : NULL,
		    sbx_err_is_set(&err) ? NULL : snap_text);
		break;
	case K_STATUS:
		fill_status(s, copy.id, &st);
		if (copy.op == SBX_FAKE_STATUS_USAGE)
			fill_usage(s, &st.usage);
		copy.status_cb(copy.arg, sbx_err_is_set(&err) ? &err : NULL,
		    sbx_err_is_set(&err) ? NULL : &st);
		break;
	case K_DONE:
		copy.done_cb(copy.arg, sbx_err_is_set(&err) ? &err : NULL);
		break;
	case K_LIST:
		copy.list_cb(copy.arg, sbx_err_is_set(&err) ? &err : NULL,
		    ents, sbx_err_is_set(&err) ? 0 : n,
		    !sbx_err_is_set(&err) && list_trunc);
		break;
	case K_SANDBOXES:
		if (!sbx_err_is_set(&err)) {
			LIST_FOREACH(s, &fd->sbxs, link)
				if (s->state != SBX_STATE_ABSENT)
					cap++;
			all = calloc(cap ? cap : 1, sizeof(*all));
			LIST_FOREACH(s, &fd->sbxs, link)
				if (all != NULL && s->state != SBX_STATE_ABSENT)
					fill_status(s, s->id, &all[n++]);
		}
		copy.sandboxes_cb(copy.arg, sbx_err_is_set(&err) ? &err : NULL,
		    all, n);
		break;
	case K_HEALTH:
		memset(&h, 0, sizeof(h));
		h.ok = fd->health_reason[0] == '\0';
		snprintf(h.status, sizeof(h.status), "%s",
		    h.ok ? "ok" : "degraded");
		snprintf(h.reason, sizeof(h.reason), "%s", fd->health_reason);
		snprintf(h.runtime, sizeof(h.runtime), "fake");
		snprintf(h.api_version, sizeof(h.api_version), "1.41");
		copy.health_cb(copy.arg, sbx_err_is_set(&err) ? &err : NULL,
		    sbx_err_is_set(&err) ? NULL : &h);
		break;
	case K_STREAM:
		break;
	}
	free(ents);
	free(all);
	free(snap_text);
}

/* One step of a stream. Returns 1 when the op ended (freed). */
static int
stream_step(struct fake_op *o)
{
	struct sbx_sink sink = o->sink;
	struct sbx_fake_step *st;
	struct sbx_exit ex;
	struct sbx_err err;
	char exec_id[32];
	unsigned reps;

	if (!o->started && sbx_err_is_set(&o->fail)) {
		err = o->fail;
		op_free(o);
		sink.error(sink.arg, &err);
		return 1;
	}
	st = o->step < o->nsteps ? &o->steps[o->step] : NULL;
	if (!o->started && !o->is_exec) {
		/* Like the engine driver, a read has no start event. */
		o->started = 1;
	} else if (!o->started && st != NULL &&
	    st->kind != SBX_FAKE_STEP_ERROR) {
		o->started = 1;
		snprintf(exec_id, sizeof(exec_id), "fake-exec-%u",
		    ++o->fd->exec_seq);
		o->in_cb = 1;
		sink.start(sink.arg, exec_id);
		o->in_cb = 0;
		goto after;
	}
	if (st == NULL || st->kind == SBX_FAKE_STEP_HANG)
		return 0;
	switch (st->kind) {
	case SBX_FAKE_STEP_OUTPUT:
		reps = st->repeat ? st->repeat : 1;
		if (o->cap > 0 && o->emitted + (int64_t)st->len > o->cap) {
			/* Output cap (SPEC §4): what fits, then killed. */
			size_t fit = (size_t)(o->cap - o->emitted);

			if (fit > 0) {
				o->fd->stats.outputs++;
				o->in_cb = 1;
				sink.output(sink.arg, st->stream,
				    (const unsigned char *)st->data, fit);
				o->in_cb = 0;
				if (o->cancelled) {
					op_free(o);
					return 1;
				}
			}
			memset(&ex, 0, sizeof(ex));
			ex.code = 137;
			ex.signal = "KILL";
			ex.truncated = 1;
			ex.duration_ms = 1;
			op_free(o);
			sink.exit(sink.arg, &ex);
			return 1;
		}
		o->emitted += (int64_t)st->len;
		o->in_cb = 1;
		o->fd->stats.outputs++;
		if (st->len > 0)
			sink.output(sink.arg, st->stream,
			    (const unsigned char *)st->data, st->len);
		o->in_cb = 0;
		if (++o->rep >= reps) {
			o->rep = 0;
			o->step++;
		}
		break;
	case SBX_FAKE_STEP_EXIT:
		memset(&ex, 0, sizeof(ex));
		ex.code = st->code;
		ex.signal = st->signal;
		ex.truncated = st->truncated;
		ex.duration_ms = 1;
		/* st points into o->steps: copy what the sink needs first. */
		{
			char sig[16] = "";
			if (st->signal != NULL) {
				snprintf(sig, sizeof(sig), "%s", st->signal);
				ex.signal = sig;
			}
			op_free(o);
			sink.exit(sink.arg, &ex);
		}
		return 1;
	case SBX_FAKE_STEP_ERROR:
		sbx_err_set(&err, st->err_code ? st->err_code : SBX_E_INTERNAL,
		    "%s", st->err_message ? st->err_message : "fake error");
		op_free(o);
		sink.error(sink.arg, &err);
		return 1;
	default:
		return 0;
	}
after:
	if (o->cancelled) {
		op_free(o);
		return 1;
	}
	return 0;
}

static void
op_tick(evutil_socket_t sock, short what, void *arg)
{
	struct fake_op *o = arg;

	(void)sock;
	(void)what;
	if (o->kind != K_STREAM) {
		finish_simple(o);
		return;
	}
	if (o->paused)
		return;
	if (stream_step(o))
		return;
	if (!o->paused && o->step < o->nsteps &&
	    o->steps[o->step].kind != SBX_FAKE_STEP_HANG)
		op_arm(o);
}

/* Copies steps and their data into o. */
static int
steps_copy(const struct sbx_fake_step *in, size_t n, struct sbx_fake_step **out,
    unsigned char **data)
{
	size_t i, total = 0, off = 0;

	for (i = 0; i < n; i++)
		if (in[i].kind == SBX_FAKE_STEP_OUTPUT && in[i].data != NULL)
			total += in[i].len ? in[i].len : strlen(in[i].data);
	*out = calloc(n ? n : 1, sizeof(**out));
	*data = malloc(total ? total : 1);
	if (*out == NULL || *data == NULL) {
		free(*out);
		free(*data);
		*out = NULL;
		*data = NULL;
		return -1;
	}
	for (i = 0; i < n; i++) {
		(*out)[i] = in[i];
		if (in[i].kind == SBX_FAKE_STEP_OUTPUT && in[i].data != NULL) {
			size_t l = in[i].len ? in[i].len : strlen(in[i].data);
			memcpy(*data + off, in[i].data, l);
			(*out)[i].data = (const char *)*data + off;
			(*out)[i].len = l;
			off += l;
		} else if (in[i].kind == SBX_FAKE_STEP_OUTPUT)
			(*out)[i].len = 0;
	}
	return 0;
}

static struct sbx_op *
fake_ensure(struct sbx_driver *d, const char *id, const struct sbx_spec *spec,
    sbx_status_cb cb, void *arg, struct sbx_err *err)
{
	struct fake_driver *fd = (struct fake_driver *)d;
	struct fake_op *o;

	if ((o = op_new(fd, SBX_FAKE_ENSURE, K_STATUS, id, err)) == NULL)
		return NULL;
	o->status_cb = cb;
	o->arg = arg;
	if (spec != NULL) {
		o->spec = *spec;
		if (spec->image != NULL)
			snprintf(o->spec_image, sizeof(o->spec_image), "%s",
			    spec->image);
	}
	o->spec.image = NULL;
	mutating_begin(o);
	op_arm(o);
	return &o->base;
}

static struct sbx_op *
fake_status(struct sbx_driver *d, const char *id, sbx_status_cb cb, void *arg,
    struct sbx_err *err)
{
	struct fake_op *o;

	if ((o = op_new((struct fake_driver *)d, SBX_FAKE_STATUS, K_STATUS, id,
	    err)) == NULL)
		return NULL;
	o->status_cb = cb;
	o->arg = arg;
	op_arm(o);
	return &o->base;
}

/* status_usage of the fake: its in-memory files counted, running only;
 * bytes = apparent_bytes (no blocks in memory), entries = files. */
static void
fill_usage(const struct fake_sbx *s, struct sbx_usage *u)
{
	const struct fake_file *f;

	memset(u, 0, sizeof(*u));
	if (s == NULL || s->state != SBX_STATE_RUNNING)
		return;
	u->present = 1;
	LIST_FOREACH(f, &s->files, link) {
		u->files++;
		u->entries++;
		u->apparent_bytes += (int64_t)f->len;
	}
	u->bytes = u->apparent_bytes;
}

static struct sbx_op *
fake_status_usage(struct sbx_driver *d, const char *id, sbx_status_cb cb,
    void *arg, struct sbx_err *err)
{
	struct fake_op *o;

	if ((o = op_new((struct fake_driver *)d, SBX_FAKE_STATUS_USAGE,
	    K_STATUS, id, err)) == NULL)
		return NULL;
	o->status_cb = cb;
	o->arg = arg;
	op_arm(o);
	return &o->base;
}

static struct sbx_op *
stream_new(struct fake_driver *fd, enum sbx_fake_op op, const char *id,
    const struct sbx_sink *sink, const struct sbx_fake_step *steps, size_t n,
    struct sbx_err *err)
{
	struct fake_op *o;
	struct fake_sbx *s;
	struct sbx_fake_step fail;

	if ((o = op_new(fd, op, K_STREAM, id, err)) == NULL)
		return NULL;
	o->sink = *sink;
	s = sbx_find(fd, id, 0);
	memset(&fail, 0, sizeof(fail));
	if (!sbx_err_is_set(&o->fail) && (s == NULL ||
	    s->state == SBX_STATE_ABSENT))
		sbx_err_set(&o->fail, SBX_E_NOT_FOUND, "No such sandbox.");
	else if (!sbx_err_is_set(&o->fail) && s->state != SBX_STATE_RUNNING)
		sbx_err_set(&o->fail, SBX_E_NOT_RUNNING, "Sandbox is stopped.");
	if (steps_copy(steps, n, &o->steps, &o->stepdata) == -1) {
		op_free(o);
		sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
		return NULL;
	}
	o->nsteps = n;
	op_arm(o);
	return &o->base;
}

static struct sbx_op *
fake_exec(struct sbx_driver *d, const char *id, const struct sbx_exec_req *req,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	struct fake_driver *fd = (struct fake_driver *)d;
	struct sbx_fake_exec_seen *seen = &fd->last_exec;
	struct sbx_op *op;

	if (req == NULL || req->argv == NULL || req->argv[0] == NULL) {
		fd->stats.calls[SBX_FAKE_EXEC]++;
		sbx_err_set(err, SBX_E_BAD_REQUEST, "argv is empty.");
		return NULL;
	}
	if (req->cwd != NULL && !path_ok(req->cwd)) {
		fd->stats.calls[SBX_FAKE_EXEC]++;
		sbx_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "cwd outside /work.");
		return NULL;
	}
	memset(seen, 0, sizeof(*seen));
	snprintf(seen->id, sizeof(seen->id), "%s", id ? id : "");
	fake_join(seen->argv, sizeof(seen->argv), req->argv, " ");
	fake_join(seen->env, sizeof(seen->env), req->env, ";");
	snprintf(seen->cwd, sizeof(seen->cwd), "%s", req->cwd ? req->cwd : "");
	seen->stdin_len = req->stdin_len;
	if (req->stdin_data != NULL)
		memcpy(seen->stdin_data, req->stdin_data,
		    req->stdin_len < sizeof(seen->stdin_data) - 1 ?
		    req->stdin_len : sizeof(seen->stdin_data) - 1);
	seen->timeout_ms = req->timeout_ms;
	seen->output_cap = req->output_cap;
	op = stream_new(fd, SBX_FAKE_EXEC, id, sink, fd->script, fd->nscript,
	    err);
	if (op != NULL) {
		((struct fake_op *)op)->is_exec = 1;
		((struct fake_op *)op)->cap = req->output_cap;
		fd->stats.execs_live++;
	}
	return op;
}

static struct sbx_op *
fake_read(struct sbx_driver *d, const char *id, const char *path,
    const struct sbx_sink *sink, struct sbx_err *err)
{
	struct fake_driver *fd = (struct fake_driver *)d;
	struct fake_sbx *s;
	struct fake_file *f = NULL;
	struct sbx_fake_step steps[2];
	size_t n = 0;

	if (!path_ok(path)) {
		fd->stats.calls[SBX_FAKE_READ]++;
		sbx_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "Path outside /work.");
		return NULL;
	}
	memset(steps, 0, sizeof(steps));
	if ((s = sbx_find(fd, id, 0)) != NULL)
		f = file_find(s, path);
	if (s != NULL && s->state == SBX_STATE_RUNNING && f == NULL) {
		steps[n].kind = SBX_FAKE_STEP_ERROR;
		steps[n].err_code = SBX_E_NOT_FOUND;
		steps[n++].err_message = "No such file.";
	} else {
		if (f != NULL && f->len > 0) {
			steps[n].kind = SBX_FAKE_STEP_OUTPUT;
			steps[n].stream = 1;
			steps[n].data = (const char *)f->data;
			steps[n++].len = f->len;
		}
		steps[n++].kind = SBX_FAKE_STEP_EXIT;
	}
	return stream_new(fd, SBX_FAKE_READ, id, sink, steps, n, err);
}

static struct sbx_op *
fake_write(struct sbx_driver *d, const char *id, const char *path,
    uint32_t mode, struct evbuffer *body, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct fake_driver *fd = (struct fake_driver *)d;
	struct fake_op *o;
	size_t len;

	if (!path_ok(path)) {
		fd->stats.calls[SBX_FAKE_WRITE]++;
		sbx_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "Path outside /work.");
		return NULL;
	}
	if ((o = op_new(fd, SBX_FAKE_WRITE, K_DONE, id, err)) == NULL)
		return NULL;
	snprintf(o->path, sizeof(o->path), "%s", path);
	len = body != NULL ? evbuffer_get_length(body) : 0;
	if ((o->wdata = malloc(len ? len : 1)) == NULL) {
		op_free(o);
		sbx_err_set(err, SBX_E_INTERNAL, "Out of memory.");
		return NULL;
	}
	if (len > 0)
		evbuffer_remove(body, o->wdata, len);
	o->wlen = len;
	o->wmode = mode;
	o->done_cb = cb;
	o->arg = arg;
	op_arm(o);
	return &o->base;
}

static struct sbx_op *
fake_list(struct sbx_driver *d, const char *id, const char *path,
    const struct sbx_list_page *page, sbx_list_cb cb, void *arg,
    struct sbx_err *err)
{
	struct fake_driver *fd = (struct fake_driver *)d;
	struct fake_op *o;

	if (!path_ok(path)) {
		fd->stats.calls[SBX_FAKE_LIST]++;
		sbx_err_set(err, SBX_E_PATH_OUTSIDE_WORK, "Path outside /work.");
		return NULL;
	}
	if ((o = op_new(fd, SBX_FAKE_LIST, K_LIST, id, err)) == NULL)
		return NULL;
	snprintf(o->path, sizeof(o->path), "%s", path);
	if (page != NULL && page->after != NULL)
		snprintf(o->list_after, sizeof(o->list_after), "%s", page->after);
	o->list_limit = page != NULL ? page->limit : 0;
	o->list_cb = cb;
	o->arg = arg;
	op_arm(o);
	return &o->base;
}

static struct sbx_op *
fake_done_op(struct sbx_driver *d, enum sbx_fake_op op, const char *id,
    sbx_done_cb cb, void *arg, struct sbx_err *err)
{
	struct fake_op *o;

	if ((o = op_new((struct fake_driver *)d, op, K_DONE, id, err)) == NULL)
		return NULL;
	o->done_cb = cb;
	o->arg = arg;
	mutating_begin(o);
	op_arm(o);
	return &o->base;
}

static struct sbx_op *
fake_stop(struct sbx_driver *d, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	return fake_done_op(d, SBX_FAKE_STOP, id, cb, arg, err);
}

static struct sbx_op *
fake_destroy(struct sbx_driver *d, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	return fake_done_op(d, SBX_FAKE_DESTROY, id, cb, arg, err);
}

static struct sbx_op *
fake_recover(struct sbx_driver *d, const char *id, sbx_done_cb cb, void *arg,
    struct sbx_err *err)
{
	struct fake_op *o;

	if ((o = op_new((struct fake_driver *)d, SBX_FAKE_RECOVER, K_DONE, id,
	    err)) == NULL)
		return NULL;
	o->done_cb = cb;
	o->arg = arg;
	op_arm(o);
	return &o->base;
}

static struct sbx_op *
fake_list_sandboxes(struct sbx_driver *d, sbx_sandboxes_cb cb, void *arg,
    struct sbx_err *err)
{
	struct fake_op *o;

	if ((o = op_new((struct fake_driver *)d, SBX_FAKE_LIST_SANDBOXES,
	    K_SANDBOXES, NULL, err)) == NULL)
		return NULL;
	o->sandboxes_cb = cb;
	o->arg = arg;
	op_arm(o);
	return &o->base;
}

static struct sbx_op *
fake_health(struct sbx_driver *d, sbx_health_cb cb, void *arg,
    struct sbx_err *err)
{
	struct fake_op *o;

	if ((o = op_new((struct fake_driver *)d, SBX_FAKE_HEALTH, K_HEALTH,
	    NULL, err)) == NULL)
		return NULL;
	o->health_cb = cb;
	o->arg = arg;
	op_arm(o);
	return &o->base;
}

static void
fake_cancel(struct sbx_driver *d, struct sbx_op *op)
{
	struct fake_driver *fd = (struct fake_driver *)d;
	struct fake_op *o = (struct fake_op *)op;

	if (((struct fake_head *)op)->is_session) {
		fake_session_cancel(op);
		return;
	}
	if (o->cancelled)
		return;
	fd->stats.cancels++;
	if (o->is_exec)
		fd->stats.exec_cancels++;
	if (o->in_cb) {
		/* Freed by stream_step once the callback returned. */
		o->cancelled = 1;
		event_del(o->ev);
		return;
	}
	op_free(o);
}

static void
fake_pause(struct sbx_driver *d, struct sbx_op *op)
{
	struct fake_op *o = (struct fake_op *)op;

	if (((struct fake_head *)op)->is_session) {
		fake_session_pause(op);
		return;
	}
	if (o->kind != K_STREAM || o->paused)
		return;
	((struct fake_driver *)d)->stats.pauses++;
	o->paused = 1;
	event_del(o->ev);
}

static void
fake_resume(struct sbx_driver *d, struct sbx_op *op)
{
	struct fake_op *o = (struct fake_op *)op;

	if (((struct fake_head *)op)->is_session) {
		fake_session_resume(op);
		return;
	}
	if (o->kind != K_STREAM || !o->paused)
		return;
	((struct fake_driver *)d)->stats.resumes++;
	o->paused = 0;
	if (!o->cancelled)
		op_arm(o);
}

static void
fake_free(struct sbx_driver *d)
{
	struct fake_driver *fd = (struct fake_driver *)d;
	struct fake_sbx *s;
	struct fake_op *o;

	while ((o = TAILQ_FIRST(&fd->ops)) != NULL)
		op_free(o);
	fake_sessions_free(&fd->sessions);
	while ((s = LIST_FIRST(&fd->sbxs)) != NULL) {
		LIST_REMOVE(s, link);
		files_clear(s);
		free(s);
	}
	free(fd->script);
	free(fd->scriptdata);
	free(fd);
}

/* A session: the checks every op makes here (calls, fail_next, the
 * sandbox's state), then the session itself (driver_fake_session.c). */
static struct sbx_op *
fake_session(struct sbx_driver *d, const char *id,
    const struct sbx_session_req *req, const struct sbx_sink *sink,
    struct sbx_err *err)
{
	struct fake_driver *fd = (struct fake_driver *)d;
	enum sbx_fake_op op = SBX_FAKE_SESSION;
	struct fake_sbx *s;
	struct sbx_err fail;

	fd->stats.calls[op]++;
	sbx_err_clear(&fail);
	if (fd->fail_code[op][0] != '\0') {
		sbx_err_set(fd->fail_sync[op] ? err : &fail, fd->fail_code[op],
		    "The fake was told to fail.");
		fd->fail_code[op][0] = '\0';
		if (fd->fail_sync[op])
			return NULL;
	}
	if (id == NULL || !id_ok(id)) {
		sbx_err_bad_id(err);
		return NULL;
	}
	s = sbx_find(fd, id, 0);
	if (!sbx_err_is_set(&fail) && (s == NULL ||
	    s->state == SBX_STATE_ABSENT))
		sbx_err_set(&fail, SBX_E_NOT_FOUND, "No such sandbox.");
	else if (!sbx_err_is_set(&fail) && s->state != SBX_STATE_RUNNING)
		sbx_err_set(&fail, SBX_E_NOT_RUNNING, "Sandbox is stopped.");
	return fake_session_new(d, &fd->sessions, id, req, sink, &fail, err);
}

static const struct sbx_driver_ops fake_ops = {
	.name = "fake",
	.ensure = fake_ensure,
	.status = fake_status,
	.status_usage = fake_status_usage,
	.exec = fake_exec,
	.read = fake_read,
	.write = fake_write,
	.list = fake_list,
	.stop = fake_stop,
	.destroy = fake_destroy,
	.recover = fake_recover,
	.list_sandboxes = fake_list_sandboxes,
	.health = fake_health,
	.cancel = fake_cancel,
	.pause = fake_pause,
	.resume = fake_resume,
	.free = fake_free,
	.session = fake_session,
	.session_write = fake_session_write,
	.session_room = fake_session_room,
	.session_close_input = fake_session_close_input,
	.session_control = fake_session_control,
	.snapshot_create = fake_snapshot_create,   /* adr/0068 */
	.snapshot_list = fake_snapshot_list,
	.snapshot_delete = fake_snapshot_delete,
	.snapshot_copy = fake_snapshot_copy,
};

struct sbx_driver *
sbx_fake_driver_new(struct event_base *base)
{
	static const struct sbx_fake_step hello[] = {
		{ .kind = SBX_FAKE_STEP_OUTPUT, .stream = 1, .data = "hello\n" },
		{ .kind = SBX_FAKE_STEP_EXIT, .code = 0 },
	};
	struct fake_driver *fd;

	if ((fd = calloc(1, sizeof(*fd))) == NULL)
		return NULL;
	fd->base.ops = &fake_ops;
	fd->base.base = base;
	LIST_INIT(&fd->sbxs);
	TAILQ_INIT(&fd->ops);
	fake_sessions_init(&fd->sessions);
	if (sbx_fake_set_exec_script(&fd->base, hello, 2) == -1) {
		free(fd);
		return NULL;
	}
	return &fd->base;
}

int
sbx_fake_set_exec_script(struct sbx_driver *d, const struct sbx_fake_step *steps,
    size_t n)
{
	struct fake_driver *fd = (struct fake_driver *)d;
	struct sbx_fake_step *ns = NULL;
	unsigned char *nd = NULL;

	if (n == 0 || steps[n - 1].kind == SBX_FAKE_STEP_OUTPUT)
		return -1;
	if (steps_copy(steps, n, &ns, &nd) == -1)
		return -1;
	free(fd->script);
	free(fd->scriptdata);
	fd->script = ns;
	fd->scriptdata = nd;
	fd->nscript = n;
	return 0;
}

void
sbx_fake_set_delay_ms(struct sbx_driver *d, unsigned ms)
{
	((struct fake_driver *)d)->delay_ms = ms;
}

void
sbx_fake_fail_next(struct sbx_driver *d, enum sbx_fake_op op, const char *code,
    int sync)
{
	struct fake_driver *fd = (struct fake_driver *)d;

	snprintf(fd->fail_code[op], sizeof(fd->fail_code[op]), "%s", code);
	fd->fail_sync[op] = sync;
}

void
sbx_fake_set_health(struct sbx_driver *d, const char *reason)
{
	struct fake_driver *fd = (struct fake_driver *)d;

	snprintf(fd->health_reason, sizeof(fd->health_reason), "%s",
	    reason ? reason : "");
}

const struct sbx_fake_stats *
sbx_fake_stats(struct sbx_driver *d)
{
	return &((struct fake_driver *)d)->stats;
}

const struct sbx_fake_exec_seen *
sbx_fake_last_exec(struct sbx_driver *d)
{
	return &((struct fake_driver *)d)->last_exec;
}

int
sbx_fake_put_file(struct sbx_driver *d, const char *id, const char *path,
    const void *data, size_t len)
{
	struct fake_sbx *s = sbx_find((struct fake_driver *)d, id, 0);
	struct fake_file *f;

	if (s == NULL || s->state == SBX_STATE_ABSENT)
		return -1;
	if ((f = file_find(s, path)) == NULL) {
		if ((f = calloc(1, sizeof(*f))) == NULL)
			return -1;
		if ((f->path = strdup(path)) == NULL) {
			free(f);
			return -1;
		}
		LIST_INSERT_HEAD(&s->files, f, link);
	}
	free(f->data);
	if ((f->data = malloc(len ? len : 1)) == NULL) {
		f->len = 0;
		return -1;
	}
	memcpy(f->data, data, len);
	f->len = len;
	f->mode = 0644;
	f->mtime = now_ms() / 1000;
	return 0;
}

long
sbx_fake_get_file(struct sbx_driver *d, const char *id, const char *path,
    void *buf, size_t cap)
{
	struct fake_sbx *s = sbx_find((struct fake_driver *)d, id, 0);
	struct fake_file *f;

	if (s == NULL || (f = file_find(s, path)) == NULL)
		return -1;
	memcpy(buf, f->data, f->len < cap ? f->len : cap);
	return (long)f->len;
}

const struct sbx_fake_session_seen *
sbx_fake_session_seen(struct sbx_driver *d)
{
	return &((struct fake_driver *)d)->sessions.seen;
}

void
sbx_fake_set_session_window(struct sbx_driver *d, size_t bytes)
{
	((struct fake_driver *)d)->sessions.window = bytes > 0 ? bytes :
	    SBX_FAKE_SESSION_WINDOW;
}

struct sbx_op *
sbx_fake_session_latest(struct sbx_driver *d)
{
	struct fake_sessions *reg = &((struct fake_driver *)d)->sessions;
	struct fake_head *h;

	h = (struct fake_head *)TAILQ_LAST(&reg->live, fake_sess_list);
	return h != NULL ? &h->base : NULL;
}

enum sbx_state
sbx_fake_state(struct sbx_driver *d, const char *id)
{
	struct fake_sbx *s = sbx_find((struct fake_driver *)d, id, 0);

	return s != NULL ? s->state : SBX_STATE_ABSENT;
}
