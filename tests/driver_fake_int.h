/* driver_fake_int.h - what the fake driver's two files share (tests only): the head every fake handle starts with and the fake's sessions, which driver_fake.c calls down into (driver_fake_session.c never calls back). */
#ifndef DRIVER_FAKE_INT_H
#define DRIVER_FAKE_INT_H

#include <sys/queue.h>
#include <sys/types.h>

#include "driver_fake.h"

/* The first members of every fake handle: fake_cancel/_pause/_resume tell
 * a session from the other ops by is_session. */
struct fake_head {
	struct sbx_op base;
	int is_session;
};

struct fake_sess;

/* The sessions of one fake driver (a member of it). */
struct fake_sessions {
	TAILQ_HEAD(fake_sess_list, fake_sess) live;   /* oldest first */
	struct sbx_fake_session_seen seen;
	size_t window;                  /* input bytes a session holds at most */
	unsigned seq;                   /* exec ids */
};

/* v (NULL-terminated, or NULL) joined with sep into dst[cap], cut to fit. */
void fake_join(char *dst, size_t cap, const char *const *v, const char *sep);

/* Sets up reg (default window SBX_FAKE_SESSION_WINDOW). */
void fake_sessions_init(struct fake_sessions *reg);
/* Frees every session still live (the driver's free; no callback). */
void fake_sessions_free(struct fake_sessions *reg);

/*
 * A new session on base: req checked as the vtable says (bad_request for
 * kind, cols/rows, term, port, an EXEC without argv; path_outside_work for
 * cwd), NULL with err. fail set: the session's only callback is
 * sink->error(fail) (sandbox absent, stopped, or fail_next). Else start,
 * then output as input arrives (see driver_fake.h).
 */
struct sbx_op *fake_session_new(struct sbx_driver *d, struct fake_sessions *reg,
    const char *id, const struct sbx_session_req *req,
    const struct sbx_sink *sink, const struct sbx_err *fail,
    struct sbx_err *err);

/* The vtable's handle control for a session (driver_fake.c dispatches). */
void fake_session_cancel(struct sbx_op *op);
void fake_session_pause(struct sbx_op *op);
void fake_session_resume(struct sbx_op *op);

/* The vtable's session_* members (sbx_driver.h). */
ssize_t fake_session_write(struct sbx_driver *d, struct sbx_op *op,
    struct evbuffer *src, size_t max);
size_t fake_session_room(struct sbx_driver *d, struct sbx_op *op);
void fake_session_close_input(struct sbx_driver *d, struct sbx_op *op);
int fake_session_control(struct sbx_driver *d, struct sbx_op *op,
    const struct sbx_session_ctl *c, struct sbx_err *err);

#endif
