/* fuzz.h - what every libFuzzer target of tests/fuzz/ shares: a hard check that aborts with a message. */
#ifndef SBX_FUZZ_H
#define SBX_FUZZ_H

#include <stdio.h>
#include <stdlib.h>

/*
 * FUZZ_ASSERT(cond): the target's invariant. When cond is false the target
 * prints the file, line and condition to stderr and aborts, which libFuzzer
 * reports as a crash and saves the input (a finding, like an ASan report).
 * Never compiled out (no NDEBUG dependence).
 */
#define FUZZ_ASSERT(cond) do { \
	if (!(cond)) { \
		fprintf(stderr, "%s:%d: invariant broken: %s\n", __FILE__, \
		    __LINE__, #cond); \
		abort(); \
	} \
} while (0)

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

#endif
