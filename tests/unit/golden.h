/* golden.h - what the NDJSON/SSE transcript unit tests share: proto's golden files and draining an evbuffer (tests/unit/golden.c). */
#ifndef SBX_TEST_GOLDEN_H
#define SBX_TEST_GOLDEN_H

#include <stddef.h>

/* The transcripts' directory: $SBX_GOLDEN_DIR when set and not empty, else
 * "proto/golden" (relative: the tests run from the repository root). */
const char *golden_dir(void);

/*
 * slurp(path, n): the whole file at PATH, malloc'd (caller frees) and
 * NUL-terminated, its length in *N. A missing or unreadable file fails the
 * running cmocka test (fail_msg/assert), it never returns NULL.
 */
char *slurp(const char *path, size_t *n);

struct evbuffer;
/* take(out, n): moves OUT's whole content into a malloc'd NUL-terminated
 * buffer (caller frees), its length in *N; OUT is left empty. Asserts. */
char *take(struct evbuffer *out, size_t *n);

#endif
