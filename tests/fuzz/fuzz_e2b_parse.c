/*
 * fuzz_e2b_parse.c - libFuzzer target: what the E2B layer reads from a
 * client before any credential is looked at or after a key passed
 * (api/api_e2b_parse.c, adr/0059): the metadata filter of GET
 * /v2/sandboxes, the state filter, and the {port}-{id}.{domain} Host.
 *
 * Input: three '\n'-separated fields: the metadata query value, the state
 * value, the Host value (matched against "e2b.example.com:8080").
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - the filter is an object (0) or nothing with bad_request (-1), and an
 *    object matches a metadata text holding every pair it has;
 *  - the state bits are 1..3, or -1 with bad_request;
 *  - an accepted Host gives a port 1..65535 and a valid NPC name that
 *    the Host holds right after "PORT-".
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "api_e2b_int.h"
#include "fuzz.h"
#include "sbx_proto.h"

int
LLVMFuzzerInitialize(int *argc, char ***argv)
{
	(void)argc;
	(void)argv;
	return 0;
}

/* The next '\n'-separated field of [*p, end) as a new string. */
static char *
field(const char **p, const char *end)
{
	const char *nl = memchr(*p, '\n', (size_t)(end - *p));
	size_t n = nl != NULL ? (size_t)(nl - *p) : (size_t)(end - *p);
	char *s = malloc(n + 1);

	FUZZ_ASSERT(s != NULL);
	memcpy(s, *p, n);
	s[n] = '\0';
	*p = nl != NULL ? nl + 1 : end;
	return s;
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	const char *p = (const char *)data, *end = p + size;
	char *q = field(&p, end), *st = field(&p, end), *h = field(&p, end);
	struct sbx_err err;
	json_t *f = NULL;
	char id[API_NPC_NAME_MAX + 2], lead[16], *md;
	int port = 0, bits;

	sbx_err_clear(&err);
	if (api_e2b_metadata_filter(q, &f, &err) == 0) {
		FUZZ_ASSERT(json_is_object(f));
		md = json_dumps(f, JSON_COMPACT);
		FUZZ_ASSERT(md != NULL);
		FUZZ_ASSERT(api_e2b_metadata_match(md, f));
		free(md);
		json_decref(f);
	} else {
		FUZZ_ASSERT(f == NULL);
		FUZZ_ASSERT(strcmp(err.code, SBX_E_BAD_REQUEST) == 0);
	}
	sbx_err_clear(&err);
	bits = api_e2b_state_filter(st, &err);
	FUZZ_ASSERT((bits >= 1 && bits <= 3) || (bits == -1 &&
	    strcmp(err.code, SBX_E_BAD_REQUEST) == 0));
	if (api_e2b_host_parse(h, strlen(h), "e2b.example.com:8080", &port, id,
	    sizeof(id))) {
		FUZZ_ASSERT(port >= 1 && port <= 65535);
		FUZZ_ASSERT(api_npc_name_valid(id));
		snprintf(lead, sizeof(lead), "%d-", port);
		FUZZ_ASSERT(strstr(h, lead) != NULL);
		FUZZ_ASSERT(strstr(h, id) != NULL);
	}
	free(q);
	free(st);
	free(h);
	return 0;
}
