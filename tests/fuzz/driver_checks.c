/* driver_checks.c - the invariant-checking callbacks of one driver op (driver_checks.h). */
#include <string.h>

#include "driver_checks.h"
#include "fuzz.h"
#include "sbx_path.h"

const char *dc_secret;
int dc_secret_in_reply;

void
dc_status(void *arg, const struct sbx_err *err, const struct sbx_status *st)
{
	struct dc_got *g = arg;

	g->terminal++;
	if (!g->started_returned)
		g->early = 1;
	if (err == NULL) {
		FUZZ_ASSERT(st != NULL);
		FUZZ_ASSERT(st->state == SBX_STATE_ABSENT ||
		    st->state == SBX_STATE_RUNNING ||
		    st->state == SBX_STATE_STOPPED);
	}
}

void
dc_done(void *arg, const struct sbx_err *err)
{
	struct dc_got *g = arg;

	/* (unless a reply carried it: the driver may relay what its peer
	 * said) */
	if (err != NULL && dc_secret != NULL && !dc_secret_in_reply)
		FUZZ_ASSERT(strstr(err->message, dc_secret) == NULL);
	g->terminal++;
	if (!g->started_returned)
		g->early = 1;
}

void
dc_list(void *arg, const struct sbx_err *err, const struct sbx_dirent *e,
    size_t n, int truncated)
{
	(void)e;
	(void)n;
	(void)truncated;
	dc_done(arg, err);
}

void
dc_sandboxes(void *arg, const struct sbx_err *err,
    const struct sbx_status *sts, size_t n)
{
	size_t i;

	if (err == NULL)
		for (i = 0; i < n; i++)
			FUZZ_ASSERT(sbx_id_valid(sts[i].id));
	dc_done(arg, err);
}

void
dc_health(void *arg, const struct sbx_err *err, const struct sbx_health *h)
{
	(void)h;
	dc_done(arg, err);
}

void
dc_start(void *arg, const char *exec_id)
{
	struct dc_got *g = arg;

	FUZZ_ASSERT(exec_id != NULL && g->terminal == 0);
}

void
dc_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct dc_got *g = arg;

	FUZZ_ASSERT((stream == 1 || stream == 2) && buf != NULL && len > 0);
	FUZZ_ASSERT(g->terminal == 0);
}

void
dc_exit(void *arg, const struct sbx_exit *ex)
{
	FUZZ_ASSERT(ex->code >= 0 && ex->code <= 255);
	dc_done(arg, NULL);
}

void
dc_error(void *arg, const struct sbx_err *err)
{
	FUZZ_ASSERT(err != NULL && err->code[0] != '\0');
	dc_done(arg, err);
}
