/* sbx_token.c - bearer token loading, digest-only storage and constant-time verification. */
#include <sys/stat.h>

#include <errno.h>
#include <fcntl.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "sbx_gate.h"
#include "sbx_token.h"

void
sbx_token_clear(struct sbx_token *t)
{
	if (t != NULL)
		sodium_memzero(t, sizeof(*t));
}

int
sbx_token_set(struct sbx_token *t, const char *plaintext, size_t len,
    struct sbx_err *err)
{
	size_t i;

	sbx_token_clear(t);
	if (sodium_init() < 0)
		return sbx_err_set(err, SBX_E_BAD_TOKEN, SBX_MSG_SODIUM);
	if (plaintext == NULL || len == 0)
		return sbx_err_set(err, SBX_E_BAD_TOKEN, "token is missing");
	if (len < SBX_TOKEN_MIN_LEN)
		return sbx_err_set(err, SBX_E_BAD_TOKEN,
		    "token is %zu characters; at least %d are required", len,
		    SBX_TOKEN_MIN_LEN);
	if (len > SBX_TOKEN_MAX_LEN)
		return sbx_err_set(err, SBX_E_BAD_TOKEN,
		    SBX_MSG_TOKEN_TOO_LONG, SBX_TOKEN_MAX_LEN);
	for (i = 0; i < len; i++) {
		unsigned char c = (unsigned char)plaintext[i];

		if (c < 0x21 || c > 0x7e)
			return sbx_err_set(err, SBX_E_BAD_TOKEN,
			    "token contains a character other than visible ASCII "
			    "(at offset %zu)", i);
	}
	crypto_generichash(t->digest, sizeof(t->digest),
	    (const unsigned char *)plaintext, len, NULL, 0);
	t->set = 1;
	return 0;
}

/* Reads file into buf (SBX_TOKEN_MAX_LEN + 1 bytes); returns bytes read or -1. */
static ssize_t
read_token_file(const char *file, char *buf, size_t bufsz, struct sbx_err *err)
{
	struct stat st;
	size_t total = 0;
	ssize_t n;
	int fd = -1;

	if ((fd = open(file, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK)) == -1) {
		sbx_err_set(err, SBX_E_BAD_TOKEN, "cannot open token file %s: %s",
		    file, strerror(errno));
		goto fail;
	}
	if (fstat(fd, &st) == -1) {
		sbx_err_set(err, SBX_E_BAD_TOKEN, "cannot stat token file %s: %s",
		    file, strerror(errno));
		goto fail;
	}
	if (!S_ISREG(st.st_mode)) {
		sbx_err_set(err, SBX_E_BAD_TOKEN,
		    "token file %s is not a regular file", file);
		goto fail;
	}
	if ((st.st_mode & 077) != 0) {
		sbx_err_set(err, SBX_E_BAD_TOKEN,
		    "token file %s has mode %04o; it must not be accessible by group "
		    "or others (chmod 0600 %s)", file, (unsigned)(st.st_mode & 07777),
		    file);
		goto fail;
	}
	for (;;) {
		n = read(fd, buf + total, bufsz - total);
		if (n == -1 && errno == EINTR)
			continue;
		if (n == -1) {
			sbx_err_set(err, SBX_E_BAD_TOKEN, "cannot read token file %s: %s",
			    file, strerror(errno));
			goto fail;
		}
		if (n == 0)
			break;
		total += (size_t)n;
		if (total == bufsz) {
			sbx_err_set(err, SBX_E_BAD_TOKEN,
			    "token file %s is longer than %d bytes", file,
			    SBX_TOKEN_MAX_LEN);
			goto fail;
		}
	}
	close(fd);
	return (ssize_t)total;
fail:
	if (fd != -1)
		close(fd);
	return -1;
}

int
sbx_token_load(struct sbx_token *t, const char *file, const char *env_value,
    struct sbx_err *err)
{
	char buf[SBX_TOKEN_MAX_LEN + 1];
	const char *src = NULL;
	ssize_t n;
	size_t len = 0;
	int rc = -1;

	sbx_token_clear(t);
	if (file != NULL) {
		if ((n = read_token_file(file, buf, sizeof(buf), err)) < 0)
			goto done;
		len = (size_t)n;
		src = buf;
	} else if (env_value != NULL) {
		src = env_value;
		len = strlen(env_value);
	}
	if (src == NULL || len == 0) {
		sbx_err_set(err, SBX_E_BAD_TOKEN, file != NULL ?
		    "token file is empty" : "no token given (token file or environment)");
		goto done;
	}
	while (len > 0 && (src[len - 1] == '\n' || src[len - 1] == '\r' ||
	    src[len - 1] == ' ' || src[len - 1] == '\t'))
		len--;
	if (len == 0) {
		sbx_err_set(err, SBX_E_BAD_TOKEN, "token is empty");
		goto done;
	}
	if (sbx_token_set(t, src, len, err) != 0) {
		/* Name the source so an operator knows what to fix. */
		if (file != NULL && err != NULL) {
			char msg[sizeof(err->message)];

			snprintf(msg, sizeof(msg), "%s", err->message);
			sbx_err_set(err, SBX_E_BAD_TOKEN, "%s (in %s)", msg, file);
		}
		goto done;
	}
	rc = 0;
done:
	sodium_memzero(buf, sizeof(buf));
	return rc;
}

int
sbx_token_verify(const struct sbx_token *t, const char *presented, size_t len)
{
	unsigned char d[crypto_generichash_BYTES];
	int ok;

	if (sodium_init() < 0)
		return 0;
	if (presented == NULL)
		len = 0;
	crypto_generichash(d, sizeof(d), (const unsigned char *)
	    (presented != NULL ? presented : ""), len, NULL, 0);
	if (t == NULL || !t->set) {
		sodium_memzero(d, sizeof(d));
		return 0;
	}
	ok = sodium_memcmp(d, t->digest, sizeof(d)) == 0;
	sodium_memzero(d, sizeof(d));
	return ok;
}

int
sbx_bearer_verify(const struct sbx_token *t, const char *authorization_header)
{
	const char *cred;
	size_t len = 0;

	cred = sbx_gate_bearer(authorization_header, &len);
	return cred != NULL && sbx_token_verify(t, cred, len);
}

int
sbx_token_generate(char *out, size_t outlen)
{
	unsigned char raw[32];

	if (out == NULL || outlen < SBX_TOKEN_GEN_LEN + 1 || sodium_init() < 0)
		return -1;
	randombytes_buf(raw, sizeof(raw));
	sodium_bin2base64(out, outlen, raw, sizeof(raw),
	    sodium_base64_VARIANT_URLSAFE_NO_PADDING);
	sodium_memzero(raw, sizeof(raw));
	return 0;
}

int
sbx_token_read(const char *file, const char *env_value, char *out,
    size_t outsz, size_t *outlen, struct sbx_err *err)
{
	struct sbx_token check;
	ssize_t n;
	size_t len = 0;

	*outlen = 0;
	if (out == NULL || outsz < SBX_TOKEN_MAX_LEN + 1)
		return sbx_err_set(err, SBX_E_BAD_TOKEN, "token buffer too small");
	if (file != NULL) {
		if ((n = read_token_file(file, out, SBX_TOKEN_MAX_LEN + 1,
		    err)) < 0)
			goto fail;
		len = (size_t)n;
	} else if (env_value != NULL) {
		len = strlen(env_value);
		if (len > SBX_TOKEN_MAX_LEN) {
			sbx_err_set(err, SBX_E_BAD_TOKEN, SBX_MSG_TOKEN_TOO_LONG,
			    SBX_TOKEN_MAX_LEN);
			goto fail;
		}
		memcpy(out, env_value, len);
	}
	while (len > 0 && (out[len - 1] == '\n' || out[len - 1] == '\r' ||
	    out[len - 1] == ' ' || out[len - 1] == '\t'))
		len--;
	out[len] = '\0';
	/* The rules are sbx_token_set's; only its verdict is kept. */
	if (sbx_token_set(&check, out, len, err) != 0)
		goto fail;
	sbx_token_clear(&check);
	*outlen = len;
	return 0;
fail:
	sodium_memzero(out, outsz);
	return -1;
}

/* env_start and env_end (fields 50 and 51) of /proc/self/stat. */
static int
env_block(uintptr_t *start, uintptr_t *end)
{
	char buf[4096], *p;
	unsigned long long a = 0, b = 0;
	FILE *f;
	size_t n;
	int field;

	if ((f = fopen("/proc/self/stat", "re")) == NULL)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* Field 2 (comm) may hold spaces: count from its closing ')'. */
	if ((p = strrchr(buf, ')')) == NULL)
		return -1;
	for (field = 2; *p != '\0' && field < 49; p++)
		if (*p == ' ')
			field++;
	/* p is at field 49 (arg_end). */
	if (sscanf(p, "%*s %llu %llu", &a, &b) != 2 || a == 0 || b <= a)
		return -1;
	*start = (uintptr_t)a;
	*end = (uintptr_t)b;
	return 0;
}

int
sbx_env_scrub(const char *name)
{
	extern char **environ;
	char *found[16];
	size_t nlen = strlen(name), nfound = 0, i;
	uintptr_t start = 0, end = 0, q;
	int have = env_block(&start, &end) == 0, wiped = 0;
	char **e;

	for (e = environ; e != NULL && *e != NULL && nfound < 16; e++)
		if (strncmp(*e, name, nlen) == 0 && (*e)[nlen] == '=')
			found[nfound++] = *e;
	unsetenv(name);
	for (i = 0; i < nfound; i++) {
		q = (uintptr_t)found[i];
		if (!have || q < start || q >= end)
			continue;
		sodium_memzero(found[i], strnlen(found[i], end - q));
		wiped++;
	}
	return wiped;
}
