/* test_broker_egress.c - the broker's side of the egress proxy: allowlist checks, the proxy container body, the sandbox env, the decision log read back (adr/0026). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <jansson.h>

#include "broker_egress.h"
#include "broker_metrics.h"
#include "broker_state.h"
#include "sbx_err.h"
#include "sbx_proto.h"

static json_t *
J(const char *s)
{
	json_t *v = json_loads(s, JSON_DECODE_ANY | JSON_ALLOW_NUL, NULL);

	if (v == NULL)
		fail_msg("bad test JSON %s", s);
	return v;
}

struct allow_case {
	const char *json;
	const char *code;    /* NULL: accepted */
	const char *word;
};

static void
test_allowlists_are_checked_with_a_sentence(void **state)
{
	static const struct allow_case cases[] = {
		{ "[\"*\"]", NULL, NULL },
		{ "[\"pypi.org\", \"*.pythonhosted.org\", \"api.example.com:443\"]", NULL, NULL },
		{ "[\"allowed.test\", \"10.77.0.0/16\", \"fd00::/8\"]", NULL, NULL },
		{ "[]", SBX_E_BAD_REQUEST, "at least one" },
		{ "\"pypi.org\"", SBX_E_WRONG_TYPE, "array" },
		{ "{\"a\":1}", SBX_E_WRONG_TYPE, "array" },
		{ "[1]", SBX_E_WRONG_TYPE, "allow[0] must be a string" },
		{ "[\"*\", \"pypi.org\"]", SBX_E_BAD_REQUEST, "stands alone" },
		{ "[\"pypi.org\", \"bad..name\"]", SBX_E_BAD_REQUEST, "allow[1]" },
		{ "[\"pypi.org:99999\"]", SBX_E_BAD_REQUEST, "port" },
		{ "[\"10.0.0.1/8\"]", SBX_E_BAD_REQUEST, "host bits" },
		{ "[\"a\\u0000b\"]", SBX_E_BAD_REQUEST, "NUL" },
		{ "[\"a.*.b\"]", SBX_E_BAD_REQUEST, "'*'" },
	};
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
		json_t *a = J(cases[i].json);
		struct sbx_err e;
		int rc;

		sbx_err_clear(&e);
		rc = egress_allow_check(a, "allow", &e);
		if (cases[i].code == NULL && rc != 0)
			fail_msg("%s refused: %s", cases[i].json, e.message);
		if (cases[i].code != NULL) {
			if (rc == 0)
				fail_msg("%s accepted", cases[i].json);
			assert_string_equal(e.code, cases[i].code);
			if (strstr(e.message, cases[i].word) == NULL)
				fail_msg("%s: '%s' lacks '%s'", cases[i].json, e.message,
				    cases[i].word);
			assert_int_equal(e.message[strlen(e.message) - 1], '.');
		}
		json_decref(a);
	}
}

static void
test_allowlist_length_is_bounded(void **state)
{
	json_t *a = json_array();
	struct sbx_err e;
	char h[32];
	int i;

	(void)state;
	for (i = 0; i < EGRESS_ALLOW_MAX; i++) {
		snprintf(h, sizeof(h), "h%d.test", i);
		json_array_append_new(a, json_string(h));
	}
	assert_int_equal(egress_allow_check(a, "allow", &e), 0);
	json_array_append_new(a, json_string("one-more.test"));
	assert_int_equal(egress_allow_check(a, "allow", &e), -1);
	assert_non_null(strstr(e.message, "at most"));
	json_decref(a);
}

static void
test_only_star_alone_or_nothing_is_full_egress(void **state)
{
	json_t *star = J("[\"*\"]"), *list = J("[\"pypi.org\"]"), *tls = J("[\"*:443\"]");

	(void)state;
	assert_true(egress_allow_full(NULL));
	assert_true(egress_allow_full(star));
	assert_false(egress_allow_full(list));
	assert_false(egress_allow_full(tls));
	json_decref(star);
	json_decref(list);
	json_decref(tls);
}

static void
test_policy_digest_changes_with_entries_order_and_resolver(void **state)
{
	json_t *a = J("[\"a.test\", \"b.test\"]"), *b = J("[\"b.test\", \"a.test\"]"),
	    *c = J("[\"a.test\", \"b.test\"]"), *d = J("[\"a.testb.test\"]");
	char da[65], db[65], dc[65], dd[65], dr[65];

	(void)state;
	egress_policy_digest(a, NULL, da);
	egress_policy_digest(b, NULL, db);
	egress_policy_digest(c, NULL, dc);
	egress_policy_digest(d, NULL, dd);
	egress_policy_digest(a, "198.51.100.53", dr);
	assert_int_equal(strlen(da), 64);
	assert_string_equal(da, dc);
	assert_string_not_equal(da, db);
	assert_string_not_equal(da, dd);
	assert_string_not_equal(da, dr);
	json_decref(a);
	json_decref(b);
	json_decref(c);
	json_decref(d);
}

static void
test_proxy_body_has_no_capability_no_tcp_listener_and_the_policy_as_argv(void **state)
{
	json_t *allow = J("[\"allowed.test\", \"*.pythonhosted.org:443\", \"10.77.0.0/24\"]");
	struct egress_proxy_spec s = {
		.image = "sbx-test:latest", .helper_vol = "sbx-helper-abc", .helper_dir = "/.sbx",
		.proxy_path = "/.sbx/sbx-proxy", .sock_vol = "sbx-x1-egsock",
		.network = "sbx-x1-egress", .resolver = "198.51.100.53", .oci_runtime = NULL,
		.mem_bytes = 64 << 20, .pids = 64, .allow = allow,
		.labels = J("{\"io.sbx.managed\":\"true\",\"io.sbx.id\":\"x1\","
		    "\"io.sbx.role\":\"proxy\"}"),
	};
	json_t *b = egress_proxy_body(&s), *hc, *cmd, *m;
	char want[65];
	char *dump;

	(void)state;
	assert_non_null(b);
	hc = json_object_get(b, "HostConfig");
	assert_string_equal(json_string_value(json_array_get(json_object_get(hc, "CapDrop"), 0)),
	    "ALL");
	assert_true(json_is_true(json_object_get(hc, "ReadonlyRootfs")));
	assert_string_equal(json_string_value(json_object_get(hc, "NetworkMode")), "sbx-x1-egress");
	assert_int_equal(json_integer_value(json_object_get(hc, "Memory")), 64 << 20);
	assert_null(json_object_get(hc, "PortBindings"));
	m = json_object_get(hc, "Mounts");
	assert_int_equal(json_array_size(m), 2);
	assert_false(json_is_true(json_object_get(json_array_get(m, 0), "ReadOnly")));
	assert_string_equal(json_string_value(json_object_get(json_array_get(m, 0), "Target")),
	    EGRESS_SOCK_DIR);
	assert_true(json_is_true(json_object_get(json_array_get(m, 1), "ReadOnly")));
	cmd = json_object_get(b, "Cmd");
	dump = json_dumps(cmd, JSON_COMPACT);
	assert_string_equal(dump, "[\"--listen\",\"unix:/run/sbx-egress/proxy.sock\","
	    "\"--counts\",\"/run/sbx-egress/counts\",\"--allow\",\"allowed.test\",\"--allow\",\"*.pythonhosted.org:443\","
	    "\"--cidr\",\"10.77.0.0/24\",\"--resolver\",\"198.51.100.53\"]");
	free(dump);
	egress_policy_digest(allow, "198.51.100.53", want);
	assert_string_equal(json_string_value(json_object_get(json_object_get(b, "Labels"),
	    EGRESS_L_POLICY)), want);
	assert_string_equal(json_string_value(json_object_get(json_object_get(b, "Labels"),
	    "io.sbx.role")), "proxy");
	assert_null(json_object_get(b, "ExposedPorts"));
	json_decref(b);
	json_decref(allow);
}

static void
test_sandbox_env_points_every_client_at_the_relay(void **state)
{
	json_t *env = json_array();
	char *dump;

	(void)state;
	assert_int_equal(egress_sandbox_env(env), 0);
	dump = json_dumps(env, JSON_COMPACT);
	assert_non_null(strstr(dump, "\"HTTP_PROXY=http://127.0.0.1:3128\""));
	assert_non_null(strstr(dump, "\"https_proxy=http://127.0.0.1:3128\""));
	assert_non_null(strstr(dump, "\"NO_PROXY=localhost,127.0.0.1,::1\""));
	free(dump);
	json_decref(env);
}

static void
frame(unsigned char *out, size_t *n, int stream, const char *s)
{
	size_t l = strlen(s);

	out[*n] = (unsigned char)stream;
	out[*n + 1] = out[*n + 2] = out[*n + 3] = 0;
	out[*n + 4] = (unsigned char)(l >> 24);
	out[*n + 5] = (unsigned char)(l >> 16);
	out[*n + 6] = (unsigned char)(l >> 8);
	out[*n + 7] = (unsigned char)l;
	memcpy(out + *n + 8, s, l);
	*n += 8 + l;
}

static void
test_log_scan_reads_counts_and_the_last_denials_from_frames(void **state)
{
	static unsigned char buf[64 * 1024];
	struct egress_stats st;
	size_t n = 0;
	int i;
	char l[512];

	(void)state;
	frame(buf, &n, 1, "{\"event\":\"listening\",\"addr\":\"unix:/run/sbx-egress/proxy.sock\"}\n");
	frame(buf, &n, 1, "{\"ts\":\"t0\",\"event\":\"allow\",\"host\":\"allowed.test\",\"port\":443,"
	    "\"addr\":\"198.51.100.10\",\"allowed\":1,\"denied\":0}\n{\"ts\":\"t1\",\"ev");
	/* a line split across frames, and stderr noise in between */
	frame(buf, &n, 2, "{\"event\":\"deny\",\"host\":\"stderr.test\",\"allowed\":99,\"denied\":99}\n");
	frame(buf, &n, 1, "ent\":\"deny\",\"host\":\"denied.test\",\"port\":443,\"reason\":\"denied.test:443 "
	    "is not in this sandbox's allowlist\",\"allowed\":1,\"denied\":1}\n");
	frame(buf, &n, 1, "not json at all\n{\"event\":\"deny\"\n[1,2]\n");
	for (i = 0; i < 30; i++) {
		snprintf(l, sizeof(l), "{\"ts\":\"d%d\",\"event\":\"deny\",\"host\":\"h%d.test\",\"port\":80,"
		    "\"reason\":\"r\",\"allowed\":1,\"denied\":%d,\"extra\":\"x\"}\n", i, i, i + 2);
		frame(buf, &n, 1, l);
	}
	assert_int_equal(egress_log_scan(buf, n, &st), 0);
	assert_int_equal(st.allowed, 1);
	assert_int_equal(st.denied, 31);
	assert_int_equal(json_array_size(st.denials), EGRESS_DENIALS_MAX);
	assert_string_equal(json_string_value(json_object_get(json_array_get(st.denials,
	    EGRESS_DENIALS_MAX - 1), "host")), "h29.test");
	assert_null(json_object_get(json_array_get(st.denials, 0), "extra"));
	egress_stats_clear(&st);
	/* Plain lines (no frames), the stderr one not counted; the split one found. */
	n = 0;
	frame(buf, &n, 1, "{\"ts\":\"t1\",\"event\":\"deny\",\"host\":\"denied.test\",\"port\":80,"
	    "\"reason\":\"no\",\"allowed\":0,\"denied\":1}");
	assert_int_equal(egress_log_scan(buf, n, &st), 0);
	assert_int_equal(st.denied, 1);
	assert_int_equal(json_array_size(st.denials), 1);
	egress_stats_clear(&st);
	{
		static const char plain[] = "{\"event\":\"deny\",\"host\":\"p.test\",\"port\":1,"
		    "\"allowed\":0,\"denied\":1}\n";

		assert_int_equal(egress_log_scan((const unsigned char *)plain, sizeof(plain) - 1,
		    &st), 0);
	}
	assert_int_equal(st.denied, 1);
	egress_stats_clear(&st);
	/* A restarted proxy: its "listening" line carries the totals it
	 * started from (adr/0027); a listening line without them sets none. */
	n = 0;
	frame(buf, &n, 1, "{\"event\":\"deny\",\"host\":\"a.test\",\"port\":1,"
	    "\"allowed\":4,\"denied\":7}\n{\"event\":\"listening\",\"addr\":\"unix:/x\","
	    "\"allowed\":4,\"denied\":7}\n{\"event\":\"listening\",\"addr\":\"unix:/x\"}\n");
	assert_int_equal(egress_log_scan(buf, n, &st), 0);
	assert_int_equal(st.allowed, 4);
	assert_int_equal(st.denied, 7);
	egress_stats_clear(&st);
	assert_int_equal(egress_log_scan((const unsigned char *)"", 0, &st), 0);
	assert_int_equal(st.allowed + st.denied, 0);
	assert_int_equal(json_array_size(st.denials), 0);
	egress_stats_clear(&st);
}

static void
test_log_scan_survives_hostile_bytes(void **state)
{
	static unsigned char buf[20000];
	struct egress_stats st;
	size_t i;

	(void)state;
	for (i = 0; i < sizeof(buf); i++)
		buf[i] = (unsigned char)(i * 131 + 7);
	buf[0] = 1;
	buf[1] = buf[2] = buf[3] = 0;
	buf[4] = 0xff;     /* a frame longer than the input */
	assert_int_equal(egress_log_scan(buf, sizeof(buf), &st), 0);
	egress_stats_clear(&st);
	memset(buf, 'a', sizeof(buf));    /* one over-long line */
	assert_int_equal(egress_log_scan(buf, sizeof(buf), &st), 0);
	assert_int_equal(json_array_size(st.denials), 0);
	egress_stats_clear(&st);
}

/* adr/0027: per-sandbox series that never go back, gone when forgotten. */
static void
test_egress_counts_render_per_sandbox_and_never_go_back(void **state)
{
	struct broker_metrics *m = broker_metrics_new();
	struct evbuffer *out = evbuffer_new();
	char *text;
	size_t n;

	(void)state;
	assert_non_null(m);
	assert_non_null(out);
	assert_int_equal(broker_metrics_egress_set(m, "b-2", 3, 4), 0);
	assert_int_equal(broker_metrics_egress_set(m, "a-1", 1, 0), 0);
	/* an older read that ends last changes nothing */
	assert_int_equal(broker_metrics_egress_set(m, "b-2", 2, 5), 0);
	assert_true(broker_metrics_egress_known(m, "a-1"));
	assert_int_equal(broker_metrics_render(m, out, 0, 0, 0), 0);
	n = evbuffer_get_length(out);
	text = strndup((const char *)evbuffer_pullup(out, -1), n);
	assert_non_null(strstr(text, "# TYPE sbx_broker_egress_connections_total counter\n"
	    "sbx_broker_egress_connections_total{id=\"a-1\",decision=\"allowed\"} 1\n"
	    "sbx_broker_egress_connections_total{id=\"a-1\",decision=\"denied\"} 0\n"
	    "sbx_broker_egress_connections_total{id=\"b-2\",decision=\"allowed\"} 3\n"
	    "sbx_broker_egress_connections_total{id=\"b-2\",decision=\"denied\"} 5\n"));
	free(text);
	broker_metrics_egress_forget(m, "a-1");
	broker_metrics_egress_forget(m, "nobody");
	assert_false(broker_metrics_egress_known(m, "a-1"));
	evbuffer_drain(out, evbuffer_get_length(out));
	assert_int_equal(broker_metrics_render(m, out, 0, 0, 0), 0);
	n = evbuffer_get_length(out);
	text = strndup((const char *)evbuffer_pullup(out, -1), n);
	assert_null(strstr(text, "a-1"));
	assert_non_null(strstr(text, "{id=\"b-2\",decision=\"denied\"} 5\n"));
	free(text);
	evbuffer_free(out);
	broker_metrics_free(m);
}

/* adr/0027: what a proxy reports (the poll's read or GET .../egress) is
 * kept while its sandbox has a row; no proxy, or no row (destroyed while
 * the read was under way), forgets it; a report that does not parse
 * changes nothing. */
static void
test_egress_note_keeps_counts_only_for_a_recorded_sandbox(void **state)
{
	static const char *const files[] = { "broker.db", "broker.db-wal",
	    "broker.db-shm", NULL };
	char dir[] = "/tmp/sbx-egress-note-XXXXXX", path[64];
	struct broker_metrics *m = broker_metrics_new();
	struct evbuffer *out = evbuffer_new();
	struct broker_state *st;
	struct sbx_status sb;
	struct sbx_err err;
	char *text;
	size_t i;

	(void)state;
	assert_non_null(m);
	assert_non_null(out);
	assert_non_null(mkdtemp(dir));
	assert_non_null(st = broker_state_open(dir, &err));
	memset(&sb, 0, sizeof(sb));
	snprintf(sb.id, sizeof(sb.id), "a-1");
	sb.state = SBX_STATE_RUNNING;
	sb.egress = 1;
	assert_int_equal(broker_state_put(st, &sb, "sbx-a-1-work", 1000, &err), 0);

	broker_egress_note(m, st, "a-1",
	    "{\"proxy\":true,\"allowed\":2,\"denied\":1}");
	assert_int_equal(broker_metrics_render(m, out, 0, 0, 0), 0);
	text = strndup((const char *)evbuffer_pullup(out, -1),
	    evbuffer_get_length(out));
	assert_non_null(strstr(text,
	    "{id=\"a-1\",decision=\"allowed\"} 2\n"));
	assert_non_null(strstr(text,
	    "{id=\"a-1\",decision=\"denied\"} 1\n"));
	free(text);
	broker_egress_note(m, st, "a-1", "not a report");
	assert_true(broker_metrics_egress_known(m, "a-1"));
	broker_egress_note(m, st, "b-2",
	    "{\"proxy\":true,\"allowed\":5,\"denied\":0}");
	assert_false(broker_metrics_egress_known(m, "b-2"));
	broker_egress_note(m, st, "a-1", "{\"proxy\":false}");
	assert_false(broker_metrics_egress_known(m, "a-1"));

	broker_state_close(st);
	for (i = 0; files[i] != NULL; i++) {
		snprintf(path, sizeof(path), "%s/%s", dir, files[i]);
		unlink(path);
	}
	rmdir(dir);
	evbuffer_free(out);
	broker_metrics_free(m);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_allowlists_are_checked_with_a_sentence),
		cmocka_unit_test(test_allowlist_length_is_bounded),
		cmocka_unit_test(test_only_star_alone_or_nothing_is_full_egress),
		cmocka_unit_test(test_policy_digest_changes_with_entries_order_and_resolver),
		cmocka_unit_test(test_proxy_body_has_no_capability_no_tcp_listener_and_the_policy_as_argv),
		cmocka_unit_test(test_sandbox_env_points_every_client_at_the_relay),
		cmocka_unit_test(test_log_scan_reads_counts_and_the_last_denials_from_frames),
		cmocka_unit_test(test_log_scan_survives_hostile_bytes),
		cmocka_unit_test(test_egress_counts_render_per_sandbox_and_never_go_back),
		cmocka_unit_test(test_egress_note_keeps_counts_only_for_a_recorded_sandbox),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
