/* api_execs_load.c - sandbox-api resource execs after a restart: records, segments and tickets read back from state_dir/execs, the ticket key, open and close (ADR 0015). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <sodium.h>

#include "api_int.h"
#include "sbx_log.h"
#include "sbx_ndjson.h"
#include "sbx_proto.h"
#include "sbx_sse.h"
#include "sbx_token.h"
#include "sbx_time.h"
#include "api_execs_int.h"

/* ------------------------------------------------------------------ */
/* Loading after a restart                                             */

/* Scans segment fd (size bytes): the last id of a whole event, the length
 * of the whole events. */
static int
seg_scan(int fd, uint64_t *last_id, uint64_t *whole)
{
	struct stat st;
	char *buf;
	size_t len, pos = 0, end;
	const char *nn;
	unsigned long long id;

	*last_id = 0;
	*whole = 0;
	if (fstat(fd, &st) == -1)
		return -1;
	len = (size_t)st.st_size;
	if ((buf = malloc(len + 1)) == NULL)
		return -1;
	if (pread(fd, buf, len, 0) != (ssize_t)len) {
		free(buf);
		return -1;
	}
	buf[len] = '\0';
	while (pos < len) {
		if (sscanf(buf + pos, "id: %llu\n", &id) != 1)
			break;
		nn = memmem(buf + pos, len - pos, "\n\n", 2);
		if (nn == NULL)
			break;
		end = (size_t)(nn - buf) + 2;
		*last_id = id;
		*whole = end;
		pos = end;
	}
	free(buf);
	return 0;
}

static int
cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static void
tickets_load(struct api_exec *x)
{
	char path[1024], line[256], hex[65], who[API_NAME_MAX + 1];
	long long exp;
	struct ticket *t;
	FILE *f;
	size_t bl;

	ax_exec_path(path, sizeof(path), x, "tickets");
	if ((f = fopen(path, "re")) == NULL)
		return;
	while (fgets(line, sizeof(line), f) != NULL) {
		if (sscanf(line, "%64s %lld %63s", hex, &exp, who) != 3 ||
		    exp < sbx_wall_ms())
			continue;
		if ((t = calloc(1, sizeof(*t))) == NULL)
			break;
		if (sodium_hex2bin(t->hash, sizeof(t->hash), hex, 64, NULL, &bl,
		    NULL) != 0 || bl != 32) {
			free(t);
			continue;
		}
		t->expires_ms = exp;
		snprintf(t->principal, sizeof(t->principal), "%s", who);
		t->next = x->tickets;
		x->tickets = t;
	}
	sodium_memzero(hex, sizeof(hex));
	fclose(f);
}

/* Loads one exec directory; a running one becomes failed (api_restarted). */
static struct api_exec *
exec_load(struct api_server *s, const char *id)
{
	struct api_exec *x = NULL;
	json_t *m = NULL, *v, *log;
	char path[1024];
	uint64_t *firsts = NULL, last, whole;
	size_t nf = 0, capf = 0, i;
	struct dirent *de;
	struct seg *g;
	DIR *d = NULL;
	int fd, migrate = 0;

	if ((x = calloc(1, sizeof(*x))) == NULL)
		return NULL;
	x->s = s;
	x->fd = -1;
	snprintf(x->id, sizeof(x->id), "%s", id);
	ax_exec_path(path, sizeof(path), x, "meta.json");
	if ((m = json_load_file(path, 0, NULL)) == NULL ||
	    !json_is_string(json_object_get(m, "npc")) ||
	    !json_is_string(json_object_get(m, "state")))
		goto fail;
	snprintf(x->npc, sizeof(x->npc), "%s",
	    json_string_value(json_object_get(m, "npc")));
	snprintf(x->state, sizeof(x->state), "%s",
	    json_string_value(json_object_get(m, "state")));
	snprintf(x->sandbox_id, sizeof(x->sandbox_id), "%s",
	    json_string_value(json_object_get(m, "sandbox_id")) ?: "");
	snprintf(x->by, sizeof(x->by), "%s",
	    json_string_value(json_object_get(m, "by")) ?: "");
	snprintf(x->signal, sizeof(x->signal), "%s",
	    json_string_value(json_object_get(m, "signal")) ?: "");
	snprintf(x->reason, sizeof(x->reason), "%s",
	    json_string_value(json_object_get(m, "reason")) ?: "");
	x->owner_id = json_integer_value(json_object_get(m, "owner_id"));
	v = json_object_get(m, "argv");
	if (json_is_string(json_object_get(m, "argv_preview"))) {
		snprintf(x->argv_preview, sizeof(x->argv_preview), "%s",
		    json_string_value(json_object_get(m, "argv_preview")));
		x->argv_cut = json_is_true(json_object_get(m, "argv_truncated"));
	} else if (json_is_array(v)) {
		/* A record from before ADR 0043 holds its whole argv: it
		 * moves to argv.json and meta.json keeps the preview. */
		ax_argv_preview(x, v);
		ax_exec_path(path, sizeof(path), x, "argv.json");
		if (access(path, F_OK) == 0 || ax_argv_write(x, v) == 0)
			migrate = 1;
	}
	v = json_object_get(m, "exit_code");
	x->code = json_is_integer(v) ? (int)json_integer_value(v) : 0;
	x->truncated = json_is_true(json_object_get(m, "truncated"));
	x->started_at = json_integer_value(json_object_get(m, "started_at"));
	x->ended_at = json_integer_value(json_object_get(m, "ended_at"));
	x->bytes_out = (uint64_t)json_integer_value(json_object_get(m,
	    "bytes_out"));
	x->dropped_events = (uint64_t)json_integer_value(json_object_get(m,
	    "dropped_events"));
	log = json_object_get(m, "log");
	x->dropped_bytes = (uint64_t)json_integer_value(json_object_get(log,
	    "dropped_bytes"));
	snprintf(x->removed, sizeof(x->removed), "%s",
	    json_string_value(json_object_get(log, "removed")) ?: "");
	/* The segments. */
	ax_exec_path(path, sizeof(path), x, NULL);
	if ((d = opendir(path)) == NULL)
		goto fail;
	while ((de = readdir(d)) != NULL) {
		unsigned long long n;
		char tail[8];

		if (strlen(de->d_name) != 24 ||
		    sscanf(de->d_name, "%20llu%7s", &n, tail) != 2 ||
		    strcmp(tail, ".log") != 0 || n == 0)
			continue;
		if (nf == capf) {
			uint64_t *nfi;

			capf = capf ? capf * 2 : 16;
			if ((nfi = realloc(firsts, capf * sizeof(*nfi))) == NULL)
				goto fail;
			firsts = nfi;
		}
		firsts[nf++] = n;
	}
	qsort(firsts, nf, sizeof(*firsts), cmp_u64);
	for (i = 0; i < nf; i++) {
		struct stat st;

		if ((g = calloc(1, sizeof(*g))) == NULL)
			goto fail;
		g->first_id = firsts[i];
		ax_seg_path(path, sizeof(path), x, g->first_id);
		if (stat(path, &st) == 0)
			g->bytes = (uint64_t)st.st_size;
		if (i + 1 < nf)
			g->last_id = firsts[i + 1] - 1;
		if (x->cur != NULL)
			x->cur->next = g;
		else
			x->segs = g;
		x->cur = g;
	}
	if (x->cur != NULL) {
		/* The newest segment may end in a torn event (power loss). */
		ax_seg_path(path, sizeof(path), x, x->cur->first_id);
		if ((fd = open(path, O_RDWR | O_CLOEXEC)) >= 0) {
			if (seg_scan(fd, &last, &whole) == 0) {
				if (whole < x->cur->bytes &&
				    ftruncate(fd, (off_t)whole) == 0)
					log_warn("exec log: cut a torn last "
					    "event", "exec_id", x->id, NULL);
				x->cur->bytes = whole;
				x->cur->last_id = last != 0 ? last :
				    x->cur->first_id - 1;
			}
			close(fd);
		}
		x->last_id = x->cur->last_id;
	} else
		x->last_id = (uint64_t)json_integer_value(json_object_get(log,
		    "last_id"));
	for (g = x->segs; g != NULL; g = g->next)
		x->log_bytes += g->bytes;
	s->log_total += x->log_bytes;
	tickets_load(x);
	if (!ax_ended(x)) {
		/* Its broker connection died with the old api process, and
		 * the broker kills an exec whose client is gone (SPEC §5). */
		ax_end_with_error(x, "failed", "api_restarted", "The api "
		    "restarted while the exec ran; the broker killed it when "
		    "the api's connection to it closed.");
		x->cur = NULL;
	} else if (migrate)
		ax_meta_write(x);
	x->cur = NULL;  /* nothing is appended to a loaded exec */
	free(firsts);
	closedir(d);
	json_decref(m);
	return x;
fail:
	free(firsts);
	if (d != NULL)
		closedir(d);
	json_decref(m);
	if (x != NULL)
		ax_exec_free(x);
	log_warn("ignoring an unreadable exec record", "exec_id", id, NULL);
	return NULL;
}

static int
cmp_started(const void *a, const void *b)
{
	const struct api_exec *x = *(struct api_exec *const *)a;
	const struct api_exec *y = *(struct api_exec *const *)b;

	/* Newest first; ids break ties. */
	if (x->started_at != y->started_at)
		return x->started_at > y->started_at ? -1 : 1;
	return strcmp(y->id, x->id);
}

static int
load_ticket_key(struct api_server *s, struct sbx_err *err)
{
	char path[1024];
	struct stat st;
	int fd;

	snprintf(path, sizeof(path), "%s/ticket.key", s->cfg->state_dir);
	fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0 && errno == ENOENT) {
		randombytes_buf(s->ticket_key, sizeof(s->ticket_key));
		fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
		if (fd < 0 || write(fd, s->ticket_key, sizeof(s->ticket_key)) !=
		    (ssize_t)sizeof(s->ticket_key)) {
			if (fd >= 0)
				close(fd);
			return sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_CANNOT_CREATE,
			    path, strerror(errno));
		}
		close(fd);
		return 0;
	}
	if (fd < 0 || fstat(fd, &st) == -1 || !S_ISREG(st.st_mode) ||
	    (st.st_mode & 077) != 0 || st.st_size != 32 ||
	    read(fd, s->ticket_key, 32) != 32) {
		if (fd >= 0)
			close(fd);
		return sbx_err_set(err, SBX_E_CONFIG, "%s must be a regular "
		    "file of 32 bytes, mode 0600.", path);
	}
	close(fd);
	return 0;
}

int
api_execs_open(struct api_server *s, struct sbx_err *err)
{
	struct api_exec **all = NULL, *x;
	size_t n = 0, cap = 0, i;
	struct dirent *de;
	struct timeval tv = { 1, 0 };
	DIR *d;

	if (load_ticket_key(s, err) == -1)
		return -1;
	if ((s->execs_dir = malloc(strlen(s->cfg->state_dir) + 8)) == NULL)
		return sbx_err_oom(err);
	sprintf(s->execs_dir, "%s/execs", s->cfg->state_dir);
	if (mkdir(s->execs_dir, 0700) == -1 && errno != EEXIST)
		return sbx_err_set(err, SBX_E_CONFIG, SBX_MSG_CANNOT_CREATE,
		    s->execs_dir, strerror(errno));
	if ((d = opendir(s->execs_dir)) == NULL)
		return sbx_err_set(err, SBX_E_CONFIG, "Cannot read %s: %s.",
		    s->execs_dir, strerror(errno));
	while ((de = readdir(d)) != NULL) {
		if (de->d_name[0] != 'x' || strlen(de->d_name) != EXEC_ID_LEN)
			continue;
		if ((x = exec_load(s, de->d_name)) == NULL)
			continue;
		if (n == cap) {
			struct api_exec **na;

			cap = cap ? cap * 2 : 64;
			if ((na = realloc(all, cap * sizeof(*na))) == NULL) {
				ax_exec_free(x);
				break;
			}
			all = na;
		}
		all[n++] = x;
	}
	closedir(d);
	if (n > 0)
		qsort(all, n, sizeof(*all), cmp_started);
	for (i = n; i > 0; i--) {
		x = all[i - 1];
		x->next = s->execs;
		if (s->execs != NULL)
			s->execs->prev = x;
		s->execs = x;
		s->nexecs++;
	}
	free(all);
	if ((s->sweep_ev = evtimer_new(s->base, ax_sweep_fire, s)) == NULL)
		return sbx_err_oom(err);
	evtimer_add(s->sweep_ev, &tv);
	ax_enforce_bounds(s);
	return 0;
}

void
api_execs_close(struct api_server *s)
{
	struct api_exec *x;
	struct sbx_op *op;

	while ((x = s->execs) != NULL) {
		if (!ax_ended(x)) {
			op = x->op;
			x->op = NULL;
			sbx_op_cancel(op);
			if (x->creator != NULL)
				x->creator = NULL;
			ax_end_with_error(x, "failed", SBX_E_SHUTTING_DOWN, "The "
			    "api shut down; the exec was cancelled.");
		}
		while (x->viewers != NULL) {
			struct ax_viewer *v = x->viewers;

			x->viewers = v->next;
			v->x = NULL;
		}
		ax_exec_unlink(x);
		ax_exec_free(x);
	}
	if (s->sweep_ev != NULL)
		event_free(s->sweep_ev);
	s->sweep_ev = NULL;
	free(s->execs_dir);
	s->execs_dir = NULL;
	sodium_memzero(s->ticket_key, sizeof(s->ticket_key));
}
