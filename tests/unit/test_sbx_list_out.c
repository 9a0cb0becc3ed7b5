/* test_sbx_list_out.c - common/sbx_list_out.c: a list reply encoded in slices gives the bytes of the one-go encoders, over several loop turns, and a cancelled one never answers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>
#include <event2/event.h>
#include <jansson.h>

#include "sbx_list_out.h"
#include "sbx_proto.h"
#include "sbx_wire.h"

struct seen {
	int calls;
	int turns_before;         /* loop turns counted when done ran */
	int truncated;
	char *text;               /* copy of the body, NULL on error */
	char cursor[SBX_WIRE_CURSOR_MAX + 1];
	char code[64];
	struct sbx_list_out *lo;  /* the caller's pointer (set by start) */
	int turns;
	int free_in_done;         /* free lo from done, as a request would */
};

static void
on_done(void *arg, const struct sbx_err *err, struct evbuffer *text,
    int truncated, const char *cursor)
{
	struct seen *s = arg;
	size_t len;

	s->calls++;
	s->turns_before = s->turns;
	s->truncated = truncated;
	snprintf(s->cursor, sizeof(s->cursor), "%s", cursor);
	if (err != NULL) {
		snprintf(s->code, sizeof(s->code), "%s", err->code);
	} else {
		len = evbuffer_get_length(text);
		s->text = calloc(1, len + 1);
		assert_non_null(s->text);
		evbuffer_copyout(text, s->text, len);
	}
	if (s->free_in_done) {
		sbx_list_out_free(s->lo);
		s->lo = NULL;
	}
}

static struct sbx_dirent *
make_ents(size_t n)
{
	struct sbx_dirent *e = calloc(n + 1, sizeof(*e));
	size_t i;

	assert_non_null(e);
	for (i = 0; i < n; i++) {
		snprintf(e[i].name, sizeof(e[i].name), "f%06zu\"x", i);
		e[i].type = i % 3 == 0 ? "dir" : "file";
		e[i].size = (int64_t)i * 7;
		e[i].mode = 0644;
		e[i].mtime = 1700000000 + (int64_t)i;
	}
	return e;
}

/* Runs base until nothing is pending, numbering its turns 1, 2, ... in s
 * (0: before the loop ran). */
static void
run_loop(struct event_base *base, struct seen *s)
{
	do
		s->turns++;
	while (event_base_loop(base, EVLOOP_ONCE | EVLOOP_NONBLOCK) == 0);
}

static char *
dumps(json_t *j)
{
	char *t = json_dumps(j, JSON_COMPACT);

	assert_non_null(t);
	json_decref(j);
	return t;
}

static void
check_page(size_t n, int truncated, int obj)
{
	struct event_base *base = event_base_new();
	struct sbx_dirent *ents = make_ents(n);
	struct seen s;
	struct sbx_err err;
	char want_cursor[SBX_WIRE_CURSOR_MAX + 1];
	char *want;

	assert_non_null(base);
	memset(&s, 0, sizeof(s));
	s.free_in_done = 1;
	assert_int_equal(sbx_list_out_start(&s.lo, base, n > 0 ? ents : NULL,
	    n, truncated, obj, on_done, &s, &err), 0);
	/* the driver's entries are borrowed: the reply must not need them */
	memset(ents, 0, (n + 1) * sizeof(*ents));
	free(ents);
	run_loop(base, &s);
	assert_int_equal(s.calls, 1);
	assert_null(s.lo);
	ents = make_ents(n);
	want = obj ? dumps(sbx_wire_list_encode(ents, n, truncated)) :
	    dumps(sbx_wire_dirents_encode(ents, n));
	assert_non_null(s.text);
	assert_string_equal(s.text, want);
	want_cursor[0] = '\0';
	if (truncated && n > 0)
		sbx_wire_cursor_encode(ents[n - 1].name, want_cursor,
		    sizeof(want_cursor));
	assert_string_equal(s.cursor, want_cursor);
	assert_int_equal(s.truncated, truncated);
	/* one slice per turn: the first before start returns */
	assert_int_equal(s.turns_before,
	    n == 0 ? 0 : (int)((n - 1) / SBX_LIST_SLICE));
	free(want);
	free(s.text);
	free(ents);
	event_base_free(base);
}

static void
test_empty_directory_answers_at_once(void **state)
{
	(void)state;
	check_page(0, 0, 1);
	check_page(0, 0, 0);
	/* every entry removed since readdir: truncated, but no cursor */
	check_page(0, 1, 1);
}

static void
test_long_page_is_sliced_with_the_same_bytes(void **state)
{
	(void)state;
	check_page(1, 0, 1);
	check_page(SBX_LIST_SLICE, 1, 1);
	check_page(SBX_LIST_SLICE + 1, 1, 1);
	check_page(3 * SBX_LIST_SLICE + 17, 1, 1);
	check_page(3 * SBX_LIST_SLICE + 17, 0, 1);
	check_page(2 * SBX_LIST_SLICE + 3, 1, 0);
}

static void
test_free_before_the_end_cancels(void **state)
{
	struct event_base *base = event_base_new();
	struct sbx_dirent *ents = make_ents(3 * SBX_LIST_SLICE);
	struct seen s;
	struct sbx_err err;

	(void)state;
	assert_non_null(base);
	memset(&s, 0, sizeof(s));
	assert_int_equal(sbx_list_out_start(&s.lo, base, ents,
	    3 * SBX_LIST_SLICE, 1, 1, on_done, &s, &err), 0);
	assert_non_null(s.lo);
	assert_int_equal(s.calls, 0);
	sbx_list_out_free(s.lo);   /* the client went away */
	run_loop(base, &s);
	assert_int_equal(s.calls, 0);
	sbx_list_out_free(NULL);
	free(ents);
	event_base_free(base);
}

int
main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_empty_directory_answers_at_once),
		cmocka_unit_test(test_long_page_is_sliced_with_the_same_bytes),
		cmocka_unit_test(test_free_before_the_end_cancels),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
