/* driver_broker_util.c - the broker driver's token reading, request targets and error wording (split from driver_broker.c for the 1000-line bound of adr/0020). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <sodium.h>

#include "driver_broker.h"
#include "driver_broker_int.h"
#include "sbx_log.h"
#include "sbx_path.h"
#include "sbx_proto.h"
#include "sbx_token.h"
#include "sbx_wire.h"

/* ------------------------------------------------------------------ */
/* Tokens                                                              */

void
sbx_broker_token_free(char *tok)
{
	if (tok != NULL)
		sodium_free(tok);   /* wipes */
}

int
sbx_broker_token_read(const char *file, const char *env_value, char **out,
    size_t *outlen, struct sbx_err *err)
{
	struct sbx_err e;
	char *buf;

	*out = NULL;
	if (file != NULL && file[0] == '\0')
		file = NULL;
	if (env_value != NULL && env_value[0] == '\0')
		env_value = NULL;
	if (file == NULL && env_value == NULL)
		return sbx_err_set(err, SBX_E_BAD_TOKEN, "No broker token: set "
		    "broker_token_file (--broker-token-file) or SBX_BROKER_TOKEN.");
	if (sodium_init() < 0 ||
	    (buf = sodium_malloc(SBX_TOKEN_MAX_LEN + 1)) == NULL)
		return sbx_err_oom(err);
	/* The one reader and its rules (sbx_token.h); messages name no token. */
	sbx_err_clear(&e);
	if (sbx_token_read(file, env_value, buf, SBX_TOKEN_MAX_LEN + 1, outlen,
	    &e) == -1) {
		sbx_broker_token_free(buf);
		return sbx_err_set(err, e.code, "The broker token: %s%s.",
		    file == NULL ? "SBX_BROKER_TOKEN: " : "", e.message);
	}
	*out = buf;
	return 0;
}

/* "/v1/sandboxes/ID/SUFFIX?path=ENCODED[&mode=M]" or NULL (err set). */
char *
dbk_path_url(const char *id, const char *suffix, const char *path,
    uint32_t mode, struct sbx_err *err)
{
	char *enc = NULL, *url = NULL, mstr[8];

	if (sbx_path_check(path, strlen(path), err) == -1)
		return NULL;
	if ((enc = sbx_query_encode(path, strlen(path))) == NULL ||
	    asprintf(&url, SBX_PATH_SANDBOXES "/%s%s?" SBX_QUERY_PATH "=%s%s%s",
	    id, suffix, enc, mode != 0 ? "&" SBX_QUERY_MODE "=" : "",
	    mode != 0 ? sbx_wire_mode_encode(mode, mstr) : "") == -1) {
		url = NULL;
		sbx_err_oom(err);
	}
	free(enc);
	return url;
}

/* ------------------------------------------------------------------ */
/* Errors                                                              */

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
