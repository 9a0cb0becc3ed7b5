/*
 * fuzz_helper_list.c - libFuzzer target: the broker's parser of
 * `sbx-helper list` output (broker/driver_engine.c parse_dirents(), a JSON
 * array of entries written by a helper inside the sandbox, whose file names
 * the sandbox user chooses).
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - output that is not one JSON array is refused with code "runtime" and
 *    the callback is not called; an array gives exactly one callback;
 *  - every entry handed on has a non-empty name without '/' or NUL that
 *    fits its buffer, a type among file/dir/symlink/other and permission
 *    bits only (mode <= 07777); never more entries than the array has;
 *  - bounded allocation: one entry per array element at most.
 */
#include "engine_incl.h"

struct got {
	int calls;
	size_t n;
};

static void
on_list(void *arg, const struct sbx_err *err, const struct sbx_dirent *ents,
    size_t n)
{
	struct got *g = arg;
	size_t i, len;

	FUZZ_ASSERT(err == NULL);
	g->calls++;
	g->n = n;
	for (i = 0; i < n; i++) {
		len = strnlen(ents[i].name, sizeof(ents[i].name));
		FUZZ_ASSERT(len > 0 && len < sizeof(ents[i].name));
		FUZZ_ASSERT(strchr(ents[i].name, '/') == NULL);
		FUZZ_ASSERT(strcmp(ents[i].type, "file") == 0 ||
		    strcmp(ents[i].type, "dir") == 0 ||
		    strcmp(ents[i].type, "symlink") == 0 ||
		    strcmp(ents[i].type, "other") == 0);
		FUZZ_ASSERT(ents[i].mode <= 07777);
	}
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct engine *e = fz_engine();
	struct sbx_err err;
	struct eop *op;
	struct got g;
	json_t *j;
	int rc;

	memset(&g, 0, sizeof(g));
	op = op_new(e, OP_LIST, "fuzz", &err);
	FUZZ_ASSERT(op != NULL);
	op->out = evbuffer_new();
	FUZZ_ASSERT(op->out != NULL);
	evbuffer_add(op->out, data, size);
	rc = parse_dirents(op, on_list, &g, &err);
	j = json_loadb((const char *)data, size, 0, NULL);
	if (json_is_array(j)) {
		FUZZ_ASSERT(rc == 0 && g.calls == 1);
		FUZZ_ASSERT(g.n <= json_array_size(j));
	} else {
		FUZZ_ASSERT(rc == -1 && g.calls == 0);
		FUZZ_ASSERT(strcmp(err.code, SBX_E_RUNTIME) == 0);
	}
	json_decref(j);
	op_release(op);
	fz_drain(e);
	return 0;
}
