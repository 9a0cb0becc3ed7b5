/* proxy_log.c - sbx-proxy's decision log: one JSON line per decision on stdout with the running allowed/denied counts (kept in the --counts file, adr/0027), and its own log lines on stderr; calls only libc and proxy_counts.c. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "proxy_counts.h"
#include "proxy_int.h"

void
proxy_json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; *s != '\0'; s++) {
		unsigned char c = (unsigned char)*s;

		if (c == '"' || c == '\\')
			fprintf(f, "\\%c", c);
		else if (c < 0x20 || c >= 0x7f)
			fprintf(f, "\\u%04x", c);
		else
			fputc(c, f);
	}
	fputc('"', f);
}

static void
counts_save(struct px *px)
{
	if (proxy_counts_save(px->counts_fd, px->allowed, px->denied) != 0 &&
	    !px->counts_failed) {
		px->counts_failed = 1;
		proxy_logline("cannot write the counts file", strerror(errno));
	}
}

void
proxy_emit(struct px *px, const char *event, const char *host, unsigned port,
    const char *reason, const char *addr)
{
	char ts[40];
	struct timespec now;
	struct tm tm;

	clock_gettime(CLOCK_REALTIME, &now);
	gmtime_r(&now.tv_sec, &tm);
	strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%S", &tm);
	printf("{\"ts\":\"%s.%03ldZ\",\"event\":", ts, now.tv_nsec / 1000000);
	proxy_json_str(stdout, event);
	if (host != NULL) {
		printf(",\"host\":");
		proxy_json_str(stdout, host);
		printf(",\"port\":%u", port);
	}
	if (addr != NULL) {
		printf(",\"addr\":");
		proxy_json_str(stdout, addr);
	}
	if (reason != NULL) {
		printf(",\"reason\":");
		proxy_json_str(stdout, reason);
	}
	printf(",\"allowed\":%lu,\"denied\":%lu}\n", px->allowed, px->denied);
	fflush(stdout);
	counts_save(px);
}

void
proxy_logline(const char *msg, const char *detail)
{
	fprintf(stderr, "{\"level\":\"info\",\"msg\":");
	proxy_json_str(stderr, msg);
	if (detail != NULL) {
		fprintf(stderr, ",\"detail\":");
		proxy_json_str(stderr, detail);
	}
	fprintf(stderr, "}\n");
}
