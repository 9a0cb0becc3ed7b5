/* sbx_token.h - bearer tokens kept only as BLAKE2b digests, compared in constant time (SPEC §4). */
#ifndef SBX_TOKEN_H
#define SBX_TOKEN_H

#include <stddef.h>

#include "sbx_err.h"
#include "sbx_proto.h" /* SBX_E_BAD_TOKEN */


/* SBX_TOKEN_MIN_LEN (characters, bytes): sbx_proto.h, the wire contract. */
#define SBX_TOKEN_MAX_LEN 4096  /* bytes, file content included */
#define SBX_TOKEN_GEN_LEN 43    /* chars written by sbx_token_generate (32 bytes base64url) */

/*
 * A loaded token: only its BLAKE2b-256 digest (crypto_generichash, 32 bytes,
 * no key) is kept; the plaintext is wiped as soon as it is hashed.
 * Zero-initialised means "no token" (set 0): nothing verifies against it.
 */
struct sbx_token {
	unsigned char digest[32];
	int set;
};

/*
 * Loads the token. file non-NULL: reads it; it must be a regular file (a
 * symlink to one is followed) whose mode grants nothing to group or others
 * (mode & 077 == 0; 0600 or 0400), at most SBX_TOKEN_MAX_LEN bytes; trailing
 * whitespace (newline, spaces, tabs, CR) is trimmed. file NULL: uses
 * env_value (e.g. getenv("SBX_BROKER_TOKEN"); the caller should unsetenv it
 * afterwards so children do not inherit it). The token must be at least
 * SBX_TOKEN_MIN_LEN characters of visible ASCII (0x21..0x7e, as an HTTP
 * header token can carry).
 *
 * Returns 0 with t->set = 1. Returns -1 with t zeroed and err code
 * SBX_E_BAD_TOKEN when: both are NULL/empty; the file cannot be opened or
 * read (message names the file and the errno text); it is not a regular
 * file; its mode is too open (message names the file, its mode and the
 * required 0600); it is too long; the token is shorter than 16 characters
 * or contains other characters. The message never contains the token.
 * Every copy of the plaintext made here is wiped (sodium_memzero).
 */
int sbx_token_load(struct sbx_token *t, const char *file, const char *env_value,
    struct sbx_err *err);

/*
 * Sets t from a plaintext of len bytes (e.g. an API key a process generated).
 * Same length/character rules as sbx_token_load. Returns 0, or -1 with
 * SBX_E_BAD_TOKEN and t zeroed. The plaintext is not modified (caller wipes).
 */
int sbx_token_set(struct sbx_token *t, const char *plaintext, size_t len,
    struct sbx_err *err);

/* Wipes t (sodium_memzero); afterwards nothing verifies against it. NULL ok. */
void sbx_token_clear(struct sbx_token *t);

/*
 * Returns 1 when presented (len bytes, any length, NULL only with len 0)
 * is the token, else 0. presented is hashed to a 32-byte BLAKE2b digest and
 * the digests compared with sodium_memcmp, so the time taken does not depend
 * on where or whether presented differs from the token (no early return on
 * length or prefix). Returns 0 when t is NULL or not set.
 */
int sbx_token_verify(const struct sbx_token *t, const char *presented, size_t len);

/*
 * Checks an HTTP Authorization header value: "Bearer <token>" with the scheme
 * matched case-insensitively, leading spaces/tabs before the scheme and one or
 * more spaces/tabs after it tolerated, trailing spaces/tabs ignored. Returns 1
 * only when the token verifies (sbx_token_verify); 0 for NULL, another scheme,
 * an empty token, or a wrong one. The field is parsed by sbx_gate_bearer
 * (sbx_gate.h), the one parser of this grammar.
 */
int sbx_bearer_verify(const struct sbx_token *t, const char *authorization_header);

/*
 * Writes a new random token: 32 bytes from randombytes_buf encoded base64url
 * without padding (43 chars, [A-Za-z0-9_-]) plus NUL. outlen must be at least
 * SBX_TOKEN_GEN_LEN + 1. Returns 0, or -1 (out untouched) when outlen is too
 * small or libsodium cannot initialise.
 */
int sbx_token_generate(char *out, size_t outlen);

/*
 * Reads the token's plaintext for a client of the daemon that holds it (its
 * own --health probe, sbx_probe.h): the same sources and rules as
 * sbx_token_load (file first, else env_value; trailing whitespace trimmed;
 * length and characters checked). out must have room for at least
 * SBX_TOKEN_MAX_LEN + 1 bytes (outsz); it receives the NUL-terminated token
 * and *outlen its length. Returns 0, or -1 with out wiped and err set as by
 * sbx_token_load (SBX_E_BAD_TOKEN, also when outsz is too small).
 * The caller wipes out (sodium_memzero) as soon as it has sent the token.
 */
int sbx_token_read(const char *file, const char *env_value, char *out,
    size_t outsz, size_t *outlen, struct sbx_err *err);

/*
 * Removes the environment variable name (e.g. "SBX_BROKER_TOKEN") from the
 * process: unsetenv(3), and every "name=value" string of it that lies in the
 * process's initial environment block (env_start..env_end of
 * /proc/self/stat, proc(5)) is overwritten with NUL bytes in place, so
 * /proc/PID/environ, which shows that block as it is now and not what
 * environ(7) points to, no longer holds it. Strings setenv(3) made are only
 * unset (glibc may keep them). Copy the value before calling: getenv's
 * pointer then points at zeros. Returns the number of strings wiped.
 */
int sbx_env_scrub(const char *name);

#endif
