/* broker_reaper.h - the idle reaper, start-up recovery, and the server hooks they use (SPEC §7). */
#ifndef BROKER_REAPER_H
#define BROKER_REAPER_H

#include "broker.h"

struct broker_state;
struct broker_metrics;

/* ------------------------------------------------------------------ */
/* Server hooks (broker_server.c)                                      */

/*
 * A job is work of the broker itself on one sandbox (the reaper's stop or
 * destroy) that runs in the same per-id queue as ensure, stop and destroy,
 * so it never overlaps them: a concurrent ensure either runs first (and
 * the job then sees a fresh last_used_at) or after it (and starts the
 * sandbox again). A job counts as in flight for SIGTERM's drain.
 */
struct broker_job;
typedef void (*broker_job_fn)(struct broker_job *job, void *arg);

/*
 * Queues a job for sandbox id; start(job, arg) runs at its turn, from the
 * event loop, and must end in exactly one broker_job_done. arg_free(arg)
 * (NULL: nothing) runs when the job ends, also when it never started
 * (shutdown) or was cancelled by the drain's grace period (then its driver
 * op, see broker_job_set_op, is cancelled and no callback comes). Returns
 * 0, or -1 with err (invalid_id, internal) after arg_free(arg).
 */
int broker_server_job(struct broker_server *s, const char *id,
    broker_job_fn start, void *arg, void (*arg_free)(void *),
    struct sbx_err *err);

/* The job's sandbox id (borrowed while the job lives). */
const char *broker_job_id(const struct broker_job *job);
/* Requests in flight that name the job's sandbox and are use of it, the
 * job excluded (running execs, reads, writes, queued ensures, sessions
 * with a viewer...). A session whose api has no viewer of it (CTRL
 * viewers, adr/0051 amendment) is not counted: *quiet_ms gets the latest
 * wall-clock ms such a session moved bytes or lost its viewer (0: none). */
unsigned broker_job_others(const struct broker_job *job, int64_t *quiet_ms);
/* Ends every session of the job's sandbox that broker_job_others did not
 * count: its process tree is killed, its api gets the error event (code,
 * why: a sentence), and it ends on a later turn of the loop. */
void broker_job_end_quiet(struct broker_job *job, const char *code,
    const char *why);
/* From now until the job ends, new requests naming its sandbox that are
 * not serialised (exec, status, files, list) wait for it instead of
 * racing the stop. */
void broker_job_block(struct broker_job *job);
/* The driver op the job waits for (NULL: none), cancelled on shutdown. */
void broker_job_set_op(struct broker_job *job, struct sbx_op *op);
/* Ends the job (outcome "ok" or an SBX_E_* code; the caller audits). */
void broker_job_done(struct broker_job *job, const char *outcome);

/* 1 when some request or job names id right now and is use of it (the
 * quiet sessions as for broker_job_others, which *quiet_ms gets as
 * there). */
int broker_server_busy(struct broker_server *s, const char *id,
    int64_t *quiet_ms);
/* 1 once SIGTERM's drain has begun. */
int broker_server_draining(const struct broker_server *s);

/* Borrowed parts of the server (valid while it lives). */
struct broker_state *broker_server_state(struct broker_server *s);
struct broker_metrics *broker_server_metrics(struct broker_server *s);
struct sbx_driver *broker_server_driver(struct broker_server *s);
const struct broker_config *broker_server_config(const struct broker_server *s);
struct event_base *broker_server_base(struct broker_server *s);

/* ------------------------------------------------------------------ */
/* Start-up recovery (broker_reaper.c)                                 */

struct broker_recovery;

/*
 * Reconciles the state table with the runtime (SPEC §7), before the
 * server listens: lists the labelled sandboxes (driver list_sandboxes;
 * unlabelled containers are never seen nor touched), adopts those with a
 * row (state, container, image, egress from the runtime), records those
 * without one (a new row), marks rows whose container is gone "absent",
 * and runs the driver's recover op (engine: `sbx-helper killall`) in each
 * running sandbox so no exec of a killed broker keeps running. Each step
 * is logged and audited (op "recover", reason adopted/recorded/absent/
 * killed) and counted (sbx_broker_recovered_total). done(arg, err) is
 * called once from the loop: err NULL when everything was reconciled,
 * else why not (runtime_unavailable...: the caller retries; rows already
 * written stay). Returns the handle (free with broker_recovery_free after
 * done, or before to cancel) or NULL with err.
 */
struct broker_recovery *broker_recover(struct broker_server *s,
    void (*done)(void *arg, const struct sbx_err *err), void *arg,
    struct sbx_err *err);
void broker_recovery_free(struct broker_recovery *r); /* NULL ok; cancels */

/* ------------------------------------------------------------------ */
/* The idle reaper (broker_reaper.c)                                   */

struct broker_reaper;

/*
 * Starts the reaper on s's loop: every cfg->reap_interval ms it stops
 * (driver stop; volume kept) each sandbox whose row is running, that no
 * request names (no exec in flight) and whose last_used_at is older than
 * cfg->idle_timeout ms; stop_reason becomes "idle". With
 * cfg->destroy_after > 0 it also destroys sandboxes stopped longer than
 * that. Both run as jobs in the per-id queue, check again at their turn,
 * and are logged, audited (op "reap" reason "idle", op "reap_destroy"
 * reason "destroy_after") and counted (sbx_broker_reaped_total). Nothing
 * new is started once the server drains. idle_timeout 0 turns stopping
 * off. Returns the reaper (broker_reaper_free before the server) or NULL
 * with err internal.
 */
struct broker_reaper *broker_reaper_new(struct broker_server *s,
    struct sbx_err *err);
void broker_reaper_free(struct broker_reaper *r); /* NULL ok */

/* Runs one scan now (tests). */
void broker_reaper_scan(struct broker_reaper *r);

#endif
