/*
 * fuzz_config.c - libFuzzer target: the config file parser (common/
 * sbx_config.c, SPEC §9) with the real key tables of sandbox-broker
 * (broker_config_keys) and sandbox-api (api_config_keys), and the value
 * parsers it uses (durations, byte sizes, booleans).
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour, whatever the file holds (the
 *    file is read through a memfd, as a regular file);
 *  - a refusal is config_error with a message that never quotes a secret;
 *  - round trip exact: an accepted file, printed (--print-config), read back
 *    and printed again gives the same bytes (unless a secret was redacted);
 *  - the value of a secret key never appears in the printed configuration;
 *  - the value parsers accept only non-negative results.
 */
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "api.h"
#include "broker.h"
#include "fuzz.h"
#include "sbx_config.h"

union anycfg {
	struct broker_config b;
	struct api_config a;
};

/* Loads the bytes as "--config FILE"; returns the printed configuration
 * (owned) or NULL when refused. */
static char *
load(const struct sbx_config_key *keys, const unsigned char *data,
    size_t size, size_t *plen, union anycfg *cfg, struct sbx_err *err)
{
	char path[64];
	char *argv[4];
	char *out = NULL;
	FILE *f;
	int fd, rc;

	fd = memfd_create("fuzz-config", MFD_CLOEXEC);
	FUZZ_ASSERT(fd >= 0);
	FUZZ_ASSERT(write(fd, data, size) == (ssize_t)size);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	argv[0] = "fuzz";
	argv[1] = "--config";
	argv[2] = path;
	argv[3] = NULL;
	memset(cfg, 0, sizeof(*cfg));
	rc = sbx_config_load(keys, cfg, 3, argv, NULL, err);
	close(fd);
	if (rc == 0) {
		f = open_memstream(&out, plen);
		FUZZ_ASSERT(f != NULL);
		sbx_config_print(f, keys, cfg);
		fclose(f);
	} else {
		FUZZ_ASSERT(strcmp(err->code, SBX_E_CONFIG) == 0);
	}
	return out;
}

static void
check_secrets(const struct sbx_config_key *keys, const union anycfg *cfg,
    const char *printed, const struct sbx_err *err)
{
	const struct sbx_config_key *k;
	const char *v;

	for (k = keys; k->name != NULL; k++) {
		if (!k->secret || k->type != SBX_CFG_STRING)
			continue;
		v = *(char *const *)(const void *)((const char *)cfg + k->offset);
		if (v == NULL || strlen(v) < 4)
			continue;
		if (printed != NULL)
			FUZZ_ASSERT(strstr(printed, v) == NULL);
		if (err != NULL)
			FUZZ_ASSERT(strstr(err->message, v) == NULL);
	}
}

static void
values(const unsigned char *data, size_t size)
{
	char *s = malloc(size + 1);
	long long v;
	int b;

	FUZZ_ASSERT(s != NULL);
	memcpy(s, data, size);
	s[size] = '\0';
	if (sbx_parse_duration_ms(s, &v) == 0)
		FUZZ_ASSERT(v >= 0);
	if (sbx_parse_bytes(s, &v) == 0)
		FUZZ_ASSERT(v >= 0);
	if (sbx_parse_bool(s, &b) == 0)
		FUZZ_ASSERT(b == 0 || b == 1);
	free(s);
}

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	const struct sbx_config_key *keys;
	union anycfg c1, c2;
	struct sbx_err e1, e2;
	char *p1, *p2;
	size_t l1 = 0, l2 = 0;

	if (size == 0)
		return 0;
	if (data[0] == 'v') {
		values(data + 1, size - 1);
		return 0;
	}
	keys = data[0] & 1 ? api_config_keys : broker_config_keys;
	p1 = load(keys, data + 1, size - 1, &l1, &c1, &e1);
	check_secrets(keys, &c1, p1, p1 == NULL ? &e1 : NULL);
	if (p1 != NULL && strstr(p1, "[redacted]") == NULL) {
		p2 = load(keys, (const unsigned char *)p1, l1, &l2, &c2, &e2);
		FUZZ_ASSERT(p2 != NULL);
		FUZZ_ASSERT(l1 == l2 && memcmp(p1, p2, l1) == 0);
		free(p2);
		sbx_config_free(keys, &c2);
	}
	free(p1);
	sbx_config_free(keys, &c1);
	return 0;
}
