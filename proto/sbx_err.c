/* sbx_err.c - the shared error value, its fixed errors (sbx_msg.h) and its mapping to HTTP statuses. */
#include <stdio.h>
#include <string.h>

#include "sbx_err.h"
#include "sbx_proto.h"

void
sbx_err_clear(struct sbx_err *err)
{
	if (err == NULL)
		return;
	err->code[0] = '\0';
	err->message[0] = '\0';
}

int
sbx_err_set(struct sbx_err *err, const char *code, const char *fmt, ...)
{
	va_list ap;

	if (err == NULL)
		return -1;
	snprintf(err->code, sizeof(err->code), "%s", code);
	va_start(ap, fmt);
	vsnprintf(err->message, sizeof(err->message), fmt, ap);
	va_end(ap);
	return -1;
}

int
sbx_err_oom(struct sbx_err *err)
{
	return sbx_err_set(err, SBX_E_INTERNAL, "%s", SBX_MSG_OOM);
}

int
sbx_err_bad_id(struct sbx_err *err)
{
	return sbx_err_set(err, SBX_E_INVALID_ID, "%s", SBX_MSG_BAD_ID);
}

int
sbx_err_is_set(const struct sbx_err *err)
{
	return err != NULL && err->code[0] != '\0';
}

static const struct {
	const char *code;
	int status;
} statuses[] = {
	{ SBX_E_BAD_REQUEST, 400 },
	{ SBX_E_INVALID_ID, 400 },
	{ SBX_E_PATH_OUTSIDE_WORK, 400 },
	{ SBX_E_UNKNOWN_FIELD, 400 },
	{ SBX_E_WRONG_TYPE, 400 },
	{ SBX_E_IMAGE_NOT_ALLOWED, 400 },
	{ SBX_E_LIMIT_EXCEEDED, 400 },
	{ SBX_E_UNAUTHORIZED, 401 },
	{ SBX_E_FORBIDDEN, 403 },
	{ SBX_E_NOT_FOUND, 404 },
	{ SBX_E_METHOD_NOT_ALLOWED, 405 },
	{ SBX_E_CONFLICT, 409 },
	{ SBX_E_NOT_RUNNING, 409 },
	{ SBX_E_TOO_LARGE, 413 },
	{ SBX_E_URI_TOO_LONG, 414 },
	{ SBX_E_HEAD_TOO_LARGE, 431 },
	{ SBX_E_REQUEST_TIMEOUT, 408 },
	{ SBX_E_RATE_LIMITED, 429 },
	{ SBX_E_TOO_MANY, 429 },
	{ SBX_E_INTERNAL, 500 },
	{ SBX_E_RUNTIME, 502 },
	{ SBX_E_PORT_CLOSED, 502 },
	{ SBX_E_PAUSED, 502 },
	{ SBX_E_RUNTIME_UNAVAILABLE, 503 },
	{ SBX_E_SHUTTING_DOWN, 503 },
	{ SBX_E_BROKER_UNAVAILABLE, 503 },
	{ SBX_E_STORAGE_FULL, 503 },
	{ SBX_E_OVERLOADED, 503 },
	{ SBX_E_TIMEOUT, 504 },
	/* RFC 4918 §11.5: the server cannot store what the request needs;
	 * not 413, which says this body is too big whatever /work holds. */
	{ SBX_E_QUOTA, 507 },
	/* Whoever cancelled rarely reads the reply; a shutdown cancels too. */
	{ SBX_E_CANCELLED, 503 },
	/* An optional driver op the configured driver lacks (adr/0068). */
	{ SBX_E_UNSUPPORTED, 501 },
};

int
sbx_err_http_status(const struct sbx_err *err)
{
	size_t i;

	if (!sbx_err_is_set(err))
		return 500;
	for (i = 0; i < sizeof(statuses) / sizeof(statuses[0]); i++)
		if (strcmp(statuses[i].code, err->code) == 0)
			return statuses[i].status;
	return 500;
}
