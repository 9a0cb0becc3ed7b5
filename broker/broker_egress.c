/* broker_egress.c - allowlist checks, proxy container bodies, the proxy's decision log, and the counts a proxy reports kept for /metrics (adr/0026, adr/0027). */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <sodium.h>

#include "broker_egress.h"
#include "broker_metrics.h"
#include "broker_state.h"
#include "sbx_log.h"
#include "sbx_proto.h"

void
egress_policy_digest(json_t *allow, const char *resolver, char out[65])
{
	crypto_hash_sha256_state st;
	unsigned char h[crypto_hash_sha256_BYTES];
	size_t i;

	crypto_hash_sha256_init(&st);
	for (i = 0; i < json_array_size(allow); i++) {
		const char *s = json_string_value(json_array_get(allow, i));

		if (s == NULL)
			continue;
		crypto_hash_sha256_update(&st, (const unsigned char *)s, strlen(s));
		crypto_hash_sha256_update(&st, (const unsigned char *)"\n", 1);
	}
	/* "counts\n": proxies made before --counts (adr/0027) are replaced. */
	crypto_hash_sha256_update(&st, (const unsigned char *)"counts\n", 7);
	crypto_hash_sha256_update(&st, (const unsigned char *)"resolver=", 9);
	if (resolver != NULL)
		crypto_hash_sha256_update(&st, (const unsigned char *)resolver,
		    strlen(resolver));
	crypto_hash_sha256_final(&st, h);
	sodium_bin2hex(out, 65, h, sizeof(h));
}

static json_t *
proxy_cmd(const struct egress_proxy_spec *s)
{
	json_t *cmd = json_pack("[s,s,s,s]", "--listen", "unix:" EGRESS_SOCK,
	    "--counts", EGRESS_COUNTS);
	size_t i;

	if (cmd == NULL)
		return NULL;
	for (i = 0; i < json_array_size(s->allow); i++) {
		const char *e = json_string_value(json_array_get(s->allow, i));

		if (e == NULL)
			continue;
		if (json_array_append_new(cmd, json_string(strchr(e, '/') != NULL ?
		    "--cidr" : "--allow")) != 0 ||
		    json_array_append_new(cmd, json_string(e)) != 0)
			goto fail;
	}
	if (s->resolver != NULL && s->resolver[0] != '\0' &&
	    (json_array_append_new(cmd, json_string("--resolver")) != 0 ||
	    json_array_append_new(cmd, json_string(s->resolver)) != 0))
		goto fail;
	return cmd;
fail:
	json_decref(cmd);
	return NULL;
}

json_t *
egress_proxy_body(const struct egress_proxy_spec *s)
{
	json_t *labels = s->labels, *cmd = NULL, *hc = NULL;
	char digest[65];

	if (labels == NULL)
		return NULL;
	egress_policy_digest(s->allow, s->resolver, digest);
	if (json_object_set_new(labels, EGRESS_L_POLICY, json_string(digest)) != 0)
		goto fail;
	cmd = proxy_cmd(s);
	if (cmd == NULL)
		goto fail;
	hc = json_pack("{s:[s], s:[s], s:b, s:I, s:I, s:I, s:s, s:{s:s},"
	    " s:[{s:s, s:s, s:s, s:b}]}",
	    "CapDrop", "ALL",
	    "SecurityOpt", "no-new-privileges",
	    "ReadonlyRootfs", 1,
	    "Memory", (json_int_t)s->mem_bytes,
	    "MemorySwap", (json_int_t)s->mem_bytes,
	    "PidsLimit", (json_int_t)s->pids,
	    "NetworkMode", s->network,
	    "RestartPolicy", "Name", "no",
	    "Mounts",
	    "Type", "volume", "Source", s->sock_vol, "Target", EGRESS_SOCK_DIR,
	    "ReadOnly", 0);
	if (hc == NULL)
		goto fail;
	if (s->helper_vol != NULL && json_array_append_new(json_object_get(hc, "Mounts"),
	    json_pack("{s:s, s:s, s:s, s:b}", "Type", "volume", "Source", s->helper_vol,
	    "Target", s->helper_dir, "ReadOnly", 1)) != 0)
		goto fail;
	if (s->oci_runtime != NULL &&
	    json_object_set_new(hc, "Runtime", json_string(s->oci_runtime)) != 0)
		goto fail;
	/* uid 0 without any capability: it must create its socket in the
	 * fresh, root-owned volume (adr/0026, Consequences). */
	return json_pack("{s:s, s:s, s:o, s:[s], s:o, s:[s], s:b, s:b, s:o}",
	    "Image", s->image,
	    "User", "0:0",
	    "Labels", labels,
	    "Entrypoint", s->proxy_path,
	    "Cmd", cmd,
	    "Env", "PATH=/usr/bin:/bin",
	    "Tty", 0,
	    "OpenStdin", 0,
	    "HostConfig", hc);
fail:
	json_decref(labels);
	json_decref(cmd);
	json_decref(hc);
	return NULL;
}

int
egress_sandbox_env(json_t *env)
{
	static const char *const vars[] = {
		"HTTP_PROXY=" EGRESS_PROXY_URL, "HTTPS_PROXY=" EGRESS_PROXY_URL,
		"http_proxy=" EGRESS_PROXY_URL, "https_proxy=" EGRESS_PROXY_URL,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
		NULL };
	int i;

	for (i = 0; vars[i] != NULL; i++)
		if (json_array_append_new(env, json_string(vars[i])) != 0)
			return -1;
	return 0;
}

/* A bounded copy of a string member, or NULL when absent or not a string. */
static json_t *
short_str(json_t *o, const char *k, size_t max)
{
	const char *s = json_string_value(json_object_get(o, k));
	size_t n;

	if (s == NULL)
		return NULL;
	n = strlen(s);
	return json_stringn(s, n < max ? n : max);
}

static int
scan_line(const char *l, size_t n, struct egress_stats *st)
{
	json_t *o = json_loadb(l, n, 0, NULL), *d;
	const char *ev;
	json_int_t a, dn;
	int rc = 0;

	if (!json_is_object(o)) {
		json_decref(o);
		return 0;
	}
	ev = json_string_value(json_object_get(o, "event"));
	/* "listening" carries the totals a proxy started from (adr/0027). */
	if (ev != NULL && (strcmp(ev, "allow") == 0 || strcmp(ev, "deny") == 0 ||
	    strcmp(ev, "listening") == 0)) {
		a = json_integer_value(json_object_get(o, "allowed"));
		dn = json_integer_value(json_object_get(o, "denied"));
		if (json_is_integer(json_object_get(o, "allowed")) &&
		    json_is_integer(json_object_get(o, "denied")) && a >= 0 && dn >= 0) {
			st->allowed = (unsigned long)a;
			st->denied = (unsigned long)dn;
		}
	}
	if (ev != NULL && strcmp(ev, "deny") == 0) {
		json_int_t port = json_integer_value(json_object_get(o, "port"));

		d = json_object();
		if (d == NULL) {
			rc = -1;
			goto done;
		}
		json_object_set_new(d, "ts", short_str(o, "ts", 40));
		json_object_set_new(d, "host", short_str(o, "host", 253));
		json_object_set_new(d, "port", json_integer(port >= 0 && port <= 65535 ? port : 0));
		json_object_set_new(d, "reason", short_str(o, "reason", 512));
		if (json_array_append_new(st->denials, d) != 0) {
			rc = -1;
			goto done;
		}
		while (json_array_size(st->denials) > EGRESS_DENIALS_MAX)
			json_array_remove(st->denials, 0);
	}
done:
	json_decref(o);
	return rc;
}

/* Feeds bytes into the line buffer; complete lines go to scan_line. */
static int
feed(struct egress_stats *st, char *line, size_t *ln, size_t cap, const unsigned char *p,
    size_t n)
{
	size_t i;

	for (i = 0; i < n; i++) {
		if (p[i] == '\n') {
			if (*ln < cap && scan_line(line, *ln, st) != 0)
				return -1;
			*ln = 0;
			continue;
		}
		if (*ln < cap)
			line[*ln] = (char)p[i];
		/* an over-long line is skipped whole */
		if (*ln <= cap)
			(*ln)++;
	}
	return 0;
}

int
egress_log_scan(const unsigned char *buf, size_t len, struct egress_stats *st)
{
	static char line[4096];
	size_t ln = 0, i = 0;

	memset(st, 0, sizeof(*st));
	st->denials = json_array();
	if (st->denials == NULL)
		return -1;
	if (len >= 8 && (buf[0] == 1 || buf[0] == 2) && buf[1] == 0 && buf[2] == 0 &&
	    buf[3] == 0) {
		while (i + 8 <= len) {
			size_t n = (size_t)buf[i + 4] << 24 | (size_t)buf[i + 5] << 16 |
			    (size_t)buf[i + 6] << 8 | (size_t)buf[i + 7];

			i += 8;
			if (n > len - i)
				n = len - i;
			if (buf[i - 8] == 1 && feed(st, line, &ln, sizeof(line), buf + i, n) != 0)
				return -1;
			i += n;
		}
	} else if (feed(st, line, &ln, sizeof(line), buf, len) != 0) {
		return -1;
	}
	if (ln > 0 && ln < sizeof(line) && scan_line(line, ln, st) != 0)
		return -1;
	return 0;
}

void
egress_stats_clear(struct egress_stats *st)
{
	if (st == NULL)
		return;
	json_decref(st->denials);
	memset(st, 0, sizeof(*st));
}

void
broker_egress_note(struct broker_metrics *m, struct broker_state *state,
    const char *id, const char *text)
{
	json_t *o = json_loads(text, 0, NULL);
	struct broker_row row;
	struct sbx_err e;
	json_int_t a, d;

	if (!json_is_object(o)) {
		json_decref(o);
		return;
	}
	a = json_integer_value(json_object_get(o, "allowed"));
	d = json_integer_value(json_object_get(o, "denied"));
	/* A read that ends after its sandbox's destroy (its row gone) must
	 * not bring the series back. */
	if (!json_is_true(json_object_get(o, "proxy")) ||
	    broker_state_get(state, id, &row, &e) != 1)
		broker_metrics_egress_forget(m, id);
	else if (a >= 0 && d >= 0 && broker_metrics_egress_set(m, id,
	    (uint64_t)a, (uint64_t)d) != 0)
		log_warn("egress counts not kept (out of memory)", "id", id, NULL);
	json_decref(o);
}
