/*
 * fuzz_helper_frames.c - libFuzzer target: the broker's decoder of
 * sbx-helper's exec frames (broker/driver_engine_exec.c eng_helper_frames(),
 * protocol of proto/sbx_helper_proto.h), which reads bytes a
 * sandbox process can influence.
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour, however the stream is split;
 *  - the output delivered to the sink is exactly what a reference decoder
 *    written here from sbx_helper_proto.h finds: the payloads of stdout and
 *    stderr frames, in order, up to the first protocol violation;
 *  - a violation (bad type, version, zero bytes, length out of its type's
 *    bound, a frame after the exit record, a second error record, a
 *    malformed record) ends the exec with exactly one sink error, code
 *    "runtime", and a kill of the exec; a valid stream gives no terminal
 *    callback from the decoder (the exit is reported once the stream ends);
 *  - at most one terminal callback; every op (and kill op) ends: none leaks.
 */
#include "engine_incl.h"

struct got {
	unsigned char *out[3];
	size_t len[3];
	int errors, exits;
	char code[48];
};

static void
on_output(void *arg, int stream, const unsigned char *buf, size_t len)
{
	struct got *g = arg;

	FUZZ_ASSERT(stream == 1 || stream == 2);
	FUZZ_ASSERT(len > 0 && len <= STREAM_CHUNK);
	FUZZ_ASSERT(g->errors == 0 && g->exits == 0);
	g->out[stream] = realloc(g->out[stream], g->len[stream] + len);
	FUZZ_ASSERT(g->out[stream] != NULL);
	memcpy(g->out[stream] + g->len[stream], buf, len);
	g->len[stream] += len;
}

static void
on_exit_(void *arg, const struct sbx_exit *ex)
{
	struct got *g = arg;

	(void)ex;
	g->exits++;
}

static void
on_error(void *arg, const struct sbx_err *err)
{
	struct got *g = arg;

	g->errors++;
	snprintf(g->code, sizeof(g->code), "%s", err->code);
}

/* The reference: 1 when the stream is valid so far, 0 at a violation. Sets
 * the expected output. */
static int
reference(const unsigned char *d, size_t n, unsigned char *exp[3],
    size_t explen[3], int *got_exit_out)
{
	size_t i = 0, plen, k;
	int got_exit = 0, got_err = 0, type;

	while (i < n) {
		if (n - i < 8) {
			/* an incomplete header: valid so far */
			*got_exit_out = got_exit;
			return 1;
		}
		type = d[i];
		plen = (size_t)d[i + 4] << 24 | (size_t)d[i + 5] << 16 |
		    (size_t)d[i + 6] << 8 | d[i + 7];
		if (got_exit || d[i + 1] != 2 || d[i + 2] != 0 || d[i + 3] != 0)
			return 0;
		if (type == 1 || type == 2) {
			if (plen < 1 || plen > 1024 * 1024)
				return 0;
		} else if (type == 3) {
			if (plen != 8)
				return 0;
		} else if (type == 4) {
			if (plen < 1 || plen > 4096 || got_err)
				return 0;
		} else {
			return 0;
		}
		i += 8;
		k = plen < n - i ? plen : n - i;
		if (type == 1 || type == 2) {
			memcpy(exp[type] + explen[type], d + i, k);
			explen[type] += k;
		}
		if (k < plen) {
			*got_exit_out = got_exit;
			return 1;  /* a payload still coming */
		}
		if (type == 3) {
			const unsigned char *r = d + i;

			if ((r[3] & ~1) != 0 || r[4] || r[5] || r[6] || r[7])
				return 0;
			if (!((r[0] == 1 && r[2] == 0) ||
			    (r[0] == 2 && r[1] == 0 && r[2] >= 1 && r[2] <= 64)))
				return 0;
			got_exit = 1;
		} else if (type == 4) {
			json_t *j = json_loadb((const char *)d + i, plen, 0,
			    NULL);
			json_t *e = json_object_get(j, "error");
			const char *c = json_string_value(json_object_get(e,
			    "code"));
			int ok = json_integer_value(json_object_get(j,
			    "sbx_helper")) == 2 && c != NULL &&
			    json_string_value(json_object_get(e, "message")) !=
			    NULL && c[0] != '\0' && strlen(c) < 48 &&
			    strspn(c, "abcdefghijklmnopqrstuvwxyz_") == strlen(c);

			json_decref(j);
			if (!ok)
				return 0;
			got_err = 1;
		}
		i += plen;
	}
	*got_exit_out = got_exit;
	return 1;
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct engine *e = fz_engine();
	unsigned char *exp[3] = { NULL, NULL, NULL };
	size_t explen[3] = { 0, 0, 0 };
	struct sbx_err err;
	struct eop *op;
	struct got g;
	size_t off = 0, n, step;
	int valid, got_exit = 0, alive, s;

	/* This target judges the frame reader alone: a broken stream fails at
	 * once with runtime_error. The check a failed op makes against its
	 * container first (e->fail_hook, adr/0056) would ask a runtime the
	 * fuzzer does not have and answer later. */
	e->fail_hook = NULL;

	if (size == 0)
		return 0;
	step = data[0] == 0 ? 0 : (size_t)data[0] * 7;
	data++;
	size--;
	memset(&g, 0, sizeof(g));
	op = eng_helper_op(e, &eng_kind_exec, "fuzz", sizeof(struct eop_cmd), &err);
	FUZZ_ASSERT(op != NULL);
	snprintf(op->cid, sizeof(op->cid), "%s", "0123456789ab");
	snprintf(xop(op)->exec_id, sizeof(xop(op)->exec_id), "%s", "fuzz-exec");
	xop(op)->cap = (int64_t)16 * 1024 * 1024;
	xop(op)->streaming = 1;
	xop(op)->sink.output = on_output;
	xop(op)->sink.exit = on_exit_;
	xop(op)->sink.error = on_error;
	xop(op)->sink.arg = &g;
	eng_op_enter(op);
	while (off < size && !op->dead) {
		n = step == 0 || step > size - off ? size - off : step;
		eng_helper_frames(op, data + off, n);
		off += n;
	}
	alive = eng_op_leave(op);

	exp[1] = malloc(size + 1);
	exp[2] = malloc(size + 1);
	FUZZ_ASSERT(exp[1] != NULL && exp[2] != NULL);
	valid = reference(data, size, exp, explen, &got_exit);
	FUZZ_ASSERT(g.exits == 0);
	if (valid) {
		FUZZ_ASSERT(alive && g.errors == 0);
		FUZZ_ASSERT(cmo(op)->got_exit == got_exit);
		if (cmo(op)->got_exit)
			FUZZ_ASSERT(cmo(op)->xhow == 1 || (cmo(op)->xhow == 2 &&
			    cmo(op)->xsig >= 1 && cmo(op)->xsig <= 64));
		eng_op_release(op);
	} else {
		FUZZ_ASSERT(!alive && g.errors == 1);
		FUZZ_ASSERT(strcmp(g.code, SBX_E_RUNTIME) == 0);
	}
	for (s = 1; s <= 2; s++) {
		FUZZ_ASSERT(g.len[s] == explen[s]);
		FUZZ_ASSERT(explen[s] == 0 || memcmp(g.out[s], exp[s],
		    explen[s]) == 0);
		free(g.out[s]);
		free(exp[s]);
	}
	fz_drain(e);
	return 0;
}
