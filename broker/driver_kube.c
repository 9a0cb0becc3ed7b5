/*
 * driver_kube.c - the kubernetes driver's constructor, its vtable, the
 * handle control every op shares, free, and the RBAC check of --check
 * (SelfSubjectAccessReview). The operations live in driver_kube_life.c,
 * _query.c and _run.c; the configuration's contract is driver_kube.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <event2/buffer.h>
#include <event2/event.h>
#include <openssl/err.h>

#include "driver_kube_int.h"
#include "sbx_log.h"
#include "sbx_proto.h"

static void
k_cancel(struct sbx_driver *d, struct sbx_op *op)
{
	(void)d;
	switch (((struct kube_op_head *)op)->cls) {
	case KUBE_OP_RUN:
		kube_run_cancel(op);
		break;
	case KUBE_OP_LIFE:
		kube_life_cancel(op);
		break;
	case KUBE_OP_SWEEP:
		kube_sweep_cancel(op);
		break;
	default:
		kube_query_cancel(op);
		break;
	}
}

static void
k_pause(struct sbx_driver *d, struct sbx_op *op)
{
	(void)d;
	if (((struct kube_op_head *)op)->cls == KUBE_OP_RUN)
		kube_run_pause(op, 1);
}

static void
k_resume(struct sbx_driver *d, struct sbx_op *op)
{
	(void)d;
	if (((struct kube_op_head *)op)->cls == KUBE_OP_RUN)
		kube_run_pause(op, 0);
}

static void
strv_free(char **v)
{
	size_t i;

	for (i = 0; v != NULL && v[i] != NULL; i++)
		free(v[i]);
	free(v);
}

static void
k_free(struct sbx_driver *d)
{
	struct kube *k = (struct kube *)d;

	if (k == NULL)
		return;
	kube_chans_free(k);
	kube_pool_free(k);
	kube_watch_free(k);
	if (k->ssl != NULL)
		SSL_CTX_free(k->ssl);
	if (k->token != NULL) {
		explicit_bzero(k->token, strlen(k->token));
		free(k->token);
	}
	free(k->token_file);
	free(k->ns);
	free(k->image);
	strv_free(k->images);
	free(k->helper_image);
	free(k->storage_class);
	free(k->work_size);
	free(k->egress_cidrs);
	free(k);
}

const struct sbx_driver_ops sbx_kube_driver_ops = {
	.name = "kubernetes",
	.ensure = kube_ensure,
	.status = kube_status,
	.exec = kube_exec,
	.read = kube_read,
	.write = kube_write,
	.list = kube_list,
	.stop = kube_stop,
	.destroy = kube_destroy,
	.list_sandboxes = kube_list_sandboxes,
	.health = kube_health,
	.reconcile = kube_reconcile,
	.cancel = k_cancel,
	.pause = k_pause,
	.resume = k_resume,
	.free = k_free,
};

static int
bad(struct sbx_err *err, const char *field, const char *why)
{
	return sbx_err_set(err, SBX_E_BAD_REQUEST, "%s %s", field, why);
}

/* "https://HOST:PORT" (HOST a name, an IPv4 or [IPv6]). */
static int
parse_server(struct kube *k, const char *s, struct sbx_err *err)
{
	const char *h, *c;
	size_t n;

	if (s == NULL || strncmp(s, "https://", 8) != 0)
		return bad(err, "kube_server", "must be https://HOST:PORT");
	h = s + 8;
	if (*h == '[') {
		if ((c = strchr(h, ']')) == NULL || c[1] != ':')
			return bad(err, "kube_server", "must be https://HOST:PORT");
		n = (size_t)(c - h - 1);
		h++;
		c++;
	} else {
		if ((c = strrchr(h, ':')) == NULL)
			return bad(err, "kube_server", "must be https://HOST:PORT");
		n = (size_t)(c - h);
	}
	if (n == 0 || n >= sizeof(k->host) || strlen(c + 1) == 0 ||
	    strlen(c + 1) >= sizeof(k->port) ||
	    strspn(c + 1, "0123456789") != strlen(c + 1))
		return bad(err, "kube_server", "must be https://HOST:PORT");
	memcpy(k->host, h, n);
	k->host[n] = '\0';
	snprintf(k->port, sizeof(k->port), "%s", c + 1);
	return 0;
}

static char *
dup_or(const char *s, const char *def)
{
	return strdup(s != NULL && *s != '\0' ? s : def);
}

struct sbx_driver *
sbx_kube_driver_new(struct event_base *base, const struct sbx_kube_config *cfg,
    struct sbx_err *err)
{
	struct kube *k = calloc(1, sizeof(*k));
	size_t i, n = 0;

	if (k == NULL)
		return sbx_err_oom(err), NULL;
	k->drv.ops = &sbx_kube_driver_ops;
	k->drv.base = base;
	TAILQ_INIT(&k->pods);
	TAILQ_INIT(&k->waits);
	TAILQ_INIT(&k->lost);
	TAILQ_INIT(&k->chans);
	if (parse_server(k, cfg->server, err) != 0)
		goto fail;
	if (cfg->default_image == NULL || *cfg->default_image == '\0') {
		bad(err, "image", "is required");
		goto fail;
	}
	if (cfg->helper_image == NULL || *cfg->helper_image == '\0') {
		bad(err, "kube_helper_image", "is required (an image holding "
		    "/sbx-helper: deploy/kubernetes/README.md)");
		goto fail;
	}
	if (cfg->token_file == NULL || *cfg->token_file == '\0') {
		bad(err, "kube_token_file", "is required");
		goto fail;
	}
	if (cfg->ca_file == NULL || *cfg->ca_file == '\0') {
		bad(err, "kube_ca_file", "is required");
		goto fail;
	}
	if ((k->token_file = strdup(cfg->token_file)) == NULL)
		goto oom;
	if (kube_token_reload(k) != 0) {
		bad(err, "kube_token_file", "cannot be read, or holds no token");
		goto fail;
	}
	sbx_log_add_secret(k->token);
	if ((k->ssl = SSL_CTX_new(TLS_client_method())) == NULL)
		goto oom;
	SSL_CTX_set_min_proto_version(k->ssl, TLS1_2_VERSION);
	SSL_CTX_set_verify(k->ssl, SSL_VERIFY_PEER, NULL);
	if (SSL_CTX_load_verify_locations(k->ssl, cfg->ca_file, NULL) != 1) {
		ERR_clear_error();
		bad(err, "kube_ca_file", "cannot be read as PEM certificates");
		goto fail;
	}
	if ((k->ns = dup_or(cfg->namespace_, "sbx")) == NULL ||
	    (k->image = strdup(cfg->default_image)) == NULL ||
	    (k->helper_image = strdup(cfg->helper_image)) == NULL ||
	    (k->work_size = dup_or(cfg->work_size, "1Gi")) == NULL)
		goto oom;
	if (cfg->storage_class != NULL && *cfg->storage_class != '\0' &&
	    (k->storage_class = strdup(cfg->storage_class)) == NULL)
		goto oom;
	if (cfg->egress_cidrs != NULL && *cfg->egress_cidrs != '\0' &&
	    (k->egress_cidrs = strdup(cfg->egress_cidrs)) == NULL)
		goto oom;
	while (cfg->images != NULL && cfg->images[n] != NULL)
		n++;
	if ((k->images = calloc(n + 1, sizeof(char *))) == NULL)
		goto oom;
	for (i = 0; i < n; i++)
		if ((k->images[i] = strdup(cfg->images[i])) == NULL)
			goto oom;
	k->memory = cfg->memory_bytes > 0 ? cfg->memory_bytes : 512LL << 20;
	k->mcpu = cfg->milli_cpus > 0 ? cfg->milli_cpus : 1000;
	k->exec_to = cfg->exec_timeout_ms > 0 ? cfg->exec_timeout_ms : 30000;
	k->exec_to_max = cfg->exec_timeout_max_ms > 0 ?
	    cfg->exec_timeout_max_ms : 600000;
	k->out_cap = cfg->exec_output_cap > 0 ? cfg->exec_output_cap : 16LL << 20;
	k->file_max = cfg->file_max_bytes > 0 ? cfg->file_max_bytes : 64LL << 20;
	k->req_to = cfg->request_timeout_ms > 0 ? cfg->request_timeout_ms : 30000;
	k->start_to = cfg->start_timeout_ms > 0 ? cfg->start_timeout_ms : 120000;
	k->force_after = cfg->force_after_ms > 0 ? cfg->force_after_ms : 30000;
	k->ping_ms = cfg->agent_ping_ms > 0 ? cfg->agent_ping_ms : 5000;
	if (k->exec_to > k->exec_to_max) {
		bad(err, "exec_timeout", "is above exec_timeout_max");
		goto fail;
	}
	if (cfg->warm_pool < 0 || cfg->warm_pool > 64) {
		bad(err, "warm_pool", "must be 0..64");
		goto fail;
	}
	/* made also with 0: the start's sweep drains an earlier pool */
	if (kube_pool_new(k, cfg->warm_pool) != 0)
		goto oom;
	return &k->drv;
oom:
	sbx_err_oom(err);
fail:
	k_free(&k->drv);
	return NULL;
}

/* ---- --check: which permissions are missing ---- */

static const struct {
	const char *group, *resource, *sub, *verb;
} needs[] = {
	{ "", "pods", "", "get" }, { "", "pods", "", "list" },
	{ "", "pods", "", "watch" }, { "", "pods", "", "create" },
	{ "", "pods", "", "delete" },
	{ "", "pods", "", "patch" },          /* a warm pool claim's labels */
	{ "", "pods", "exec", "get" }, { "", "pods", "exec", "create" },
	{ "", "persistentvolumeclaims", "", "get" },
	{ "", "persistentvolumeclaims", "", "list" },
	{ "", "persistentvolumeclaims", "", "create" },
	{ "", "persistentvolumeclaims", "", "delete" },
	{ "", "persistentvolumeclaims", "", "patch" },
	{ "", "serviceaccounts", "", "create" },
	{ "networking.k8s.io", "networkpolicies", "", "get" },
	{ "networking.k8s.io", "networkpolicies", "", "create" },
	{ "networking.k8s.io", "networkpolicies", "", "delete" },
};

struct rbac {
	struct kube *k;
	struct evbuffer *out;
	sbx_kube_check_cb cb;
	void *arg;
	size_t i;
	int missing;
};

static void rbac_next(struct rbac *r);

static void
rbac_done(void *arg, int status, json_t *body, const struct sbx_err *err)
{
	struct rbac *r = arg;
	struct sbx_err e;

	if (err != NULL || status != 201) {
		if (err == NULL)
			kube_status_err(&e, status, body, "ask the API server "
			    "for a SelfSubjectAccessReview");
		r->cb(r->arg, err != NULL ? err : &e, r->missing);
		free(r);
		return;
	}
	if (!json_is_true(json_object_get(json_object_get(body, "status"),
	    "allowed"))) {
		r->missing++;
		evbuffer_add_printf(r->out, "the broker cannot %s %s%s%s%s%s in "
		    "namespace %s: add it to its Role (deploy/kubernetes/rbac.yaml)\n",
		    needs[r->i].verb, needs[r->i].resource,
		    *needs[r->i].sub ? "/" : "", needs[r->i].sub,
		    *needs[r->i].group ? "." : "", needs[r->i].group, r->k->ns);
	}
	r->i++;
	rbac_next(r);
}

static void
rbac_next(struct rbac *r)
{
	struct kube_http_cbs cbs = { rbac_done, NULL, NULL, r };
	struct sbx_err e;
	json_t *b;

	if (r->i >= sizeof(needs) / sizeof(needs[0])) {
		r->cb(r->arg, NULL, r->missing);
		free(r);
		return;
	}
	b = json_pack("{s:s,s:s,s:{s:{s:s,s:s,s:s,s:s,s:s}}}", "apiVersion",
	    "authorization.k8s.io/v1", "kind", "SelfSubjectAccessReview",
	    "spec", "resourceAttributes", "namespace", r->k->ns, "verb",
	    needs[r->i].verb, "group", needs[r->i].group, "resource",
	    needs[r->i].resource, "subresource", needs[r->i].sub);
	if (kube_http_start(r->k, "POST", "/apis/authorization.k8s.io/v1/"
	    "selfsubjectaccessreviews", b, NULL, NULL, r->k->req_to, &cbs,
	    &e) == NULL) {
		json_decref(b);
		r->cb(r->arg, &e, r->missing);
		free(r);
		return;
	}
	json_decref(b);
}

int
sbx_kube_check_rbac(struct sbx_driver *d, struct evbuffer *out,
    sbx_kube_check_cb cb, void *arg, struct sbx_err *err)
{
	struct rbac *r = calloc(1, sizeof(*r));

	if (r == NULL)
		return sbx_err_oom(err);
	r->k = (struct kube *)d;
	r->out = out;
	r->cb = cb;
	r->arg = arg;
	rbac_next(r);
	return 0;
}
