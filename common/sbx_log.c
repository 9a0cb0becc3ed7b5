/* sbx_log.c - one JSON object per log line, secrets redacted before encoding. */
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <pthread.h>
#include <sodium.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "sbx_log.h"

#define REDACTED "[redacted]"

static pthread_mutex_t log_mu = PTHREAD_MUTEX_INITIALIZER;
static char log_prog[64] = "sbx";
static int log_fd = 2;
static int log_min = SBX_LOG_INFO;
static char *log_path;          /* remembered by sbx_log_reopen */
static char **secrets;          /* owned, wiped on removal */
static size_t nsecrets;

static const char *level_names[] = { "debug", "info", "warn", "error" };

const char *
sbx_log_level_name(int level)
{
	if (level < SBX_LOG_DEBUG || level > SBX_LOG_ERROR)
		return "info";
	return level_names[level];
}

int
sbx_log_level_parse(const char *name)
{
	int i;

	if (name == NULL)
		return -1;
	for (i = SBX_LOG_DEBUG; i <= SBX_LOG_ERROR; i++)
		if (strcasecmp(name, level_names[i]) == 0)
			return i;
	if (strcasecmp(name, "warning") == 0)
		return SBX_LOG_WARN;
	return -1;
}

void
sbx_log_init(const char *prog, int fd, int min_level)
{
	pthread_mutex_lock(&log_mu);
	if (prog != NULL)
		snprintf(log_prog, sizeof(log_prog), "%s", prog);
	log_fd = fd;
	log_min = min_level;
	free(log_path);
	log_path = NULL;
	pthread_mutex_unlock(&log_mu);
}

void
sbx_log_set_level(int min_level)
{
	pthread_mutex_lock(&log_mu);
	log_min = min_level;
	pthread_mutex_unlock(&log_mu);
}

int
sbx_log_reopen(const char *path)
{
	char *copy = NULL;
	int fd = -1, rc = -1, saved;

	pthread_mutex_lock(&log_mu);
	if (path == NULL && log_path == NULL) {
		rc = 0;
		goto done;
	}
	if (path != NULL && (copy = strdup(path)) == NULL)
		goto done;
	if ((fd = open(path != NULL ? path : log_path,
	    O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOCTTY, 0640)) == -1)
		goto done;
	if (fd != log_fd && dup2(fd, log_fd) == -1)
		goto done;
	if (copy != NULL) {
		free(log_path);
		log_path = copy;
		copy = NULL;
	}
	rc = 0;
done:
	saved = errno;
	if (fd != -1 && fd != log_fd)
		close(fd);
	free(copy);
	pthread_mutex_unlock(&log_mu);
	errno = saved;
	return rc;
}

static void
wipe_free(char *s)
{
	if (s == NULL)
		return;
	sodium_memzero(s, strlen(s));
	free(s);
}

void
sbx_log_add_secret(const char *s)
{
	char **grown = NULL, *copy = NULL;
	size_t i;
	int failed = 0;

	if (s == NULL || strlen(s) < SBX_LOG_SECRET_MIN)
		return;
	pthread_mutex_lock(&log_mu);
	for (i = 0; i < nsecrets; i++)
		if (strcmp(secrets[i], s) == 0)
			goto done;
	if ((copy = strdup(s)) == NULL ||
	    (grown = realloc(secrets, (nsecrets + 1) * sizeof(*secrets))) == NULL) {
		wipe_free(copy);
		failed = 1;
		goto done;
	}
	secrets = grown;
	secrets[nsecrets++] = copy;
done:
	pthread_mutex_unlock(&log_mu);
	if (failed)
		log_warn("out of memory registering a secret for log redaction", NULL);
}

void
sbx_log_clear_secrets(void)
{
	size_t i;

	pthread_mutex_lock(&log_mu);
	for (i = 0; i < nsecrets; i++)
		wipe_free(secrets[i]);
	free(secrets);
	secrets = NULL;
	nsecrets = 0;
	pthread_mutex_unlock(&log_mu);
}

/*
 * Returns a malloc'd copy of s with every registered secret replaced and
 * every byte that is not part of valid UTF-8 written as "\xNN". Called with
 * log_mu held. NULL when out of memory.
 */
static char *
clean(const char *s)
{
	char *out = NULL, *grown;
	size_t cap, o = 0, i, j, slen, n;
	const unsigned char *p = (const unsigned char *)s;

	slen = strlen(s);
	cap = slen * 4 + 16;
	if ((out = malloc(cap)) == NULL)
		return NULL;
	for (i = 0; i < slen; ) {
		for (j = 0; j < nsecrets; j++) {
			n = strlen(secrets[j]);
			if (n <= slen - i && memcmp(s + i, secrets[j], n) == 0)
				break;
		}
		if (j < nsecrets) {
			if (o + sizeof(REDACTED) >= cap) {
				cap = cap * 2 + sizeof(REDACTED);
				if ((grown = realloc(out, cap)) == NULL)
					goto fail;
				out = grown;
			}
			memcpy(out + o, REDACTED, sizeof(REDACTED) - 1);
			o += sizeof(REDACTED) - 1;
			i += strlen(secrets[j]);
			continue;
		}
		/* Valid UTF-8 sequences are copied whole, anything else escaped. */
		n = 1;
		if (p[i] >= 0x80) {
			size_t len = 0, k;
			unsigned int c = 0, min = 0;

			if ((p[i] & 0xe0) == 0xc0)
				len = 2, c = p[i] & 0x1f, min = 0x80;
			else if ((p[i] & 0xf0) == 0xe0)
				len = 3, c = p[i] & 0x0f, min = 0x800;
			else if ((p[i] & 0xf8) == 0xf0)
				len = 4, c = p[i] & 0x07, min = 0x10000;
			for (k = 1; len > 0 && k < len; k++) {
				if (i + k >= slen || (p[i + k] & 0xc0) != 0x80) {
					len = 0;
					break;
				}
				c = (c << 6) | (p[i + k] & 0x3f);
			}
			if (len == 0 || c < min || c > 0x10ffff ||
			    (c >= 0xd800 && c <= 0xdfff)) {
				if (o + 5 >= cap) {
					cap = cap * 2 + 8;
					if ((grown = realloc(out, cap)) == NULL)
						goto fail;
					out = grown;
				}
				o += (size_t)snprintf(out + o, cap - o, "\\x%02x", p[i]);
				i++;
				continue;
			}
			n = len;
		}
		if (o + n + 1 >= cap) {
			cap = cap * 2 + n + 1;
			if ((grown = realloc(out, cap)) == NULL)
				goto fail;
			out = grown;
		}
		memcpy(out + o, s + i, n);
		o += n;
		i += n;
	}
	out[o] = '\0';
	return out;
fail:
	sodium_memzero(out, o);
	free(out);
	return NULL;
}

/* Sets obj[key] = clean(value) (value NULL: null). Called with log_mu held. */
static int
set_clean(json_t *obj, const char *key, const char *value)
{
	char *k = NULL, *v = NULL, renamed[128];
	json_t *jv = NULL;
	int rc = -1;

	if ((k = clean(key)) == NULL)
		goto done;
	if (value != NULL && (v = clean(value)) == NULL)
		goto done;
	if ((jv = v != NULL ? json_string(v) : json_null()) == NULL)
		goto done;
	if (strcmp(k, "ts") == 0 || strcmp(k, "level") == 0 ||
	    strcmp(k, "prog") == 0 || strcmp(k, "msg") == 0) {
		snprintf(renamed, sizeof(renamed), "field_%s", k);
		rc = json_object_set_new(obj, renamed, jv);
	} else
		rc = json_object_set_new(obj, k, jv);
	jv = NULL;
done:
	json_decref(jv);
	wipe_free(k);
	wipe_free(v);
	return rc;
}

static void
write_all(int fd, const char *buf, size_t len)
{
	ssize_t n;

	while (len > 0) {
		n = write(fd, buf, len);
		if (n == -1 && errno == EINTR)
			continue;
		if (n <= 0)
			return;
		buf += n;
		len -= (size_t)n;
	}
}

void
sbx_logv(int level, const char *msg, va_list ap)
{
	static const char oom[] =
	    "{\"level\":\"error\",\"msg\":\"out of memory building a log line\"}\n";
	json_t *obj = NULL;
	char ts[96], *line = NULL, *m = NULL;
	const char *key, *value;
	struct timespec now;
	struct tm tm;
	size_t len;
	int saved = errno;

	if (level < SBX_LOG_DEBUG || level > SBX_LOG_ERROR)
		level = SBX_LOG_ERROR;
	pthread_mutex_lock(&log_mu);
	if (level < log_min)
		goto done;
	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	snprintf(ts, sizeof(ts), "%04d-%02d-%02dT%02d:%02d:%02d.%03ldZ",
	    tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
	    tm.tm_sec, (now.tv_nsec / 1000000) % 1000);
	if ((obj = json_object()) == NULL ||
	    (m = clean(msg != NULL ? msg : "")) == NULL ||
	    json_object_set_new(obj, "ts", json_string(ts)) != 0 ||
	    json_object_set_new(obj, "level", json_string(level_names[level])) != 0 ||
	    json_object_set_new(obj, "prog", json_string(log_prog)) != 0 ||
	    json_object_set_new(obj, "msg", json_string(m)) != 0)
		goto fail;
	while ((key = va_arg(ap, const char *)) != NULL) {
		value = va_arg(ap, const char *);
		if (set_clean(obj, key, value) != 0)
			goto fail;
		if (value == NULL)
			break;
	}
	if ((line = json_dumps(obj, JSON_COMPACT | JSON_PRESERVE_ORDER)) == NULL)
		goto fail;
	len = strlen(line);
	/* One write(2) per line, so lines of concurrent writers never mix. */
	{
		char *nl = realloc(line, len + 2);

		if (nl == NULL)
			goto fail;
		line = nl;
		line[len++] = '\n';
		line[len] = '\0';
	}
	write_all(log_fd, line, len);
	goto done;
fail:
	write_all(log_fd, oom, sizeof(oom) - 1);
done:
	if (line != NULL) {
		sodium_memzero(line, strlen(line));
		free(line);
	}
	wipe_free(m);
	json_decref(obj);
	pthread_mutex_unlock(&log_mu);
	errno = saved;
}

void
sbx_log(int level, const char *msg, ...)
{
	va_list ap;

	va_start(ap, msg);
	sbx_logv(level, msg, ap);
	va_end(ap);
}

#define LOG_FN(fn, level)                        \
	void fn(const char *msg, ...)            \
	{                                        \
		va_list ap;                      \
		va_start(ap, msg);               \
		sbx_logv(level, msg, ap);        \
		va_end(ap);                      \
	}

LOG_FN(log_debug, SBX_LOG_DEBUG)
LOG_FN(log_info, SBX_LOG_INFO)
LOG_FN(log_warn, SBX_LOG_WARN)
LOG_FN(log_error, SBX_LOG_ERROR)

void
fatal(int exit_code, const char *msg, ...)
{
	va_list ap;

	va_start(ap, msg);
	sbx_logv(SBX_LOG_ERROR, msg, ap);
	va_end(ap);
	exit(exit_code);
}
