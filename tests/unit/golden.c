/* golden.c - reading proto's golden transcripts in the unit tests (golden.h). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "golden.h"

const char *
golden_dir(void)
{
	const char *d = getenv("SBX_GOLDEN_DIR");

	return d != NULL && *d != '\0' ? d : "proto/golden";
}

char *
slurp(const char *path, size_t *n)
{
	FILE *f = fopen(path, "rb");
	char *s = NULL;
	long sz;

	if (f == NULL)
		fail_msg("cannot open %s (run from the repo root or set "
		    "SBX_GOLDEN_DIR)", path);
	fseek(f, 0, SEEK_END);
	sz = ftell(f);
	fseek(f, 0, SEEK_SET);
	s = malloc((size_t)sz + 1);
	assert_non_null(s);
	assert_int_equal(fread(s, 1, (size_t)sz, f), (size_t)sz);
	fclose(f);
	s[sz] = '\0';
	*n = (size_t)sz;
	return s;
}

char *
take(struct evbuffer *out, size_t *n)
{
	char *s;

	*n = evbuffer_get_length(out);
	s = malloc(*n + 1);
	assert_non_null(s);
	assert_int_equal(evbuffer_remove(out, s, *n), (int)*n);
	s[*n] = '\0';
	return s;
}
