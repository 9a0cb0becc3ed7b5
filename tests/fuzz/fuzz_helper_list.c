/*
 * fuzz_helper_list.c - libFuzzer target: the broker's parser of one line of
 * `sbx-helper list` output (broker/driver_engine.h sbx_helper_list_line(),
 * whose file names the sandbox user chooses).
 *
 * Invariants asserted:
 *  - no crash, leak or undefined behaviour;
 *  - an entry handed on has a non-empty one-segment name (no '/', no NUL,
 *    not "." or ".."), a type among file/dir/symlink/other and permission
 *    bits only (mode <= 07777).
 */
#include <string.h>

#include "driver_engine.h"
#include "fuzz.h"
#include "sbx_driver.h"

int
LLVMFuzzerTestOneInput(const unsigned char *data, size_t size)
{
	struct sbx_dirent d;
	int trunc = 0, r;
	size_t len;

	r = sbx_helper_list_line((const char *)data, size, &d, &trunc);
	if (r == 1) {
		len = strnlen(d.name, sizeof(d.name));
		FUZZ_ASSERT(len > 0 && len < sizeof(d.name));
		FUZZ_ASSERT(strchr(d.name, '/') == NULL);
		FUZZ_ASSERT(strcmp(d.name, ".") != 0 && strcmp(d.name, "..") != 0);
		FUZZ_ASSERT(strcmp(d.type, "file") == 0 ||
		    strcmp(d.type, "dir") == 0 ||
		    strcmp(d.type, "symlink") == 0 ||
		    strcmp(d.type, "other") == 0);
		FUZZ_ASSERT(d.mode <= 07777);
	}
	return 0;
}
