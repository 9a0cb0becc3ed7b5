/* driver_broker_err.c - the broker's answer as an sbx_err for the api's callers: its error body, a transport failure, an answer the api cannot read (wording only; calls the wire decoder and the log). */
#include <string.h>

#include <event2/buffer.h>

#include "driver_broker_int.h"
#include "sbx_log.h"
#include "sbx_proto.h"
#include "sbx_wire.h"

/* The broker's JSON error body (or the status) as an sbx_err. */
void
dbk_error_from_body(int status, struct evbuffer *body, struct sbx_err *e)
{
	size_t len = evbuffer_get_length(body);

	sbx_err_clear(e);
	if (status == 401) {
		/* Never let a player read the api's own credential problem as
		 * their own: it is the operator's to fix. */
		sbx_err_set(e, SBX_E_BROKER_UNAVAILABLE, "The sandbox broker "
		    "refused the api's token; check broker_token_file.");
		log_error("the broker refused our token", NULL);
		return;
	}
	if (sbx_wire_error_decode(len > 0 ? (const char *)evbuffer_pullup(
	    body, -1) : "", len, e) == 0) {
		/* "unauthorized" from the broker concerns the api, never the
		 * api's caller. The broker's "forbidden" is about the sandbox
		 * (permission denied inside it): the caller's, with its
		 * message; so are the other codes, whose status the one table
		 * of sbx_err.c gives. */
		if (strcmp(e->code, SBX_E_UNAUTHORIZED) == 0)
			sbx_err_set(e, SBX_E_BROKER_UNAVAILABLE, "The sandbox "
			    "broker refused the api.");
	} else
		sbx_err_set(e, status == 404 ? SBX_E_NOT_FOUND :
		    status >= 500 ? SBX_E_BROKER_UNAVAILABLE : SBX_E_INTERNAL,
		    "The sandbox broker answered HTTP %d.", status);
}

/* A transport error from the HTTP client, worded for the api's callers. */
void
dbk_error_from_transport(const struct sbx_err *in, struct sbx_err *e)
{
	sbx_err_clear(e);
	if (strcmp(in->code, SBX_E_BROKER_UNAVAILABLE) == 0)
		sbx_err_set(e, SBX_E_BROKER_UNAVAILABLE, "Sandbox broker "
		    "unavailable: %s.", in->message);
	else
		*e = *in;
}

void
dbk_error_malformed(struct sbx_err *e)
{
	sbx_err_set(e, SBX_E_BROKER_UNAVAILABLE, "The sandbox broker sent an "
	    "answer the api cannot read.");
}
