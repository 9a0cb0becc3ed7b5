/* broker_egress_poll.h - the egress poll: each sandbox's proxy read on a timer, what it reports kept by broker_egress_note for /metrics (adr/0027). */
#ifndef BROKER_EGRESS_POLL_H
#define BROKER_EGRESS_POLL_H

#include "broker.h"
#include "sbx_err.h"

struct broker_egress_poll;

/*
 * Starts the poll on s's loop: every cfg->egress_stats_interval ms (0: no
 * timer, NULL returned without error) it walks the state's rows with
 * egress, running ones and stopped ones whose counts it has not cached,
 * one driver egress_stats op at a time (never two reads in flight from the
 * poll), and keeps what each proxy reports with broker_egress_note
 * (broker_egress.h); a sandbox without a proxy loses its series. A pass
 * still under way when the timer fires is not doubled. Nothing new
 * starts once the server drains. Returns the poll (broker_egress_poll_free
 * before the server) or NULL with err set (internal) or, for interval 0,
 * NULL with err clear.
 */
struct broker_egress_poll *broker_egress_poll_new(struct broker_server *s,
    struct sbx_err *err);
/* Stops the timer, cancels a read in flight. NULL ok. */
void broker_egress_poll_free(struct broker_egress_poll *p);

#endif
