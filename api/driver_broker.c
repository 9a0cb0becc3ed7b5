/* driver_broker.c - the broker-client SandboxDriver (driver_broker.h): its vtable, its configuration and token; each operation lives in the file of its kind (driver_broker_plain.c, _exec.c, _files.c, _session.c) over one op life (driver_broker_op.c). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <sodium.h>

#include "driver_broker.h"
#include "driver_broker_int.h"
#include "sbx_proto.h"
#include "sbx_token.h"

/* write_stream's bytes queued for the broker, unless configured (adr/0030) */
#define WRITE_OUT_MAX ((size_t)256 * 1024)

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

static void
b_free(struct sbx_driver *drv)
{
	struct bdriver *d = (struct bdriver *)drv;

	while (d->live != NULL)
		dbk_op_free(d->live);
	free(d->address);
	if (d->auth != NULL)
		sodium_free(d->auth);
	free(d);
}

static const struct sbx_driver_ops broker_driver_ops = {
	.name = "broker",
	.ensure = dbk_ensure,
	.status = dbk_status,
	.exec_lines = dbk_exec_lines,
	.status_usage = dbk_status_usage,
	.egress_stats = dbk_egress_stats,
	.exec = dbk_exec,
	.read = dbk_read,
	.write = dbk_write,
	.write_stream = dbk_write_stream,
	.list = dbk_list,
	.stop = dbk_stop,
	.destroy = dbk_destroy,
	.list_sandboxes = dbk_list_sandboxes,
	.health = dbk_health,
	.cancel = dbk_cancel,
	.pause = dbk_pause,
	.resume = dbk_resume,
	.free = b_free,
	.session = dbk_session,
	.session_write = dbk_session_write,
	.session_room = dbk_session_room,
	.session_close_input = dbk_session_close_input,
	.session_control = dbk_session_control,
	.snapshot_create = dbk_snapshot_create,   /* adr/0068 */
	.snapshot_list = dbk_snapshot_list,
	.snapshot_delete = dbk_snapshot_delete,
	.snapshot_copy = dbk_snapshot_copy,
};

struct sbx_driver *
sbx_broker_driver_new(struct event_base *base,
    const struct sbx_broker_config *cfg, struct sbx_err *err)
{
	struct sbx_token check;
	struct bdriver *d;
	size_t alen;

	memset(&check, 0, sizeof(check));
	if (cfg == NULL || cfg->address == NULL || cfg->address[0] == '\0') {
		sbx_err_set(err, SBX_E_BAD_REQUEST, "The broker address is "
		    "missing.");
		return NULL;
	}
	if (cfg->token == NULL || sbx_token_set(&check, cfg->token,
	    cfg->token_len, err) == -1)
		return NULL;
	sbx_token_clear(&check);
	if (sodium_init() < 0 || (d = calloc(1, sizeof(*d))) == NULL) {
		sbx_err_oom(err);
		return NULL;
	}
	d->base.ops = &broker_driver_ops;
	d->base.base = base;
	d->header_timeout_ms = cfg->header_timeout_ms;
	d->write_out_max = cfg->write_out_max > 0 ? cfg->write_out_max :
	    WRITE_OUT_MAX;
	alen = strlen(SBX_HDR_AUTHORIZATION ": " SBX_AUTH_BEARER) +
	    cfg->token_len + 1;
	if ((d->address = strdup(cfg->address)) == NULL ||
	    (d->auth = sodium_malloc(alen)) == NULL) {
		b_free(&d->base);
		sbx_err_oom(err);
		return NULL;
	}
	snprintf(d->auth, alen, SBX_HDR_AUTHORIZATION ": " SBX_AUTH_BEARER "%.*s",
	    (int)cfg->token_len, cfg->token);
	return &d->base;
}
