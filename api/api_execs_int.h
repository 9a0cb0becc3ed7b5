/* api_execs_int.h - internals shared by the files of sandbox-api's resource execs (api_execs*.c; ADR 0015); not a public header. */
#ifndef API_EXECS_INT_H
#define API_EXECS_INT_H

#include <stdint.h>

#include <jansson.h>

#include "api_int.h"


/*
 * On disk, state_dir/execs/ID/ holds:
 *   meta.json     the exec's record, rewritten (tmp + rename) at start, at
 *                 its end and when its log loses a segment; it holds the
 *                 argv preview, not the argv;
 *   argv.json     the exec's whole argv (a JSON array), written once at
 *                 creation; read only by the replies about one exec
 *                 (ADR 0043): a record in memory holds the preview only;
 *   N.log         segments of the SSE event log: N (20 digits) is the id of
 *                 the segment's first event; each holds whole events,
 *                 exactly the bytes a viewer gets;
 *   tickets       one line per browser ticket: hex keyed hash, expiry (Unix
 *                 ms), principal name. Never the ticket itself.
 * Events are written with write() before any viewer sees them (they read
 * the files): a SIGKILL loses nothing written, a power loss can lose what
 * the page cache held (ADR 0015).
 */

#define EXEC_ID_LEN 25              /* "x" + 24 hex digits */
#define LOG_CHUNK ((size_t)64 * 1024)   /* output bytes per logged event */
#define SEG_MIN ((uint64_t)64 * 1024)
#define SEG_MAX ((uint64_t)1024 * 1024)
#define VIEW_HIGH_WATER ((size_t)256 * 1024)
#define VIEW_READ ((size_t)64 * 1024)
#define VIEW_SNDBUF (128 * 1024)   /* SO_SNDBUF of a viewer's socket */
#define LIST_DEFAULT 20
#define LIST_MAX 200
/* Records of a list encoded per turn of the event loop (adr/0048): a
 * 200-record list is ten turns, and a record's JSON is at most a few KiB
 * (the preview and the reason are bounded), so a turn stays short. */
#define LIST_SLICE 20
#define TICKETS_MAX 64              /* live browser tickets per exec */
#define ARGV_PREVIEW 256            /* bytes of the joined argv kept in memory */

struct seg {
	uint64_t first_id;
	uint64_t last_id;         /* 0 while empty */
	uint64_t bytes;
	struct seg *next;         /* newer */
};

struct ticket {
	unsigned char hash[32];
	int64_t expires_ms;
	char principal[API_NAME_MAX + 1];
	struct ticket *next;
};

struct api_exec {
	struct api_server *s;
	char id[EXEC_ID_LEN + 1];
	char npc[API_NPC_NAME_MAX + 1];
	int64_t owner_id;
	char sandbox_id[64];
	char by[API_NAME_MAX + 1];    /* principal who started it */
	/* The argv's strings joined by spaces, cut to at most ARGV_PREVIEW
	 * bytes between UTF-8 characters; argv_cut: 1 when something was cut.
	 * The whole argv is on disk only (argv.json; ADR 0043). */
	char argv_preview[ARGV_PREVIEW + 1];
	int argv_cut;
	char state[16];               /* running exited killed timeout failed */
	int code;
	char signal[16];
	int truncated;
	char reason[256];             /* why it ended, if not by itself */
	int64_t started_at, ended_at; /* Unix ms */
	uint64_t bytes_out;           /* stdout + stderr bytes */
	uint64_t dropped_bytes;       /* log bytes dropped (exec_log_max) */
	uint64_t dropped_events;
	char removed[32];             /* "" or why the whole log was removed */
	uint64_t last_id;
	uint64_t log_bytes;
	struct seg *segs, *cur;       /* oldest .. newest (cur: being written) */
	int fd;                       /* cur's file while running, else -1 */
	struct sbx_op *op;
	struct api_limit *lim;        /* counted in lim->execs while running */
	struct areq *creator;         /* POST waiting for the start event */
	int64_t counted_ms;           /* monotonic start, counted in metrics; 0 not */
	struct ax_viewer *viewers;
	struct ticket *tickets;
	struct api_exec *prev, *next; /* s->execs, newest first */
};

struct ax_viewer {
	struct areq *a;
	struct api_exec *x;
	uint64_t seg_first;           /* segment being read (its first id) */
	uint64_t seg_last;            /* its last id, kept if it is dropped */
	int fd;
	int follow;                   /* 0: end at the end of what is logged */
	int waiting;                  /* at the end of the log, waits for more */
	int blocked;                  /* output over the high-water mark */
	struct event *stall;
	/* Sends what is logged and not yet sent (api_execs_view.c); the log
	 * writer calls it when a waiting viewer has news. */
	void (*pump)(struct ax_viewer *v);
	struct ax_viewer *next;
};

/* api_execs.c: records, shared with the loader and the viewers. */
/* Ends x with an error event (code, message) as its terminal event:
 * state is its final state ("killed", "failed", "timeout"). */
void ax_end_with_error(struct api_exec *x, const char *state,
    const char *code, const char *message);
/* 1 when x is no longer running. */
int ax_ended(const struct api_exec *x);
/* Keeps the bounds of s->cfg (ADR 0015, ADR 0043), in this order:
 * exec_retention for ended logs; per principal who started execs,
 * exec_records_per_principal records and exec_log_per_principal log
 * bytes (that principal's oldest ended execs go first); then
 * exec_records_max records and exec_log_total bytes in all, taken from
 * the principal with the most records (or log bytes) that has an ended
 * exec, its oldest ended exec first. Running execs and ended ones with a
 * viewer are never removed, so a bound can stay exceeded while only they
 * are left. May free records: no pointer to one survives the call. */
void ax_enforce_bounds(struct api_server *s);
/* Asks for ax_enforce_bounds on the next loop turn (an exec was added,
 * or one ended and may be removable now) through the sweep timer; does
 * nothing before api_execs_open made it. */
void ax_bounds_soon(struct api_server *s);
/* What every reply about x shows (a list item; the replies about one
 * exec add "argv"), owned (NULL when out of memory). Reads x's fields and
 * x->segs->first_id only (a list encodes copies, adr/0048). */
json_t *ax_exec_json(const struct api_exec *x);
/* Sets x's argv preview from argv (a JSON array of strings). */
void ax_argv_preview(struct api_exec *x, const json_t *argv);
/* Writes argv (a JSON array) to x's argv.json. 0, or -1 (logged). */
int ax_argv_write(const struct api_exec *x, const json_t *argv);
/* Rewrites x's meta.json (tmp + rename); a failure is logged. */
void ax_meta_write(struct api_exec *x);
/* Exec id of the NPC of a (by name and by owner, so a record can never
 * pass to another owner's NPC of the same name); NULL when none. */
struct api_exec *ax_exec_find(struct areq *a, const char *id);
/* The exec of the route ({id} in a->exec_id); NULL with err not_found
 * (never replies). */
struct api_exec *ax_exec_of(struct areq *a, struct sbx_err *err);
/* Frees x (already unlinked, no viewer, not running). */
void ax_exec_free(struct api_exec *x);
/* Forgets x entirely: its files, its directory and its record; its
 * viewers end. Not for running execs. */
void ax_exec_forget(struct api_exec *x);
/* Removes every segment file of x from disk; why becomes its "removed"
 * ("retention", "total_cap", "principal_cap", "forgotten"). */
void ax_log_remove(struct api_exec *x, const char *why);
/* Unlinks x from s->execs. */
void ax_exec_unlink(struct api_exec *x);
/* state_dir/execs/ID[/file] into buf (cap bytes, truncated). */
void ax_exec_path(char *buf, size_t cap, const struct api_exec *x,
    const char *file);
/* The path of x's segment whose first event id is first. */
void ax_seg_path(char *buf, size_t cap, const struct api_exec *x,
    uint64_t first);
/* s->sweep_ev's callback: the retention sweep (ax_enforce_bounds). */
void ax_sweep_fire(evutil_socket_t fd, short what, void *arg);

#endif
