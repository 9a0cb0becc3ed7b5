/* proxy_int.h - what sbx-proxy's files share: the proxy's state (owned by the entry, sbx_proxy.c, and handed down), one connection's entry point (proxy_conn.c) and the decision log (proxy_log.c). */
#ifndef SBX_PROXY_INT_H
#define SBX_PROXY_INT_H

#include <stdio.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <event2/util.h>

struct event_base;
struct evdns_base;
struct evconnlistener;
struct proxy_policy;

/*
 * The proxy's state: one per process, filled by main from its options and
 * passed to the listener, so each connection reaches it as k->px (no file
 * but the entry names the instance).
 */
struct px {
	struct event_base *base;
	struct evdns_base *dns;
	struct proxy_policy *pol;         /* replaced in place on SIGHUP */
	const char *policy_file;
	unsigned long allowed, denied;    /* decisions so far (the log's counts) */
	int conns, max_conns;
	int head_ms, connect_ms, idle_ms, dns_ms;
	struct sockaddr_un relay_to;      /* relay mode: the proxy's socket */
	int relay;
	int counts_fd;                    /* --counts FILE, or -1 */
	int counts_failed;                /* a write failed: said once */
};

/*
 * The listener's callback (evconnlistener_cb, arg: the struct px): takes
 * fd over and runs one connection to its end. Above px->max_conns the
 * client gets 503 at once (a "deny" line); in relay mode the bytes go on
 * unparsed to px->relay_to, a refusal retried for RELAY_GRACE_MS (2 s) of the connection. Every
 * decision is a line of proxy_emit; nothing is returned.
 */
void proxy_accepted(struct evconnlistener *l, evutil_socket_t fd,
    struct sockaddr *sa, int salen, void *arg);

/*
 * One decision line on stdout, flushed: {"ts","event",["host","port"],
 * ["addr"],["reason"],"allowed","denied"} with px's running counts, which
 * are then written to the counts file (a failed write is said once on
 * stderr). host NULL: no host and port; addr, reason NULL: left out.
 * Strings are escaped (proxy_json_str); paths and header values are never
 * passed here.
 */
void proxy_emit(struct px *px, const char *event, const char *host,
    unsigned port, const char *reason, const char *addr);

/* One {"level":"info","msg":...[,"detail":...]} line on stderr. */
void proxy_logline(const char *msg, const char *detail);

/* s as a JSON string to f: '"' and '\\' escaped, every byte below 0x20 or
 * from 0x7f up as \u00XX. */
void proxy_json_str(FILE *f, const char *s);

#endif
