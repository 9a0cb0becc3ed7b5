/* api_term_open.c - terminals opened for a caller that is not their POST, and the owner's operations on one without a viewer (api_term.h; E2B's processes, adr/0060): thin wrappers over api_term.c. */
#include "api_term_int.h"
#include "sbx_proto.h"

int
api_term_open(struct areq *a, const struct sbx_session_req *req,
    const char *argv_preview, api_term_started_fn started, void *arg,
    struct sbx_err *err)
{
	if (started == NULL)
		return sbx_err_set(err, SBX_E_INTERNAL, "api_term_open needs a "
		    "started callback.");
	return term_open(a, req, argv_preview, started, arg, err);
}

int
api_term_running(const struct api_term *t)
{
	return !term_ended(t);
}

int
api_term_write(struct api_term *t, const unsigned char *p, size_t n,
    struct sbx_err *err)
{
	return term_input(t, p, n, err);
}

int
api_term_ctl(struct api_term *t, const struct sbx_session_ctl *c,
    struct sbx_err *err)
{
	return term_control(t, c, err);
}

int
api_term_close_input(struct api_term *t)
{
	return term_eof(t);
}

void
api_term_kill(struct api_term *t, const char *who)
{
	term_kill(t, who);
}
